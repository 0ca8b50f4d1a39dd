"""The config file read: TOML, then the environment, then command-line flags, checked at once.

A bad value stops the program before anything starts, with one line naming the key (`ConfigError`).
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ouroboros.ground.config import PathSettings, Settings
from ouroboros.ground.config_names import unknown_key, unknown_variables
from ouroboros.ground.errors import ConfigError


def to_toml(sections: dict[str, dict[str, Any]]) -> str:
    """A config file's text from `{section: {key: value}}`."""
    return "".join(
        f"[{name}]\n" + "".join(f"{key} = {_toml_value(value)}\n" for key, value in values.items())
        for name, values in sections.items()
    )


def _toml_value(value: Any) -> str:
    """JSON literals are valid TOML, but not JSON objects: a dict is an inline table."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config file: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None


def _describe(error: ValidationError, source: Path) -> str:
    parts = []
    for item in error.errors():
        key = ".".join(str(p) for p in item["loc"]) or "config"
        # A value from the environment is named by its variable, not blamed on the file.
        variable = "OUROBOROS_" + "__".join(str(p) for p in item["loc"]).upper()
        if item["loc"] and variable in os.environ:
            key = variable
        if item["type"] == "extra_forbidden":
            parts.append(unknown_key(Settings, item["loc"]))
        elif item["type"] == "value_error":
            said = str(item["msg"]).removeprefix("Value error, ")
            parts.append(f"{key}: {said}" if key.startswith("OUROBOROS_") else said)
        else:
            parts.append(f"{key}: {item['msg']} (got {item.get('input')!r})")
    named = all(p.startswith("OUROBOROS_") for p in parts)
    return "; ".join(parts) if named else f"{source}: " + "; ".join(parts)


def load_settings(
    config_path: Path, overrides: dict[str, dict[str, Any]] | None = None
) -> Settings:
    """Load and validate; paths come back absolute, resolved against the config file's folder."""
    data = _read_toml(config_path) if config_path.exists() else {}
    # pydantic-settings reads the variables of known sections only: a mistyped section would
    # be ignored.
    unknown = unknown_variables(Settings, os.environ)
    if unknown:
        raise ConfigError("; ".join(unknown))
    try:
        settings = Settings(**data)
        # Command-line flags win over the environment, which wins over the file.
        for section, values in (overrides or {}).items():
            for key, value in values.items():
                setattr(getattr(settings, section), key, value)
    except ValidationError as e:
        raise ConfigError(_describe(e, config_path)) from None
    base = config_path.resolve().parent
    paths = settings.paths
    for name in ("workspace", "state_dir"):
        path: Path = getattr(paths, name)
        setattr(paths, name, (base / path.expanduser()).resolve())
    # Its folder is the user's; a link at its name (the agent may edit the file when it lies
    # in the workspace) is refused when it is read, never followed.
    prompt = base / paths.system_prompt.expanduser()
    paths.system_prompt = prompt.parent.resolve() / prompt.name
    _keep_run_files_out_of_workspace(paths, config_path)
    settings.tools.readable = _readable(settings.tools.readable, base)
    return settings


def _readable(paths: list[Path], base: Path) -> list[Path]:
    """`tools.readable` resolved as the other paths are."""
    return [base / path.expanduser() for path in paths]


def check_readable(settings: Settings) -> None:
    """A `tools.readable` path that is not there is refused before a run starts, as it would
    grant nothing (a mistyped `/usr` leaves commands without their programs). Only for a run:
    `tell` or `pause` must still reach a run whose config names a path removed since."""
    missing = [str(path) for path in settings.tools.readable if not os.path.exists(path)]
    if missing:
        raise ConfigError(
            f"tools.readable: {', '.join(missing)}: no such file or folder: remove it, or "
            "name one that is there"
        )


def _keep_run_files_out_of_workspace(paths: PathSettings, config: Path) -> None:
    """The run's own files (the state folder, the config with its limits) lie outside the
    workspace, out of reach of the agent's commands, and it outside them; the agent may improve
    `SYSTEM_PROMPT.md`, so that may be in it."""
    workspace, state = paths.workspace, paths.state_dir
    pairs = [
        ("paths.state_dir", state, "workspace", workspace),
        ("paths.workspace", workspace, "state_dir", state),
    ]
    if config.exists():
        pairs.append(("the config file", config.resolve(), "workspace", workspace))
    for name, path, key, folder in pairs:
        if path == folder or folder in path.parents:
            raise ConfigError(
                f"{name} {path} is inside paths.{key} {folder}: the agent could rewrite the "
                "run's own files; give the workspace a folder of its own (paths.workspace = "
                '"workspace"), apart from the state folder and the config file'
            )
