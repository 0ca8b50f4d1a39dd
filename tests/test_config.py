"""Configuration: file, environment and flags; every bad value named in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ouroboros.config_file import load_settings
from ouroboros.errors import ConfigError
from ouroboros.observe.status import state_dir_of

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "config.toml"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_shipped_config_loads_with_documented_defaults() -> None:
    s = load_settings(DEFAULT_CONFIG)
    assert s.llm.base_url == "http://localhost:11434/v1"
    assert (s.context.soft_threshold, s.context.hard_threshold) == (0.70, 0.90)
    assert s.context.carryover_turns == 5
    assert (s.context.tool_output_max_tokens, s.context.max_tool_output_bytes) == (7500, None)
    assert s.supervisor.max_restarts is None
    assert s.supervisor.auto_restart is True
    assert s.paths.workspace == DEFAULT_CONFIG.parent / "workspace"


def test_relative_paths_resolve_against_the_config_folder(tmp_path: Path) -> None:
    path = write(tmp_path, '[paths]\nworkspace = "ws"\nstate_dir = "../state"\n')
    s = load_settings(path)
    assert s.paths.workspace == tmp_path / "ws"
    assert s.paths.state_dir == tmp_path.parent / "state"
    assert s.paths.system_prompt == tmp_path / "SYSTEM_PROMPT.md"


def test_environment_overrides_file_and_flags_override_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, '[llm]\nmodel = "from-file"\n[supervisor]\nmax_total_turns = 3\n')
    monkeypatch.setenv("OUROBOROS_LLM__MODEL", "from-env")
    monkeypatch.setenv("OUROBOROS_SUPERVISOR__MAX_TOTAL_TURNS", "5")
    s = load_settings(path, {"supervisor": {"max_total_turns": 9}})
    assert s.llm.model == "from-env"
    assert s.supervisor.max_total_turns == 9


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "[context]\nsoft_threshold = 1.5\n",
            "context.soft_threshold: Input should be less than 1",
        ),
        ("[context]\nsoft_threshold = 0.9\nhard_threshold = 0.8\n", "must be below"),
        ("[context]\nlimt = 4096\n", "context.limt: unknown key"),
        ("[nonsense]\nx = 1\n", "nonsense: unknown key"),
        ('[llm]\ntimeout_s = "soon"\n', "llm.timeout_s"),
        ("[llm\n", "not valid TOML"),
        ("[supervisor]\nmax_restarts = -1\n", "supervisor.max_restarts"),
    ],
)
def test_bad_values_are_named(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, text))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)
    assert str(tmp_path / "config.toml") in str(caught.value)


def test_unreadable_file(tmp_path: Path) -> None:
    # A folder where the file should be: unreadable even for root, unlike a chmod 0 file.
    path = tmp_path / "config.toml"
    path.mkdir()
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_settings(path)


@pytest.mark.parametrize(
    ("toml", "env"),
    [
        ("", None),
        ('[paths]\nstate_dir = "runs/a"\n', None),
        ('[paths]\nstate_dir = "/tmp/elsewhere/.ouroboros"\n', None),
        ('[paths]\nstate_dir = "runs/a"\n', "from-env"),
        ('[llm]\nmodel = "m"\n', "~/state"),
    ],
)
def test_status_finds_the_state_folder_the_settings_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toml: str, env: str | None
) -> None:
    """`status` resolves paths.state_dir without loading the settings (to answer fast): it must
    land where the settings do."""
    config = tmp_path / "config.toml"
    config.write_text(toml)
    monkeypatch.delenv("OUROBOROS_PATHS__STATE_DIR", raising=False)
    if env is not None:
        monkeypatch.setenv("OUROBOROS_PATHS__STATE_DIR", env)
    assert state_dir_of(config) == load_settings(config).paths.state_dir
