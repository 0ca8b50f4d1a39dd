"""Settings: every key, its default and its bounds, one model per component.

`config.toml`, overridden by `OUROBOROS_<SECTION>__<KEY>` env vars, then CLI flags: read by
`config_file.load_settings`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from ouroboros.ground.checkpoint_settings import CheckpointSettings
from ouroboros.ground.dead_end_settings import DeadEndSettings
from ouroboros.ground.mcp_settings import McpSettings

COMMAND_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TZ", "TERM",
    "COLUMNS", "LINES", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONIOENCODING",
)  # fmt: skip
"""What a command inherits by default (`tools.env`); hooks get these and a few more."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


ToolProtocol = Literal["auto", "native", "text", "files"]


class LLMSettings(_Section):
    """How to reach the model server."""

    base_url: str = "http://localhost:11434/v1"
    """OpenAI-compatible endpoint (Ollama by default)."""
    model: str = "qwen3:8b"
    """Model name as the server knows it."""
    api_key: str = "ollama"
    """Sent as a bearer token; local servers ignore it."""
    timeout_s: float = Field(600.0, gt=0)
    """Longest wait for the reply to move on: its first chunk (local prefill of a long prompt
    can take minutes), then each piece of text or call (empty chunks are no progress)."""
    reply_timeout_s: float = Field(3600.0, gt=0)
    """Longest a whole reply may take, however it trickles in."""
    max_output_tokens: int = Field(1024, ge=16)
    """`max_tokens` of every request, and the room reserved for it in the context budget."""
    temperature: float = Field(0.7, ge=0, le=2)
    """Always sent: Ollama's /v1 otherwise forces 1.0 over the Modelfile's value."""
    seed: int | None = Field(None, ge=0, le=2**31 - 1)
    """Sampling seed for runs that must repeat (benchmarks): each request sends this plus the
    number of requests the process made before it, so a prompt asked again is drawn again (a
    server started with a fixed `--seed` samples one prompt the same way each time). Unset:
    the server's own seed."""
    retry_for_s: float = Field(0, ge=0)
    """How long to keep retrying transient server errors; 0 = forever (unattended runs)."""
    retry_initial_s: float = Field(1.0, gt=0)
    """First backoff delay; doubles (plus up to this much jitter) up to `retry_max_s`."""
    retry_max_s: float = Field(60.0, gt=0)
    """Longest single wait between retries (and the most of a `Retry-After` honoured): a
    server that comes back (started, or done loading its model) is used within a minute, and
    a try a minute costs a local server nothing."""
    max_reply_bytes: int = Field(0, ge=0)
    """Bytes read of one streamed reply before it is treated as cut by length; 0 = 512 per
    `max_output_tokens` (a token's chunk is about 200 bytes on the wire), at least 4 MiB."""
    max_tool_calls_per_reply: int = Field(32, ge=1)
    """Tool calls of one reply that are run; the rest are dropped, and the agent told so."""
    max_tool_argument_bytes: int = Field(1 << 20, ge=1024)
    """A call whose arguments are longer is not run (an error result says so), nor stored whole."""
    tool_protocol: ToolProtocol = "auto"
    """How tool calls travel: `native` (the server's tool calls; a call the model wrote as text
    instead is recovered), `text` (tools described in the system prompt, one action block per
    reply, for models or servers without tool calls), `auto` (native until the server refuses
    tools or the model keeps writing its calls as text, then text for the rest of the run),
    `files` (for a small model: no tool is described; the workspace's small files are shown in
    each session's opening, and the model changes a file by writing its path on a line, then
    its whole new text in a fenced block, as a coding assistant does)."""

    @property
    def files_protocol(self) -> bool:
        """The model changes files by writing them whole, and is told of no tool."""
        return self.tool_protocol == "files"

    @property
    def reply_byte_limit(self) -> int:
        return self.max_reply_bytes or max(4 << 20, 512 * self.max_output_tokens)


