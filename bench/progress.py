"""The operator's tasks by the thousand: 5,000 imported with `task import`, a run at a 4,096-token
window that passes a few, and what that costs: the first request against its budget (the list
of tasks against the plan's share), and `status`, `task list` and `task import` as people run
them (`python -m ouroboros ...` in a fresh process: interpreter start and imports included).

Targets (issue 33): the first request within its prompt budget, the tasks' list within the
plan's share, `status` under 0.5 s.

Run: .venv/bin/python bench/progress.py [--tasks 5000] [--keep]   (well under a minute)
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from rich.console import Console

from ouroboros.context.plan import plan_tokens
from ouroboros.ground.config_file import load_settings
from ouroboros.ground.messages import AssistantMessage, Message, ToolCall, UserMessage
from ouroboros.model.fake_model import FakeModel
from ouroboros.model.scripted import count_tokens, quick_config
from ouroboros.sinks.events import EventLog, Terminal
from ouroboros.start import run
from ouroboros.state.journal import fold

STATUS_S = 0.5
WINDOW = 4096
PASSED = 10
"""Tasks the scripted agent passes: a file made, then the task marked done, each."""


def command(project: Path, *args: str) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ouroboros", *args],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr}")
    return time.perf_counter() - started, done.stdout


def agent() -> FakeModel:
    steps: list[AssistantMessage] = []
    for n in range(1, PASSED + 1):
        make = json.dumps({"command": f"touch case{n}"})
        done = json.dumps({"items": [{"text": f"T{n} case {n}", "status": "done"}]})
        steps += [
            AssistantMessage(tool_calls=(ToolCall(id=f"s{n}", name="shell_exec", arguments=make),)),
            AssistantMessage(tool_calls=(ToolCall(id=f"p{n}", name="plan", arguments=done),)),
        ]
    queue = iter(steps)

    def reply(messages: list[Message]) -> AssistantMessage:
        return next(queue, AssistantMessage(content="done for now"))

    return FakeModel(reply, WINDOW)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--keep", action="store_true", help="leave the project in /tmp")
    args = parser.parse_args()
    project = Path(tempfile.mkdtemp(prefix="ouroboros-progress-"))
    try:
        (project / "workspace").mkdir()
        (project / "SYSTEM_PROMPT.md").write_text("# Purpose\nPass the operator's tasks.\n")
        config = project / "config.toml"
        config.write_text(quick_config("http://127.0.0.1:9/v1", supervisor={"max_total_turns": 22}))
        lines = (
            json.dumps({"text": f"case {n}", "check": f"test -f case{n}"})
            for n in range(1, args.tasks + 1)
        )
        (project / "tasks.jsonl").write_text("\n".join(lines) + "\n")
        imported, _ = command(project, "task", "import", "tasks.jsonl")

        settings = load_settings(config)
        model = agent()
        log = EventLog(settings.paths.state_dir, Terminal(Console(file=io.StringIO())))
        try:
            anyio.run(run, settings, log, model, model.info)
        finally:
            log.close()
        state = fold(settings.paths.state_dir / "journal.jsonl")[0]
        assert state.window is not None
        budget = state.window.prompt_budget
        first = model.requests[0]
        usage = (settings.paths.state_dir / "token_usage.jsonl").read_text().splitlines()[0]
        prompt = int(json.loads(usage)["prompt_tokens"])  # as the model counted it, tools too
        opening = next(m.content for m in first if isinstance(m, UserMessage))
        listed = opening[opening.index("Operator's tasks") :]
        listed_tokens = count_tokens({"messages": [{"role": "user", "content": listed}]})

        status_s, said = command(project, "status")
        list_s, _ = command(project, "task", "list")
        row = next(line for line in said.splitlines() if "checked items pass" in line)
        floor, _ = command(project, "--help")  # the interpreter and the command line alone
        print(
            "| tasks | import | first request (budget) | tasks' list (plan share) "
            "| status | task list |"
        )
        print("|---:|---:|---:|---:|---:|---:|")
        print(
            f"| {args.tasks:,} | {imported:.2f} s | {prompt:,} ({budget:,}) tokens "
            f"| {listed_tokens:,} ({plan_tokens(budget):,}) tokens | {status_s:.2f} s "
            f"| {list_s:.2f} s |"
        )
        print(f"status: {row.strip(' │')}")
        print(f"(`--help` alone, the interpreter's start and imports here now: {floor:.2f} s)")
        ok = prompt <= budget and listed_tokens <= plan_tokens(budget) and status_s < STATUS_S
        print("targets met" if ok else "TARGET MISSED")
        return 0 if ok else 1
    finally:
        if args.keep:
            print(f"kept: {project}")
        else:
            shutil.rmtree(project, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
