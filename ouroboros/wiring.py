"""The wiring: settings → discovery → the window and its lines → tools → the parts a run's
sessions are built with (`Parts`)."""

from __future__ import annotations

import errno
import os
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from ouroboros.checkpoints.commit import Checkpointing
from ouroboros.context.ledger import Counting
from ouroboros.context.plan import PlanCap, content_tokens, plan_tokens
from ouroboros.context.tokens import MESSAGE_OVERHEAD, Budget
from ouroboros.context.truncate import capped_bytes
from ouroboros.deadends.recall import Recall
from ouroboros.ground.clock import SYSTEM_CLOCK, Clock
from ouroboros.ground.config import Settings
from ouroboros.ground.errors import RunError, SetupError
from ouroboros.ground.figures import WindowFigures
from ouroboros.model import tool_protocol
from ouroboros.model.llm import LLMClient, Model
from ouroboros.model.retry import journalled, retrying
from ouroboros.model.servers import ServerInfo, choose_window, discover
from ouroboros.operator.safe_point import Operator
from ouroboros.policy.room import Rules
from ouroboros.progress.checks import Checking
from ouroboros.run import window
from ouroboros.run.lock import started_mark
from ouroboros.run.session import Parts
from ouroboros.state.journal import Journal
from ouroboros.tools import ToolCaps, ToolRunner, shown
from ouroboros.tools.blocklist import Blocklist
from ouroboros.tools.builtin import FileRead, FileWrite, Finish, ListDir, Plan
from ouroboros.tools.environment import command_env, make_scratch
from ouroboros.tools.processes import confined_processes
from ouroboros.tools.search import SearchContext
from ouroboros.tools.shell import ShellExec
from ouroboros.tools.tool import Tool
from ouroboros.tools.workspace import Workspace

if TYPE_CHECKING:  # the hub needs the [mcp] extra, a run without servers does not
    from ouroboros.mcp.hub import McpHub

FILES_SHARE = 1 / 3
"""Of the prompt budget, what the files protocol's opening may show of the workspace's files:
the rest holds the instructions and a few whole-file replies before the session is full."""
TOOL_OUTPUT_SHARE = 0.25
"""No single tool output may take more than this share of the prompt budget."""
MOST_BYTES_PER_TOKEN = 8
"""More than any output but blank runs takes a token: the byte bound the cap in tokens is
priced within (pricing a whole output of megabytes would cost for nothing)."""


def tool_output_tokens(settings: Settings, budget: Budget) -> int:
    """Tokens one tool result keeps: `context.tool_output_max_tokens`, a quarter of the prompt
    budget at most."""
    share = int(budget.prompt_budget * TOOL_OUTPUT_SHARE)
    return min(settings.context.tool_output_max_tokens, share)


def tool_output_cap(settings: Settings, budget: Budget) -> int:
    """Bytes one tool result keeps at most, the cap in tokens applied within them
    (`truncate.capped_bytes`); `context.max_tool_output_bytes` where set."""
    bound = tool_output_tokens(settings, budget) * MOST_BYTES_PER_TOKEN
    return min(settings.context.max_tool_output_bytes or bound, bound)


def tool_caps(settings: Settings, budget: Budget, journal: Journal) -> ToolCaps:
    """The caps of tool results and of the plan, for the window whose lines are `budget`, each
    priced as the run prices content when it is applied."""
    tokens = tool_output_tokens(settings, budget)

    def output_cap(text: str) -> int:
        return capped_bytes(journal.state.ledger.calibration, tokens, text)

    def plan_price(text: str) -> int:
        return content_tokens(journal.state.ledger.calibration, text)

    plan_cap = PlanCap(plan_tokens(budget.prompt_budget), plan_price)
    return ToolCaps(tool_output_cap(settings, budget), output_cap, plan_cap)


async def discover_server(settings: Settings, client: LLMClient, journal: Journal) -> ServerInfo:
    """Ask the server what it is and its window (retried while it is not up yet)."""
    s = settings
    info = await retrying(
        lambda: discover(client, s.llm.base_url, s.llm.model), s.llm, journalled(journal)
    )
    if not info.counts_whole_prompt:
        journal.notify(
            "warning",
            f"{info.detail}: this version reports only the prompt tokens it had to "
            "process, not those it took from its cache, so the harness estimates the context "
            "instead of measuring it (upgrade Ollama to 0.30.1 or later)",
        )
    for warning in info.cache_warnings:
        journal.notify("warning", warning)
    if info.renders_tools is False and s.llm.tool_protocol == "native":
        journal.notify(
            "warning",
            "the model's chat template cannot render tools: the server drops the "
            "tool schemas, so the model never sees its tools (for llama-server, start it "
            "with --chat-template-file of a tool-capable template, or use another model)",
        )
    return info


def window_for(settings: Settings, info: ServerInfo, journal: Journal) -> WindowFigures:
    """The window the run works in, and its lines: a resumed run keeps a smaller one a refusal
    stated (it is in the fold; a server's own figure is read anew)."""
    limit, warning = choose_window(settings.context.limit, info)
    detail, changed = info.detail, journal.state.window_change
    if changed is not None and changed.source == "refusal" and changed.window.context_limit < limit:
        limit, detail, warning = changed.window.context_limit, changed.window.detail, None
    if warning:
        # A server that states no window says it again at every re-read: warned once a run.
        journal.notify("warning", warning, once=window.NO_WINDOW_READ if info.no_window else None)
    frame = info.frame_tokens or MESSAGE_OVERHEAD
    return window.figures(settings, limit, info.kind, detail, frame)


