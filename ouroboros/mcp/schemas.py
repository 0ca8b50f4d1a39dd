"""An MCP tool's input schema made fit for strict servers and small models, as Gemini CLI does
for its API: only the JSON-Schema keywords every tool-calling server takes are kept, `$ref`s to
the schema's own `$defs` are inlined (a recursive one, or one too deep, becomes a bare object),
a nullable type becomes its other type, `oneOf` becomes `anyOf`, `allOf` one node, `const` an
`enum` of one, and the root is always an object. A schema that would grow past `NODE_BUDGET`
nodes once inlined (shared `$ref`s multiply at every use) is offered as a bare object (`cut`).
Pure: a function of the schema alone, whatever a server sends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KEPT = frozenset(
    {
        "type",
        "description",
        "properties",
        "required",
        "items",
        "enum",
        "anyOf",
        "minimum",
        "maximum",
        "minItems",
        "maxItems",
        "minLength",
        "maxLength",
    }
)
"""What survives; everything else (`$schema`, `$id`, `additionalProperties`, `format`,
`default`, `examples`, `title`, `if`/`then`, ...) is dropped. So is `pattern`: llama-server (and
LM Studio, Ollama) turn the schemas into a grammar and refuse the request (HTTP 400, fatal to the
run) for a pattern not anchored `^...$` or using regex it does not convert; no pattern is safe
for all of them, and the server checks its own arguments anyway (a refusal is a tool error)."""
REPEAT_LIMIT = 100
"""The largest `minLength`/`maxLength`/`minItems`/`maxItems` kept: a grammar repeats its rule
that many times, so a larger bound (a `maxLength` of 100000) is left to the server to check."""
BOUNDS = frozenset({"minItems", "maxItems", "minLength", "maxLength"})
TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean"})
MAX_DEPTH = 8
"""Nesting kept; below it a value is described as a bare object."""
NODE_BUDGET = 3000
"""Nodes and enum values the schema may have once inlined; past it the tool takes any object."""
SCHEMA_DESCRIPTION_CHARS = 600
"""Of each description inside a schema."""


@dataclass(frozen=True)
class Fitted:
    schema: dict[str, Any]
    cut: bool
    """Over `NODE_BUDGET`: `schema` is a bare object with the root's description."""


def normalised(schema: object) -> dict[str, Any]:
    """The schema of a tool's arguments: an object, with only the kept keywords."""
    return fitted(schema).schema


