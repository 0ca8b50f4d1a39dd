"""The names settings have, and the known name closest to a mistyped one: a key of the config
file, an `OUROBOROS_*` variable (`cli_parser.py` does the same for a command)."""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel

PREFIX = "OUROBOROS_"
OTHER_VARIABLES = frozenset(
    {
        "OUROBOROS_EVENT",  # what a hook gets (operator/hooks.py): a hook may call ouroboros
        "OUROBOROS_SUMMARY",
        "OUROBOROS_MODEL_CACHE",  # scripts/real_server.py
        "OUROBOROS_LLAMA_SERVER",
        "OUROBOROS_TEST_MARK",
        "OUROBOROS_SERVER_ID",  # each process of the managed server (server/pidfile.py)
    }
)
"""`OUROBOROS_*` variables that are no setting: never refused. A new one goes here."""

SettingPath = tuple[str | int, ...]
"""Where a setting is: `("context", "soft_threshold")`; a list's index or a dict's key on the
way (`("hooks", "on", 0, "events")`)."""


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name `name` most likely meant, if one is close enough."""
    found = difflib.get_close_matches(name, list(known), n=1)
    return found[0] if found else None


def _inside(annotation: Any) -> tuple[type[BaseModel] | None, int]:
    """The settings model a field holds (unwrapping lists, dicts and `| None`), and how many
    keys or indexes lie on the way to it."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, 0
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is dict:
        return _inside(args[1])[0], 1
    if origin is list:
        return _inside(args[0])[0], 1
    if origin in (Union, types.UnionType):
        for arg in args:
            model, depth = _inside(arg)
            if model is not None:
                return model, depth
    return None, 0


def _first_unknown(root: type[BaseModel], path: Sequence[str | int]) -> int | None:
    """The index in `path` of the first part that names no setting; None when all do."""
    model: type[BaseModel] | None = root
    skip = 0
    for index, part in enumerate(path):
        if skip:  # a list's index or a dict's key: any
            skip -= 1
            continue
        if model is None or part not in model.model_fields:
            return index
        model, skip = _inside(model.model_fields[part].annotation)
    return None


def _model_at(root: type[BaseModel], path: Sequence[str | int]) -> type[BaseModel] | None:
    """The settings model holding the last part of `path` (whose earlier parts are known)."""
    model: type[BaseModel] | None = root
    skip = 0
    for part in path[:-1]:
        if skip:
            skip -= 1
        elif model is not None and part in model.model_fields:
            model, skip = _inside(model.model_fields[part].annotation)
    return None if skip else model


def _keys(root: type[BaseModel]) -> dict[str, tuple[str, ...]]:
    """Every key of every section by its own name (the first section's where two share one)."""
    keys: dict[str, tuple[str, ...]] = {}
    for section, field in root.model_fields.items():
        model, depth = _inside(field.annotation)
        if model is not None and depth == 0:
            for key in model.model_fields:
                keys.setdefault(key, (section, key))
    return keys


def suggestion(root: type[BaseModel], path: SettingPath) -> SettingPath | None:
    """The known setting an unknown `path` most likely meant: a close name in the same place
    (`soft_treshold`: `soft_threshold`), else, for a key of a section or at the top, a key of
    that name or close to it in another section (`llm.limit`: `context.limit`)."""
    bad = _first_unknown(root, path)
    if bad is None:
        return None
    model = _model_at(root, path[: bad + 1])
    name = str(path[bad])
    if model is not None:
        near = closest(name, model.model_fields)
        if near is not None:
            return (*path[:bad], near, *path[bad + 1 :])
    keys = _keys(root)
    near = closest(name, keys)
    if near is not None and bad == len(path) - 1 and bad <= 1:
        return keys[near]
    return None


def unknown_key(root: type[BaseModel], path: SettingPath) -> str:
    """`context.soft_treshold: unknown key; did you mean soft_threshold?` (only the last part
    when the rest is as given)."""
    what = "section" if len(path) == 1 else "key"
    line = f"{'.'.join(str(p) for p in path)}: unknown {what}"
    meant = suggestion(root, path)
    if meant is not None:
        same_place = meant[:-1] == path[:-1]
        line += f"; did you mean {meant[-1] if same_place else '.'.join(map(str, meant))}?"
    return line


def unknown_variables(root: type[BaseModel], environ: Mapping[str, str]) -> list[str]:
    """A line for each `OUROBOROS_*` variable that names no setting (`OUROBOROS_TOOL__SANDBOX`),
    the names compared as pydantic-settings reads them, in any case."""
    lines = []
    for variable in sorted(environ):
        name = variable.upper()
        if not name.startswith(PREFIX) or name in OTHER_VARIABLES:
            continue
        path = tuple(name.removeprefix(PREFIX).lower().split("__"))
        if _first_unknown(root, path) is None:
            continue
        line = f"{variable}: no such setting"
        meant = suggestion(root, path)
        if meant is not None:
            line += f"; did you mean {PREFIX}{'__'.join(map(str, meant)).upper()}?"
        lines.append(line)
    return lines
