"""Checked progress, the run's calls to it (`run.session.Feature`): an item's check run when the
agent marks it done and again at each session's end, `finish` refused while one fails, a stall
told and then stopped, the operator's tasks taken and shown.

A check runs through the `shell_exec` tool itself (its block list, its confinement, its
timeout): it can do nothing a command of the agent's cannot."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from ouroboros.context.plan import PLAN_TOOL, TEXT_CHARS, PlanArgs, PlanCap, PlanItem, saved
from ouroboros.ground.config import Settings
from ouroboros.ground.messages import ToolCall
from ouroboros.operator.inbox import NotAMessage
from ouroboros.policy.policy import End
from ouroboros.progress import tasks as task_files
from ouroboros.progress.records import CheckRun, Progress, Stalling, TasksAdded, last_line
from ouroboros.run.session import Feature
from ouroboros.state.fold import RunState
from ouroboros.state.journal import Journal
from ouroboros.state.plan import plan_saved
from ouroboros.state.records import EndReason
from ouroboros.tools import ToolOutcome
from ouroboros.tools.shell import ShellExec, ShellExecArgs
from ouroboros.tools.tool import ToolContext, ToolFailed
from ouroboros.tools.workspace import PathRefused, Workspace

TAIL_CHARS = 400
"""Of a check's output, the end the agent is shown and the journal keeps."""
SHOWN_EACH = 5
"""The operator's tasks a session's opening lists: the first few in progress, the next few
open."""