class ContextSettings(_Section):
    """How the context window is managed."""

    limit: int = Field(0, ge=0)
    """Context window in tokens; 0 = ask the server."""
    soft_threshold: float = Field(0.70, gt=0, lt=1)
    """Fraction of the prompt budget (the window less the reply's reserve and the safety margin)
    where the oldest tool observations start to be masked."""
    hard_threshold: float = Field(0.90, gt=0, le=1)
    """Fraction of the prompt budget where, at the latest, the agent is told to save its state;
    the run places the line lower when its replies need more room (`context.room`)."""
    safety_margin: float = Field(0.05, ge=0, lt=0.5)
    """Fraction of the limit kept free besides the output reserve, for estimate error."""
    carryover_turns: int = Field(5, ge=0)
    """Steps (a reply with its tool results) carried into the next session at most; the last
    one always."""
    tool_output_max_tokens: int = Field(7500, ge=64)
    """Cap per tool output, in tokens as the harness prices content (pre-tokens at the ratio
    learnt for its kind): digits and prose of the same size in tokens are cut alike. Also bounded
    to a quarter of the prompt budget."""
    max_tool_output_bytes: int | None = Field(None, ge=256)
    """The former cap, in bytes: where set, a bound on top of `tool_output_max_tokens`."""
    protected_observations: int = Field(3, ge=0)
    """The newest tool results that are never masked."""
    protected_max_fraction: float = Field(0.25, gt=0, le=1)
    """Bound of the protected results, as a fraction of the prompt budget."""
    mask_min_tokens: int = Field(100, ge=0)
    """Tool results this small are never masked."""
    mask_low_water: float = Field(0.40, gt=0, lt=1)
    """Fraction of the prompt budget a masking round goes down to. Each round makes the server
    process the prompt again from the first result it masks (its prompt cache ends there), so
    rounds are rare and large: well below the soft threshold, the calls after one only
    append. Lower: fewer rounds and less prefill, less of the older output kept in view."""
    strategy: Literal["mask", "compact", "mask_then_compact"] = "mask"
    """Past the soft threshold: mask old results, ask the model for a recap of the older
    part, or mask first and compact when masking is not enough."""
    compact_keep_fraction: float = Field(0.3, gt=0, lt=1)
    """Share of the view (in tokens) that compaction keeps as it is, the newest part."""
    ambient_actions: int = Field(5, ge=0)
    """The previous session's last tool calls listed in a new session's first message; 0 = off."""


class SessionSettings(_Section):
    """Limits of one session."""

    max_turns: int = Field(0, ge=0)
    """Model calls per session before a restart; 0 = unlimited."""
    wind_down_turns: int = Field(2, ge=0)
    """Model calls the agent gets after the wind-down message."""
    shell_timeout_s: float = Field(120.0, gt=0)
    """Default and upper bound of `shell_exec`'s timeout."""


class LoopSettings(_Section):
    """When the agent is going in circles (`policy/loops.py`); 0 turns a detector off."""

    repeat_after: int = Field(3, ge=0)
    """Replies in a row making the same calls."""
    cycle_repeats: int = Field(3, ge=0)
    """Turns of a cycle of two or three calls (A B A B A B is 3)."""
    failing_after: int = Field(3, ge=0)
    """Times the same call fails the same way with only failures between."""
    no_calls_after: int = Field(3, ge=0)
    """Replies in a row without a tool call."""
    overflows_after: int = Field(3, ge=0)
    """Prompts the server refuses as too long, in a session and the sessions just before it
    that ended so."""
    session_repeat_after: int = Field(5, ge=0)
    """Calls in a row of a new session that the previous session made, with the same results."""
    max_loops: int = Field(3, ge=0)
    """Restarts for a loop in the run; a loop after the nudge once they are spent stops the run
    as `stuck`."""

    @field_validator("repeat_after", "cycle_repeats", "failing_after", "no_calls_after")
    @classmethod
    def _twice_at_least(cls, value: int, info: ValidationInfo) -> int:
        # Once is not a loop: 1 would stop every run.
        if value == 1:
            raise ValueError(f"loops.{info.field_name} is 0 (not watched) or at least 2, not 1")
        return value


