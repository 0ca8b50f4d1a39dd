"""An MCP tool's input schema made fit for strict servers and small models, as Gemini CLI does
for its API: only the JSON-Schema keywords every tool-calling server takes are kept, `$ref`s to
the schema's own `$defs` are inlined (a recursive one, or one too deep, becomes a bare object),
a nullable type becomes its other type, `oneOf` becomes `anyOf`, `const` an `enum` of one, and
the root is always an object. Pure: a function of the schema alone, whatever a server sends."""

from __future__ import annotations

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
        "pattern",
    }
)
"""What survives; everything else (`$schema`, `$id`, `additionalProperties`, `format`,
`default`, `examples`, `title`, `if`/`then`, ...) is dropped."""
TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean"})
MAX_DEPTH = 8
"""Nesting kept; below it a value is described as a bare object."""
DESCRIPTION_CHARS = 600


def normalised(schema: object) -> dict[str, Any]:
    """The schema of a tool's arguments: an object, with only the kept keywords."""
    if not isinstance(schema, dict):
        return {"type": "object", "properties": {}}
    definitions = {
        **_mapping(schema.get("definitions")),
        **_mapping(schema.get("$defs")),
    }
    root = _node(schema, definitions, 0, frozenset())
    if root.get("type") != "object":
        return {"type": "object", "properties": {}}
    root.setdefault("properties", {})
    return root


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _resolved(
    node: dict[str, Any], definitions: dict[str, Any], seen: frozenset[str]
) -> tuple[dict[str, Any] | None, frozenset[str]]:
    """The definition a local `$ref` names (None for one that is recursive or not found)."""
    ref = node.get("$ref")
    if not isinstance(ref, str):
        return node, seen
    name = ref.rsplit("/", 1)[-1]
    target = definitions.get(name) if ref.startswith(("#/$defs/", "#/definitions/")) else None
    if not isinstance(target, dict) or name in seen:
        return None, seen
    merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return merged, seen | {name}


def _node(
    raw: object, definitions: dict[str, Any], depth: int, seen: frozenset[str]
) -> dict[str, Any]:
    if not isinstance(raw, dict):
        return {}
    node, seen = _resolved(raw, definitions, seen)
    if node is None or depth > MAX_DEPTH:
        return {"type": "object"}
    node = _simplified(node)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in KEPT:
            kept = _value(key, value, definitions, depth, seen)
            if kept is not None:
                out[key] = kept
    return _consistent(out)


def _value(
    key: str, value: object, definitions: dict[str, Any], depth: int, seen: frozenset[str]
) -> object:
    """A kept keyword's value, made right; None where it is of no use."""
    if key == "properties":
        if not isinstance(value, dict):
            return None
        return {str(k): _node(sub, definitions, depth + 1, seen) for k, sub in value.items()}
    if key == "items":
        return _node(value, definitions, depth + 1, seen)
    if key == "anyOf":
        if not isinstance(value, list):
            return None
        options = [_node(sub, definitions, depth + 1, seen) for sub in value]
        return [option for option in options if option] or [{"type": "object"}]
    if key == "type":
        return value if isinstance(value, str) and value in TYPES else None
    if key == "description":
        return value[:DESCRIPTION_CHARS] if isinstance(value, str) else None
    if key in ("enum", "required"):
        if not isinstance(value, list):
            return None
        return [item for item in value if isinstance(item, str | int | float | bool)]
    return value if isinstance(value, int | float | str) and not isinstance(value, bool) else None


def _simplified(node: dict[str, Any]) -> dict[str, Any]:
    """Nullable types and `oneOf`/`allOf`/`const` in the forms strict servers take."""
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
            node = {**options[0], **{k: v for k, v in node.items() if k != "type"}}
        else:
            node["anyOf"] = options
    parts = node.pop("allOf", None)
    if isinstance(parts, list):
        for part in (p for p in parts if isinstance(p, dict)):
            properties = {**_mapping(node.get("properties")), **_mapping(part.get("properties"))}
            node = {**part, **node}
            if properties:
                node["properties"] = properties
    if "type" not in node and "properties" in node:
        node["type"] = "object"
    return node


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
