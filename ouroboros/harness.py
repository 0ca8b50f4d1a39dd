"""What a session works with, built once per run from what the server says, and how a session
ends."""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ouroboros.config import Settings
from ouroboros.context.mask import MaskPolicy
from ouroboros.events import EventLog
from ouroboros.ledger import Ledger
from ouroboros.llm import Completion, LLMClient, retrying
from ouroboros.lock import RunError, started_mark
from ouroboros.servers import choose_window, discover
from ouroboros.state import Journal
from ouroboros.tokens import MESSAGE_OVERHEAD, Budget, Calibration
from ouroboros.tools import ToolRunner, sandbox
from ouroboros.tools.blocklist import Blocklist
from ouroboros.tools.processes import Processes
from ouroboros.tools.sandbox import Confinement
from ouroboros.tools.workspace import Workspace

BYTES_PER_TOKEN = 4
TOOL_OUTPUT_SHARE = 0.25
"""No single tool output may take more than this share of the prompt budget."""


class SessionEnded(Exception):
    """The session is over; `reason` tells the supervisor whether to restart or stop."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass
class Harness:
    """The components a session works with."""

    settings: Settings
    llm: LLMClient
    tools: ToolRunner
    journal: Journal
    log: EventLog
    ledger: Ledger
    mask_policy: MaskPolicy
    tools_rendered: bool = True
    """False when the server drops the tool schemas: they then cost no prompt tokens."""


def reported(completion: Completion) -> tuple[int, int, Literal["server", "timings"]] | None:
    """The server's own figures for this call, if it gave any."""
    usage = completion.usage
    return (usage.prompt_tokens, usage.completion_tokens, usage.source) if usage else None


def tool_output_cap(settings: Settings, budget: Budget) -> int:
    """Bytes one tool result keeps: a quarter of the prompt budget at most."""
    share = int(budget.prompt_budget * TOOL_OUTPUT_SHARE * BYTES_PER_TOKEN)
    return min(settings.context.max_tool_output_bytes, share)


def mask_policy(settings: Settings, budget: Budget) -> MaskPolicy:
    c = settings.context
    protected_tokens = int(c.protected_max_fraction * budget.prompt_budget)
    return MaskPolicy(c.protected_observations, protected_tokens, c.mask_min_tokens)


async def build_harness(
    settings: Settings, llm: LLMClient, journal: Journal, log: EventLog
) -> Harness:
    """Ask the server what it is and its window; the budget, ledger and tools that follow."""
    s = settings
    info = await retrying(lambda: discover(llm, s.llm.base_url, s.llm.model), s.llm, log.retry)
    limit, warning = choose_window(s.context.limit, info)
    if warning:
        log.emit("warning", message=warning)
    budget = Budget.for_window(
        limit,
        s.context.soft_threshold,
        s.context.hard_threshold,
        s.llm.max_output_tokens,
        s.context.safety_margin,
    )
    log.emit(
        "context_window",
        server=info.kind,
        context_limit=limit,
        detail=info.detail,
        prompt_budget=budget.prompt_budget,
        soft_line=budget.soft_line,
        hard_line=budget.hard_line,
        frame_tokens=info.frame_tokens or MESSAGE_OVERHEAD,
    )
    calibration = Calibration(info.frame_tokens or MESSAGE_OVERHEAD)
    ledger = Ledger(
        budget,
        calibration,
        detect_truncation=info.truncates_silently,
        trust_reported=info.counts_whole_prompt,
    )
    if not info.counts_whole_prompt:
        log.emit(
            "warning",
            message=f"{info.detail}: this version reports only the prompt tokens it had to "
            "process, not those it took from its cache, so the harness estimates the context "
            "instead of measuring it (upgrade Ollama to 0.30.1 or later)",
        )
    if info.renders_tools is False:
        log.emit(
            "warning",
            message="the model's chat template cannot render tools: the server drops the "
            "tool schemas, so the model never sees its tools (for llama-server, start it "
            "with --chat-template-file of a tool-capable template, or use another model)",
        )
    for m in journal.state.measurements:
        ledger.apply(m)
    s.paths.workspace.mkdir(parents=True, exist_ok=True)
    tmp = private_tmp(s.paths.state_dir)
    confinement, confined = confine(s, tmp)
    if confinement is None and s.tools.sandbox == "auto":
        log.emit("warning", message=f"shell commands run unconfined: {confined}")
    processes = Processes(confinement)
    log.emit(
        "tools",
        sandbox=confined,
        network=s.tools.network,
        processes=processes.mechanism,
        tmp=str(tmp),
    )
    tools = ToolRunner(
        Workspace(s.paths.workspace, s.paths.system_prompt),
        s.session.shell_timeout_s,
        tool_output_cap(s, budget),
        s.supervisor.allow_finish,
        s.paths.state_dir,
        processes,
        {**os.environ, "TMPDIR": str(tmp), "TMP": str(tmp), "TEMP": str(tmp)},
        Blocklist(
            s.tools.blocklist,
            s.tools.block_patterns,
            str(s.paths.workspace),
            [str(s.paths.state_dir), str(started_mark(s.paths.state_dir))],
        ),
    )
    policy = mask_policy(s, budget)
    rendered = info.renders_tools is not False
    return Harness(s, llm, tools, journal, log, ledger, policy, rendered)


def private_tmp(state_dir: Path) -> Path:
    """The commands' temporary folder (TMPDIR), one per state folder, the only place outside
    the workspace a confined command may write."""
    digest = hashlib.sha256(str(state_dir).encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / f"ouroboros-{digest}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


def confine(settings: Settings, tmp: Path) -> tuple[Confinement | None, str]:
    """The Landlock ruleset for shell commands, as `tools.sandbox` asks, and what it is."""
    t, paths = settings.tools, settings.paths
    if t.sandbox == "off":
        return None, "off (tools.sandbox)"
    try:
        confinement = sandbox.build([paths.workspace, tmp], t.readable, paths.state_dir, t.network)
    except sandbox.SandboxError as e:
        if t.sandbox == "landlock":
            raise RunError(f'tools.sandbox is "landlock" but {e}') from None
        return None, str(e)
    network = "" if t.network or confinement.abi >= 4 else ", network not confinable (ABI < 4)"
    return confinement, f"Landlock ABI {confinement.abi}{network}"
