"""Configuration: file, environment and flags; every bad value named in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ouroboros.ground.config import Settings
from ouroboros.ground.config_file import check_readable, load_settings
from ouroboros.ground.config_names import OTHER_VARIABLES, PREFIX, unknown_variables
from ouroboros.ground.errors import ConfigError
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
    # A model without tool calls (Ollama's gemma3) runs: text once the server refuses tools.
    assert s.llm.tool_protocol == Settings().llm.tool_protocol == "auto"


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
        ("[context]\nlimt = 4096\n", "context.limt: unknown key; did you mean limit?"),
        (
            "[context]\nsoft_treshold = 0.6\n",
            "context.soft_treshold: unknown key; did you mean soft_threshold?",
        ),
        ("[llm]\nlimit = 4096\n", "llm.limit: unknown key; did you mean context.limit?"),
        ('[tool]\nsandbox = "off"\n', "tool: unknown section; did you mean tools?"),
        ("[nonsense]\nx = 1\n", "nonsense: unknown section"),
        (
            '[[hooks.on]]\nevents = ["error"]\ncommand = ["true"]\ncomand = ["x"]\n',
            "hooks.on.0.comand: unknown key; did you mean command?",
        ),
        ("[tools]\nreadable = []\n", "tools.readable is empty: commands could run nothing"),
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


@pytest.mark.parametrize(
    ("variable", "message"),
    [
        (
            "OUROBOROS_TOOL__SANDBOX",
            "OUROBOROS_TOOL__SANDBOX: no such setting; did you mean OUROBOROS_TOOLS__SANDBOX?",
        ),
        ("OUROBOROS_LLM_MODEL", "did you mean OUROBOROS_LLM__MODEL?"),
        ("ouroboros_context__soft_treshold", "did you mean OUROBOROS_CONTEXT__SOFT_THRESHOLD?"),
        (
            "OUROBOROS_MCP__SERVERS__TIME__COMAND",
            "did you mean OUROBOROS_MCP__SERVERS__TIME__COMMAND",
        ),
        ("OUROBOROS_LLM__MODEL__NAME", "OUROBOROS_LLM__MODEL__NAME: no such setting"),
        ("OUROBOROS_NONSENSE", "OUROBOROS_NONSENSE: no such setting"),
    ],
)
def test_a_variable_that_names_no_setting_is_refused_with_the_one_meant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, message: str
) -> None:
    """pydantic-settings reads only the variables of the sections it knows: a mistyped section
    would be ignored, the setting silently left as it was."""
    monkeypatch.setenv(variable, "landlock")
    with pytest.raises(ConfigError) as caught:
        load_settings(write(tmp_path, ""))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_variables_that_are_no_settings_or_not_ours_are_let_be(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in OTHER_VARIABLES | {"OUROBOROSX", "MY_OUROBOROS_THING"}:
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("OUROBOROS_MCP__SERVERS__TIME__COMMAND", "mcp-server-time")
    monkeypatch.setenv("OUROBOROS_MCP__SERVERS__TIME__ENV", '{"TZ": "UTC"}')
    monkeypatch.setenv("OUROBOROS_SESSION", '{"max_turns": 7}')
    s = load_settings(write(tmp_path, ""))
    assert s.mcp.servers["time"].command == "mcp-server-time"
    assert s.session.max_turns == 7


def test_every_ouroboros_variable_the_project_uses_is_let_be() -> None:
    """A variable the harness sets for a hook (which may call `python -m ouroboros`), or a
    script reads, must not be refused as a mistyped setting: each one is a setting or listed."""
    root = Path(__file__).resolve().parents[1]
    mistyped_on_purpose = {Path(__file__).resolve(), root / "tests" / "test_cli_errors.py"}
    sources = [
        p
        for folder in ("ouroboros", "scripts", "bench", "tests")
        for p in (root / folder).rglob("*.py")
        if p not in mistyped_on_purpose
    ]
    used = {
        name
        for path in sources
        for name in re.findall(r"[\"'](OUROBOROS_[A-Z0-9_]+)[\"']", path.read_text())
        if name != PREFIX
    }
    assert "OUROBOROS_SUMMARY" in used
    assert unknown_variables(Settings, dict.fromkeys(used, "")) == []


@pytest.mark.parametrize("listed", [["/no/such/folder"], ["/usr", "missing"]])
def test_readable_paths_that_are_not_there_are_named(tmp_path: Path, listed: list[str]) -> None:
    settings = load_settings(write(tmp_path, f"[tools]\nreadable = {json.dumps(listed)}\n"))
    with pytest.raises(ConfigError) as caught:
        check_readable(settings)
    missing = listed[-1] if listed[-1].startswith("/") else str(tmp_path / listed[-1])
    assert f"tools.readable: {missing}: no such file or folder" in str(caught.value)


def test_readable_paths_resolve_against_the_config_folder(tmp_path: Path) -> None:
    (tmp_path / "tools").mkdir()
    s = load_settings(write(tmp_path, '[tools]\nreadable = ["/usr", "tools"]\n'))
    assert s.tools.readable == [Path("/usr"), tmp_path / "tools"]