def build_parts(
    settings: Settings,
    model: Model,
    info: ServerInfo,
    journal: Journal,
    clock: Clock = SYSTEM_CLOCK,
    mcp: McpHub | None = None,
    server: window.ServerWindow | None = None,
) -> tuple[Parts, WindowFigures]:
    """What the run's sessions work with, from the settings and what the server is: the window
    and its lines, the rules of the context policy, the tools; `server` asks its window again."""
    s = settings
    figures = window_for(s, info, journal)
    budget = window.budget_of(figures)
    counting = Counting(budget.limit, info.truncates_silently, info.counts_whole_prompt)
    tools = build_tools(s, budget, journal, mcp)  # the servers' tools among those counted
    renders = info.renders_tools is not False
    protocol = s.llm.tool_protocol
    rules = Rules(
        budget,
        window.mask_policy(s.context, budget),
        s.context,
        s.session.wind_down_turns,
        s.llm.max_output_tokens,
        tool_protocol.schema_raw(protocol, tools.schemas(), renders),
        s.loops,
        tool_protocol.schema_raw(protocol, tools.schemas(1), renders),
        os.path.relpath(tools.workspace.system_prompt, tools.workspace.root),
        # A small model copies a nudge as it copies its own loop: a fresh session, with the
        # files as they are now, is what varies (docs/benchmarks.md, "Fourth round").
        loop_nudge=not s.llm.files_protocol,
    )
    spoken = tool_protocol.ProtocolModel(
        model,
        journal,
        protocol,
        s.llm.max_tool_argument_bytes,
        renders,
        partial(shown.text_of, tools.workspace) if s.llm.files_protocol else None,
    )

    def fit_tools(lines: Budget) -> None:
        """A window a refusal states later sizes the results and the plan too."""
        tools.fit(tool_caps(s, lines, journal))

    shell = tools.tools["shell_exec"]
    assert isinstance(shell, ShellExec)
    view_tokens = plan_tokens(budget.prompt_budget)
    # The checks of a session's end run before the operator's pause between sessions: a run
    # they stop as stalled is not paused first, and one paused has been checked.
    features = (
        Checking(s, journal, shell, tools.workspace, view_tokens, tools.caps.plan_cap.price),
        Operator(s.paths.state_dir, journal, clock, s.supervisor.auto_restart),
        Checkpointing(s, journal),
        Recall(s.dead_ends.share, journal),
    )
    files_view = None
    if s.llm.files_protocol:
        room = int(budget.prompt_budget * FILES_SHARE)
        files_view = partial(shown.files_view, tools.workspace, tools.caps.plan_cap.price, room)
    parts = Parts(
        s,
        spoken,
        tools,
        journal,
        rules,
        counting,
        clock=clock,
        fit_tools=fit_tools,
        server=server,
        features=features,
        files_view=files_view,
    )
    return parts, figures


def build_tools(
    settings: Settings, budget: Budget, journal: Journal, mcp: McpHub | None = None
) -> ToolRunner:
    s = settings
    s.paths.workspace.mkdir(parents=True, exist_ok=True)
    tmp = make_scratch()
    processes, confined = confined_processes(s, tmp, s.tools.network, journal, "shell commands")
    env = command_env(os.environ, s.tools.env, tmp)
    try:
        step = processes.probe(s.paths.workspace, env)
    except OSError as e:  # the program is not there for commands, or not theirs to run
        processes.close()
        # Out of processes or memory for the moment: a later start may get through.
        error = RunError if e.errno in (errno.EAGAIN, errno.ENOMEM) else SetupError
        raise error(
            f"shell commands cannot run `true` ({e.strerror}): let them read and run the "
            "system's programs (tools.readable, tools.env's PATH)"
        ) from None
    if step is not None:
        processes.close()
        raise SetupError(
            f"shell commands cannot start on this machine: {step}; set tools.sandbox = "
            '"off", or the limit named to 0, to run them without it'
        )
    journal.notify(
        "tools",
        sandbox=confined,
        network=s.tools.network,
        processes=processes.mechanism,
        limits=processes.limited,
        tmp=str(tmp),
    )
    protected = [str(s.paths.state_dir), str(started_mark(s.paths.state_dir))]
    blocklist = Blocklist(
        s.tools.blocklist, s.tools.block_patterns, str(s.paths.workspace), protected
    )
    shell = ShellExec(s.session.shell_timeout_s, processes, env, blocklist, tmp)
    tools = built_in(shell, s.paths.state_dir, s.supervisor.allow_finish)
    if mcp is not None:
        tools += mcp.offer([tool.name for tool in tools], budget.prompt_budget)
    workspace = Workspace(s.paths.workspace, s.paths.system_prompt)
    return ToolRunner(workspace, tools, tool_caps(s, budget, journal))


def built_in(shell: ShellExec, state_dir: Path | None, allow_finish: bool) -> list[Tool]:
    """The built-in tools, in the order they are offered (a new tool: one line here); the
    servers' follow them."""
    return [
        FileRead(),
        FileWrite(),
        ListDir(),
        shell,
        Plan(),
        *([SearchContext(state_dir)] if state_dir is not None else []),
        *([Finish()] if allow_finish else []),
    ]