def fitted(schema: object) -> Fitted:
    """`normalised`, saying whether the schema was too large and cut to a bare object."""
    bare: dict[str, Any] = {"type": "object", "properties": {}}
    if not isinstance(schema, dict):
        return Fitted(bare, cut=False)
    walk = _Walk({**_mapping(schema.get("definitions")), **_mapping(schema.get("$defs"))})
    try:
        root = walk.node(schema, 0, frozenset())
    except _OverBudget:
        description = schema.get("description")
        if isinstance(description, str):
            bare["description"] = description[:SCHEMA_DESCRIPTION_CHARS]
        return Fitted(bare, cut=True)
    if root.get("type") != "object":
        return Fitted(bare, cut=False)
    root.setdefault("properties", {})
    return Fitted(root, cut=False)


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _listed(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


class _OverBudget(Exception):
    pass


@dataclass
class _Walk:
    definitions: dict[str, Any]
    nodes: int = field(default=0)

    def count(self, nodes: int) -> None:
        self.nodes += nodes
        if self.nodes > NODE_BUDGET:
            raise _OverBudget

    def resolved(
        self, node: dict[str, Any], seen: frozenset[str]
    ) -> tuple[dict[str, Any] | None, frozenset[str]]:
        """The definition a local `$ref` names (None for one that is recursive or not found),
        with the node's own keywords over it."""
        ref = node.get("$ref")
        if not isinstance(ref, str):
            return node, seen
        name = ref.rsplit("/", 1)[-1]
        local = ref.startswith(("#/$defs/", "#/definitions/"))
        target = self.definitions.get(name) if local else None
        if not isinstance(target, dict) or name in seen:
            return None, seen
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return self.resolved(merged, seen | {name})

    def node(self, raw: object, depth: int, seen: frozenset[str]) -> dict[str, Any]:
        if not isinstance(raw, dict):
            return {}
        self.count(1)
        simplified, seen = self.simplified(raw, seen)
        if simplified is None or depth > MAX_DEPTH:
            return {"type": "object"}
        out: dict[str, Any] = {}
        for key, value in simplified.items():
            if key in KEPT:
                kept = self.value(key, value, depth, seen)
                if kept is not None:
                    out[key] = kept
        return _consistent(out)

    def value(self, key: str, value: object, depth: int, seen: frozenset[str]) -> object:
        """A kept keyword's value, made right; None where it is of no use."""
        if key == "properties":
            if not isinstance(value, dict):
                return None
            return {str(k): self.node(sub, depth + 1, seen) for k, sub in value.items()}
        if key == "items":
            return self.node(value, depth + 1, seen)
        if key == "anyOf":
            if not isinstance(value, list):
                return None
            options = [self.node(sub, depth + 1, seen) for sub in value]
            return [option for option in options if option] or [{"type": "object"}]
        if key == "type":
            return value if isinstance(value, str) and value in TYPES else None
        if key == "description":
            return value[:SCHEMA_DESCRIPTION_CHARS] if isinstance(value, str) else None
        if key in ("enum", "required"):
            if not isinstance(value, list):
                return None
            self.count(len(value))
            return [item for item in value if isinstance(item, str | int | float | bool)]
        if not isinstance(value, int | float) or isinstance(value, bool):
            return None
        return None if key in BOUNDS and value > REPEAT_LIMIT else value

    def simplified(
        self, raw: dict[str, Any], seen: frozenset[str]
    ) -> tuple[dict[str, Any] | None, frozenset[str]]:
        """Its `$ref` inlined, nullable types and `oneOf`/`allOf`/`const` in the forms strict
        servers take (None for a `$ref` that cannot be inlined)."""
        node, seen = self.resolved(raw, seen)
        if node is None:
            return None, seen
        node = dict(node)
        kind = node.get("type")
        if isinstance(kind, list):
            others = [k for k in kind if k != "null"]
            node["type"] = others[0] if others else "string"
        if "const" in node and "enum" not in node:
            node["enum"] = [node["const"]]
        choices = node.pop("oneOf", None) or node.get("anyOf")
        if isinstance(choices, list):
            options = [c for c in choices if not (isinstance(c, dict) and c.get("type") == "null")]
            if len(options) == 1 and isinstance(options[0], dict):
                node.pop("anyOf", None)
                only, seen = self.simplified(options[0], seen)
                if only is None:
                    return None, seen
                node = {**only, **{k: v for k, v in node.items() if k != "type"}}
            else:
                node["anyOf"] = options
        parts = node.pop("allOf", None)
        if isinstance(parts, list):
            node, seen = self.all_of(node, parts, seen)
        if "type" not in node and "properties" in node:
            node["type"] = "object"
        return node, seen

    def all_of(
        self, node: dict[str, Any], parts: list[Any], seen: frozenset[str]
    ) -> tuple[dict[str, Any], frozenset[str]]:
        """The node with each part of its `allOf` merged in, each part's `$ref` inlined first."""
        for raw_part in (p for p in parts if isinstance(p, dict)):
            self.count(1)
            part, seen = self.simplified(raw_part, seen)
            if part is None:
                continue
            properties = {**_mapping(part.get("properties")), **_mapping(node.get("properties"))}
            required = [*_listed(part.get("required")), *_listed(node.get("required"))]
            node = {**part, **node}
            if properties:
                node["properties"] = properties
            if required:
                node["required"] = required
        return node, seen


def _consistent(node: dict[str, Any]) -> dict[str, Any]:
    """`required` names only properties there are; an object without properties gets none."""
    if node.get("type") == "object":
        properties = node.get("properties", {})
        required = [name for name in node.get("required", []) if name in properties]
        node.pop("required", None)
        if required:
            node["required"] = required
    else:
        node.pop("properties", None)
        node.pop("required", None)
    if node.get("type") != "array":
        node.pop("items", None)
    return node