class ToolSettings(_Section):
    """What the agent's tools may do."""

    sandbox: Literal["auto", "landlock", "off"] = "auto"
    """Confine shell commands: `auto` with what the kernel has (Landlock, namespaces, the
    socket filter; no capabilities always) and a warning for what it lacks, `landlock` the
    same but refuse to start without Landlock, `off` not at all (the block list only)."""
    network: bool = True
    """Commands may use the network; false: none at all, a network namespace with only its own
    loopback and no socket but IP and netlink (Landlock ABI 4+ refuses TCP where there are no
    namespaces)."""
    readable: list[Path] = [Path("/")]
    """What confined commands may read (and run): their programs too, so not empty; each path
    must exist. The state folder never."""
    blocklist: bool = True
    """Refuse known destructive commands before they run: a fast, clear first answer."""
    block_patterns: list[str] = []
    """More commands to refuse: regular expressions, matched case-insensitively."""
    max_processes: int = Field(512, ge=0)
    """Processes and threads one command may run at once (a fork bomb stops there); 0 = no
    limit."""
    max_memory_mb: int = Field(4096, ge=0)
    """Private memory (MiB) each process of a command may take (RLIMIT_DATA); 0 = no limit."""
    env: list[str] = list(COMMAND_ENV)
    """Variables of the harness's environment that commands inherit (shell-style patterns,
    `LC_*`); no others: the API key, credentials and the SSH agent socket stay out."""

    @field_validator("readable")
    @classmethod
    def _something_readable(cls, paths: list[Path]) -> list[Path]:
        # Not "nothing more": what a command may read is all it may run, its shell included.
        if not paths:
            raise ValueError(
                "tools.readable is empty: commands could run nothing, not even the shell; "
                'name what they may read and run (the default is ["/"])'
            )
        return paths

    @field_validator("block_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(
                    f"tools.block_patterns: {pattern!r} is not a regex ({e})"
                ) from None
        return patterns


class SupervisorSettings(_Section):
    """The run as a whole."""

    max_restarts: int | None = Field(None, ge=0)
    """Restarts allowed (not sessions); unset = unlimited."""
    auto_restart: bool = True
    """False: wait for Enter or `python -m ouroboros unpause` before each restart."""
    max_total_turns: int = Field(0, ge=0)
    """Model calls in the whole run; 0 = unlimited (`--max-turns` sets it)."""
    max_total_tokens: int = Field(0, ge=0)
    """Prompt + completion tokens in the whole run; 0 = unlimited."""
    max_wall_time_s: float = Field(0, ge=0)
    """Seconds since the run started; 0 = unlimited."""
    allow_finish: bool = True
    """Offer the `finish` tool that ends the run when the agent declares the task done."""


HookEventName = Literal[
    "run_end",
    "error",
    "stuck",
    "stalled",
    "waiting",
    "restart",
    "loop",
    "told",
    "paused",
    "server_restart",
]
"""What a hook may run on (`operator/hooks.py` says which record each is)."""


class ProgressSettings(_Section):
    """Plan items with a check: done only while their check passes (`ouroboros/progress/`)."""

    finish_needs_checks: bool = True
    """`finish` is refused while an item with a check does not pass."""
    stall_sessions: int = Field(3, ge=0)
    """Sessions in a row that pass no new check before the agent is told; one more and the run
    stops as `stalled`; 0 = never."""
    check_timeout_s: float = Field(60.0, gt=0)
    """A check still running after this fails (at most `session.shell_timeout_s`)."""
    checks_at_once: int = Field(4, ge=1)
    """Checks run at the same time at `finish` and a session's end (1: one after another, where
    checks write the same files)."""
    session_end_checks: int = Field(500, ge=1)
    """The most checks a session's end runs: the agent's done steps, then the operator's tasks
    checked longest ago; each task is checked at least every ceil(tasks / this) session ends."""
    checks_after_write: int = Field(3, ge=0)
    """After a call that may change the workspace (`file_write`, `shell_exec`), the checks of
    at most this many operator's tasks that do not pass yet are run, and the result tells the
    agent of one that passes now; 0 = never (checks that take long)."""