class Checking(Feature):
    def __init__(
        self,
        settings: Settings,
        journal: Journal,
        shell: ShellExec,
        workspace: Workspace,
        view_tokens: int,
        price: Callable[[str], int],
    ):
        self.settings, self.journal, self.shell, self.workspace = (
            settings,
            journal,
            shell,
            workspace,
        )
        self.view_tokens, self.price = view_tokens, price
        """The most the opening's list of the operator's tasks may take, and how text is priced
        (the plan's share: `plan.plan_tokens`)."""

    @property
    def progress(self) -> Progress:
        return self.journal.state.part(Progress)

    async def session_starting(self, session: int) -> None:
        take_tasks(self.settings.paths.state_dir, self.journal)

    async def before_call(self, prompt_budget: int) -> None:
        take_tasks(self.settings.paths.state_dir, self.journal)

    def check_of(self, item: PlanItem) -> tuple[str, str] | None:
        """The key and command of a step's check: the operator's task's where it names one."""
        if (key := self.progress.task_key(item)) is not None:
            task = self.progress.task(key)
            return (key, task.check) if task is not None and task.check else None
        return (item.text, item.check) if item.check else None

    async def run_check(self, key: str, command: str, when: str) -> CheckRun:
        args = ShellExecArgs(command=command, timeout_s=self.settings.progress.check_timeout_s)
        try:
            output = await self.shell.run(args, ToolContext(self.workspace, PlanCap()))
            code, text = output.exit_code, output.text
        except (ToolFailed, PathRefused, ValueError, OSError) as e:
            code, text = None, f"error: {e}"
        record = CheckRun(
            session=self.journal.state.session,
            item=key,
            command=command,
            exit_code=code,
            tail=text[-TAIL_CHARS:],
            when="done" if when == "done" else "session_end",
        )
        self.journal.append(record)
        return record

    async def tool_ran(self, call: ToolCall, outcome: ToolOutcome) -> ToolOutcome:
        if outcome.error is not None:
            return outcome
        if call.name == PLAN_TOOL:
            return await self.plan_checked(outcome)
        if outcome.finish_summary is not None and self.settings.progress.finish_needs_checks:
            return self.finish_checked(outcome)
        return outcome

    async def plan_checked(self, outcome: ToolOutcome) -> ToolOutcome:
        """Each step newly marked done (or done and failing) has its check run; one that fails
        is saved as doing, and the result says why."""
        items = plan_saved(outcome.message) or []
        was_done = {(i.text, i.check) for i in self.journal.state.plan.items if i.status == "done"}
        kept, said = [], []
        for n, item in enumerate(items, 1):
            check = self.check_of(item) if item.status == "done" else None
            standing = self.progress.items.get(check[0]) if check else None
            if check is None or (
                (item.text, item.check) in was_done and standing and standing.passing
            ):
                kept.append(item)
                continue
            ran = await self.run_check(*check, when="done")
            if ran.passed:
                said.append(f"step {n}: check passed")
                kept.append(item)
            else:
                said.append(f"step {n} stays doing: its check {failure(ran)}")
                kept.append(item.model_copy(update={"status": "doing"}))
        if not said:
            return outcome
        text = "\n".join([saved(kept), *said])
        arguments = json.dumps(PlanArgs(items=kept).model_dump(exclude_defaults=True))
        message = outcome.message.model_copy(update={"content": text, "arguments": arguments})
        return replace(outcome, message=message)

    def finish_checked(self, outcome: ToolOutcome) -> ToolOutcome:
        failing = self.failing()
        if not failing:
            return outcome
        names = ", ".join(failing[:5]) + (
            f" and {len(failing) - 5} more" if len(failing) > 5 else ""
        )
        error = (
            f"finish refused: {len(failing)} checked item(s) do not pass: {names}. Do them and "
            "mark each done in your plan (its check runs), then finish"
        )
        message = outcome.message.model_copy(update={"content": f"error: {error}", "error": True})
        return replace(outcome, message=message, error=error, finish_summary=None)

    def failing(self) -> list[str]:
        """The checked items that do not pass: the operator's tasks, and the checked steps of
        the agent's plan as it stands (one it dropped is no longer its to pass)."""
        progress = self.progress
        planned = [c[0] for i in self.journal.state.plan.items if (c := self.check_of(i))]
        steps = [k for k in planned if progress.task(k) is None]
        tasks = (k for k in progress.failing() if progress.task(k) is not None)
        return [
            *tasks,
            *(k for k in steps if k not in progress.items or not progress.items[k].passing),
        ]

    async def between_sessions(self) -> End | None:
        """Every done item checked again; a stall told, or the run stopped as `stalled`."""
        progress, seen = self.progress, set()
        done = [
            c
            for i in self.journal.state.plan.items
            if i.status == "done" and (c := self.check_of(i))
        ]
        passing = [
            (key, task.check)
            for key, standing in progress.items.items()
            if standing.passing and (task := progress.task(key)) is not None
        ]
        for key, command in [*done, *passing]:
            if key not in seen:
                seen.add(key)
                await self.run_check(key, command, when="session_end")
        stall = self.settings.progress.stall_sessions
        if not stall or progress.quiet < stall:  # counted only while there are checked items
            return None
        failing = progress.failing()
        if progress.quiet > stall:
            detail = f"no check newly passed in {progress.quiet} sessions; failing: "
            return End(EndReason.STALLED, detail + ", ".join(failing[:5]))
        session = self.journal.state.session
        if progress.stalling is None or progress.stalling.session != session:
            self.journal.append(Stalling(session=session, sessions=stall, failing=failing[:5]))
        return None

    def opening(self, state: RunState) -> tuple[str, bool]:
        progress, said = state.part(Progress), ""
        if progress.regressed:
            named = "; ".join(f"{k} ({progress.items[k].last})" for k in progress.regressed[:5])
            said += f"\n\nChecks that passed before fail now: {named}. Those steps are doing again."
        if (stalling := progress.stalling) is not None and stalling.session == state.session:
            said += (
                f"\n\nNo check newly passed in {stalling.sessions} sessions (failing: "
                f"{', '.join(stalling.failing)}). If this session passes none, the run stops."
            )
        return said + self.tasks_view(progress), True

    def tasks_view(self, progress: Progress) -> str:
        """The operator's tasks: counts, those in progress, the next few open; within the
        plan's share of the budget."""
        if not progress.tasks:
            return ""
        claimed = {
            k for i in self.journal.state.plan.items if (k := progress.task_key(i)) is not None
        }
        shown: dict[str, list[str]] = {"doing": [], "todo": []}
        for n, task in enumerate(progress.tasks, 1):
            key = f"T{n}"
            standing = progress.items[key]
            if standing.passing:
                continue
            status = "doing" if key in claimed or standing.last else "todo"
            if len(shown[status]) < SHOWN_EACH:
                text = f"{key} [{status}] {task.text[:TEXT_CHARS]} check: `{task.check}`"
                shown[status].append(text)
            elif all(len(s) == SHOWN_EACH for s in shown.values()):
                break
        lines = [*shown["doing"], *shown["todo"]]
        passing = sum(progress.items[f"T{n}"].passing for n in range(1, len(progress.tasks) + 1))
        head = (
            f"\n\nOperator's tasks: {passing} of {len(progress.tasks)} pass. Only a check passes "
            "one: plan it as `T<n> ...` and mark it done to run its check."
        )
        # Priced whole, then a line less each time: at most `2 * SHOWN_EACH` prices.
        while lines and self.price(head + "\n".join(lines)) > self.view_tokens:
            lines.pop()
        return head + "".join(f"\n{line}" for line in lines)


def failure(ran: CheckRun) -> str:
    if ran.exit_code is None:
        return f"could not run: {last_line(ran.tail)}"
    if ran.exit_code == -9:
        return f"timed out:\n{ran.tail}"
    return f"exited {ran.exit_code}:\n{ran.tail.removeprefix(f'exit code {ran.exit_code}').strip()}"


def take_tasks(state_dir: Path, journal: Journal) -> None:
    """The files of tasks waiting, journalled then removed; one that is not tasks set aside."""
    taken = journal.state.part(Progress).sources
    for source in task_files.waiting(state_dir):
        if source not in taken:
            try:
                found = task_files.read(state_dir, source)
            except FileNotFoundError:
                continue
            except NotAMessage as e:
                task_files.reject(state_dir, source)
                journal.notify("warning", f"tasks file {source} set aside: it is {e}")
                continue
            journal.append(TasksAdded(source=source, tasks=found))
        task_files.remove(state_dir, source)