class HookCommand(_Section):
    """One command and the events it runs on."""

    events: list[HookEventName] = Field(min_length=1)
    command: list[str] = Field(min_length=1)
    """The program and its arguments (no shell: `["sh", "-c", "..."]` for one)."""


class HookSettings(_Section):
    """Commands run on events of the run, the event as JSON on stdin; never waited for."""

    on: list[HookCommand] = []
    timeout_s: float = Field(10.0, gt=0)
    """A hook still running after this is killed (its process group), with a warning."""
    min_interval_s: float = Field(60.0, ge=0)
    """Least time between two runs of the hooks of one event; the events between are counted
    (`skipped`), not run."""
    waiting_after_min: float = Field(10.0, ge=0)
    """Minutes of failed calls to the model server before the `waiting` event."""
    env: list[str] = [
        *COMMAND_ENV,
        "DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR",
        "http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
    ]  # fmt: skip
    """Variables of the harness's environment that hooks inherit (shell-style patterns, as
    `tools.env`; with the desktop's for `notify-send` and the proxies for `curl`), besides
    their own `OUROBOROS_*`; no others: the API key stays out unless named here."""


class ServerSettings(_Section):
    """A model server the run starts and keeps alive (none unless `command` is set)."""

    command: list[str] = []
    """The server's program and arguments, e.g. `["llama-server", "-m", "model.gguf", "--port",
    "8080"]`; it must serve `llm.base_url`."""
    ready_timeout_s: float = Field(300.0, gt=0)
    """How long a start may take to answer (loading a model takes a while)."""
    max_restarts: int = Field(3, ge=0)
    """More exits than this within `restart_window_s` stop the run."""
    restart_window_s: float = Field(600.0, gt=0)
    log_max_bytes: int = Field(10_000_000, ge=4096)
    """`server.log` is moved to `server.log.1` at this size."""


class PathSettings(_Section):
    """Where things live; relative paths resolve against the config file's folder."""

    workspace: Path = Path("workspace")
    system_prompt: Path = Path("SYSTEM_PROMPT.md")
    state_dir: Path = Path(".ouroboros")


class Settings(BaseSettings):
    """Everything configurable, one model per component."""

    model_config = SettingsConfigDict(
        env_prefix="OUROBOROS_", env_nested_delimiter="__", extra="forbid"
    )

    llm: LLMSettings = LLMSettings()
    context: ContextSettings = ContextSettings()
    session: SessionSettings = SessionSettings()
    loops: LoopSettings = LoopSettings()
    supervisor: SupervisorSettings = SupervisorSettings()
    tools: ToolSettings = ToolSettings()
    hooks: HookSettings = HookSettings()
    checkpoints: CheckpointSettings = CheckpointSettings()
    dead_ends: DeadEndSettings = DeadEndSettings()
    progress: ProgressSettings = ProgressSettings()
    paths: PathSettings = PathSettings()
    server: ServerSettings = ServerSettings()
    mcp: McpSettings = McpSettings()

    @model_validator(mode="after")
    def _soft_below_hard(self) -> Settings:
        if self.context.mask_low_water >= self.context.soft_threshold:
            raise ValueError(
                f"context.mask_low_water ({self.context.mask_low_water}) must be below "
                f"context.soft_threshold ({self.context.soft_threshold})"
            )
        if self.context.soft_threshold >= self.context.hard_threshold:
            raise ValueError(
                f"context.soft_threshold ({self.context.soft_threshold}) must be below "
                f"context.hard_threshold ({self.context.hard_threshold})"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The TOML file arrives through init_settings (see `load_settings`), so env beats file.
        return env_settings, init_settings
