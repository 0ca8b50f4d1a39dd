"""Checked progress, the run's calls to it (`run.session.Feature`): an item's check run when the
agent marks it done, as a session ends and as the agent calls `finish` (refused while one
fails), a stall told and then stopped, the operator's tasks taken and shown.

A check runs through the `shell_exec` tool itself (its block list, its confinement, its
timeout): it can do nothing a command of the agent's cannot. Up to `progress.checks_at_once`
run at a time; their records are journalled in the order they were asked for."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

import anyio

from ouroboros.context.plan import PLAN_TOOL, TEXT_CHARS, PlanArgs, PlanCap, PlanItem, saved
from ouroboros.ground.config import Settings
from ouroboros.ground.messages import ToolCall
from ouroboros.operator.inbox import NotAMessage
from ouroboros.policy.policy import End
from ouroboros.progress import tasks as task_files
from ouroboros.progress.records import (
    CheckRun,
    Progress,
    Stalling,
    TasksAdded,
    When,
    last_line,
    named_task,
    reason,
)
from ouroboros.progress.standing import waiting
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
TASKS_SAID = "The harness runs their checks as sessions end and at `finish`."
"""What the opening says of the operator's tasks: the agent need not name them to pass them.
Their check commands are not shown: a small model copied them into its calls (a check as a
file's content, a tool named after the task); a result says when one passes."""
REFUSED_SAID = 5
"""Failing items a refused `finish` names, each with why."""


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

    @property
    def files_protocol(self) -> bool:
        return self.settings.llm.files_protocol

    async def session_starting(self, session: int) -> None:
        take_tasks(self.settings.paths.state_dir, self.journal)

    async def before_call(self, prompt_budget: int) -> None:
        take_tasks(self.settings.paths.state_dir, self.journal)

    def check_of(self, item: PlanItem) -> tuple[str, str] | None:
        """The key and command of a step's check: the operator's task's where it names one (none
        while that task is not there: its own check is never run), else its own."""
        if (key := named_task(item.text)) is not None:
            task = self.progress.task(key)
            return (key, task.check) if task is not None and task.check else None
        return (item.text, item.check) if item.check else None

    def task_checks(self, keys: Iterable[str]) -> list[tuple[str, str]]:
        progress = self.progress
        return [(key, task.check) for key in keys if (task := progress.task(key)) and task.check]

    async def run_checks(self, checks: list[tuple[str, str]], when: When) -> list[CheckRun]:
        """Each check asked for run once (by key), `progress.checks_at_once` at a time; each
        record journalled as soon as those asked for before it are."""
        asked: dict[str, str] = {}
        for key, command in checks:
            asked.setdefault(key, command)
        ran: list[CheckRun | None] = [None] * len(asked)
        written = 0
        waiting = iter(enumerate(asked.items()))

        async def check_the_next() -> None:
            nonlocal written
            for n, (key, command) in waiting:
                ran[n] = await self.run_check(key, command, when)
                while written < len(ran) and (record := ran[written]) is not None:
                    self.journal.append(record)
                    written += 1

        try:
            async with anyio.create_task_group() as group:
                for _ in range(min(self.settings.progress.checks_at_once, len(asked))):
                    group.start_soon(check_the_next)
        except BaseExceptionGroup as failed:  # what one check met, as it would surface alone
            raise failed.exceptions[0] from None
        return [record for record in ran if record is not None]

    async def run_check(self, key: str, command: str, when: When) -> CheckRun:
        args = ShellExecArgs(command=command, timeout_s=self.settings.progress.check_timeout_s)
        try:
            output = await self.shell.run(args, ToolContext(self.workspace, PlanCap()))
            code, text = output.exit_code, output.text
        except (ToolFailed, PathRefused, ValueError, OSError) as e:
            code, text = None, f"error: {e}"
        return CheckRun(
            session=self.journal.state.session,
            item=key,
            command=command,
            exit_code=code,
            tail=text[-TAIL_CHARS:],
            when=when,
        )

    async def tool_ran(self, call: ToolCall, outcome: ToolOutcome) -> ToolOutcome:
        if outcome.error is not None:
            return outcome
        if call.name == PLAN_TOOL:
            return await self.plan_checked(outcome)
        if outcome.finish_summary is not None:
            return await self.finish_checked(outcome)
        if call.name in WRITES:
            return await self.write_checked(outcome)
        return outcome

    async def write_checked(self, outcome: ToolOutcome) -> ToolOutcome:
        """After a call that may have changed the workspace, the checks of a few operator's
        tasks that do not pass yet (judged longest ago first); one that passes now is said in
        the result. A small model that has done its task goes on writing (more lines, another
        file) unless told: told, it finishes."""
        most = self.settings.progress.checks_after_write
        progress = self.progress
        tasks = [f"T{n}" for n in range(1, len(progress.tasks) + 1)]
        passing = {k for k in tasks if (standing := progress.items.get(k)) and standing.passing}
        if not most or len(passing) == len(tasks):
            return outcome
        ran = await self.run_checks(self.oldest_tasks(most, passing), "write")
        passed = [r.item for r in ran if r.passed]
        if self.files_protocol and not passed and ran:
            # Its opening lists no task: the write's result is where the check is seen.
            note = f"\n[the task's check {failure(ran[0])}]"
            message = outcome.message.model_copy(update={"content": outcome.message.content + note})
            return replace(outcome, message=message)
        if not passed:
            return outcome
        left = len(tasks) - len(passing) - len(passed)
        note = passes_now(passed, left)
        message = outcome.message.model_copy(update={"content": outcome.message.content + note})
        if self.files_protocol and left <= 0:
            # No tool is offered to finish with: the operator's checks are what done means.
            return replace(outcome, message=message, finish_summary=ALL_PASS)
        return replace(outcome, message=message)

    async def plan_checked(self, outcome: ToolOutcome) -> ToolOutcome:
        """Each step newly marked done (or done and failing) has its check run; one that fails
        is saved as doing, and the result says why."""
        items = plan_saved(outcome.message) or []
        was_done = {(i.text, i.check) for i in self.journal.state.plan.items if i.status == "done"}
        asked: dict[int, tuple[str, str]] = {}
        said: dict[int, str] = {}
        for n, item in enumerate(items, 1):
            if item.status != "done":
                continue
            if (check := self.check_of(item)) is None:
                key = named_task(item.text)
                if key is not None and self.progress.task(key) is None:
                    said[n] = f"step {n}: {key} is no operator's task, so no check passes it"
                continue
            standing = self.progress.items.get(check[0])
            if not ((item.text, item.check) in was_done and standing and standing.passing):
                asked[n] = check
        ran = {r.item: r for r in await self.run_checks(list(asked.values()), when="done")}
        kept = []
        for n, item in enumerate(items, 1):
            record = ran[asked[n][0]] if n in asked else None
            if record is None or record.passed:
                kept.append(item)
                if record is not None:
                    said[n] = f"step {n}: check passed"
            else:
                said[n] = f"step {n} stays doing: its check {failure(record)}"
                kept.append(item.model_copy(update={"status": "doing"}))
        if not said:
            return outcome
        text = "\n".join([saved(kept), *(said[n] for n in sorted(said))])
        arguments = json.dumps(PlanArgs(items=kept).model_dump(exclude_defaults=True))
        message = outcome.message.model_copy(update={"content": text, "arguments": arguments})
        return replace(outcome, message=message)

    def finish_checks(self) -> list[tuple[str, str]]:
        """What `finish` depends on: every operator's task, and every checked step of the
        agent's plan as it stands (one it dropped is no longer its to pass)."""
        progress, plan = self.progress, self.journal.state.plan.items
        tasks = self.task_checks(f"T{n}" for n in range(1, len(progress.tasks) + 1))
        steps = [c for i in plan if named_task(i.text) is None and (c := self.check_of(i))]
        return [*tasks, *steps]

    async def finish_checked(self, outcome: ToolOutcome) -> ToolOutcome:
        """Every check `finish` depends on run there and then: a run that ends is judged on
        its checks as they stand, not as they stood. Refused while one fails (unless
        `progress.finish_needs_checks` is off)."""
        failing = [r for r in await self.run_checks(self.finish_checks(), "finish") if not r.passed]
        if not failing or not self.settings.progress.finish_needs_checks:
            return outcome
        named = "; ".join(f"{r.item} ({reason(r)})" for r in failing[:REFUSED_SAID])
        if len(failing) > REFUSED_SAID:
            named += f"; and {len(failing) - REFUSED_SAID} more"
        error = (
            f"finish refused: {len(failing)} checked item(s) do not pass: {named}. Their checks "
            "ran just now: make them pass, then finish"
        )
        message = outcome.message.model_copy(update={"content": f"error: {error}", "error": True})
        return replace(outcome, message=message, error=error, finish_summary=None)

    def oldest_tasks(self, most: int, skip: set[str]) -> list[tuple[str, str]]:
        """The checks of at most `most` operator's tasks, those judged longest ago first."""
        progress = self.progress
        keys = [k for n in range(1, len(progress.tasks) + 1) if (k := f"T{n}") not in skip]
        keys.sort(key=lambda key: progress.items[key].judged)
        return self.task_checks(keys[:most])

    async def between_sessions(self) -> End | None:
        """The done steps checked again and a share of the operator's tasks; a stall told, or
        the run stopped as `stalled`."""
        progress = self.progress
        done = [
            c
            for i in self.journal.state.plan.items
            if i.status == "done" and (c := self.check_of(i))
        ]
        ran = {key for key, _ in done}
        most = max(0, self.settings.progress.session_end_checks - len(ran))
        share = self.oldest_tasks(most, ran)
        await self.run_checks([*done, *share], when="session_end")
        stall = self.settings.progress.stall_sessions
        if not stall or progress.quiet < stall:  # counted only while there are checked items
            return None
        if progress.quiet > stall:
            # Stopped only on checks as they stand: those the share left out run first.
            ran |= {key for key, _ in share}
            await self.run_checks(self.oldest_tasks(len(progress.tasks), ran), "session_end")
            if progress.quiet <= stall:
                return None
            failing = progress.not_passing()
            detail = f"no check newly passed in {progress.quiet} sessions; failing: "
            return End(EndReason.STALLED, detail + ", ".join(failing[:5]))
        session = self.journal.state.session
        if progress.stalling is None or progress.stalling.session != session:
            failing = progress.not_passing()[:5]
            self.journal.append(Stalling(session=session, sessions=stall, failing=failing))
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
        # The files protocol's opening is the task and the files: a small model answered a
        # listed task's name (`T1 [todo] 02-fix-typo`) with names like it, and nothing else.
        return said + ("" if self.files_protocol else self.tasks_view(progress)), True

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
                text = f"{key} [{status}] {task.text[:TEXT_CHARS]}"
                shown[status].append(text)
            elif all(len(s) == SHOWN_EACH for s in shown.values()):
                break
        lines = [*shown["doing"], *shown["todo"]]
        passing = sum(progress.items[f"T{n}"].passing for n in range(1, len(progress.tasks) + 1))
        head = f"\n\nOperator's tasks: {passing} of {len(progress.tasks)} pass. {TASKS_SAID}"
        # Priced whole, then a line less each time: at most `2 * SHOWN_EACH` prices.
        while lines and self.price(head + "\n".join(lines)) > self.view_tokens:
            lines.pop()
        return head + "".join(f"\n{line}" for line in lines)


WRITES = ("file_write", "shell_exec")
"""The built-in tools that may change the workspace."""


FINISH_CALL = '{"name": "finish", "arguments": {}}'
"""Shown once every operator's task passes: a small model copies what it is shown, and copied,
this call ends the run as it should (`finish` runs every check again first)."""


ALL_PASS = "every operator's task passes its check"


def passes_now(passed: list[str], left: int) -> str:
    """What a result says of the operator's tasks whose checks pass since it."""
    named = ", ".join(passed[:REFUSED_SAID]) + (" and more" if len(passed) > REFUSED_SAID else "")
    if left <= 0:
        said = f"the check of {named} passes now, and every task's does; if you are done:"
        return f"\n[{said}]\n{FINISH_CALL}"
    return f"\n[the check of {named} passes now; {left} task(s) still to pass]"


def failure(ran: CheckRun) -> str:
    if ran.exit_code is None:
        return f"could not run: {last_line(ran.tail)}"
    if ran.exit_code == -9:
        return f"timed out:\n{ran.tail}"
    output = ran.output
    return f"exited {ran.exit_code}" + (f":\n{output}" if output else "")


def take_tasks(state_dir: Path, journal: Journal) -> None:
    """The files of tasks waiting, journalled then removed; one that is not tasks set aside."""
    taken = journal.state.part(Progress).sources
    for source in waiting(state_dir):
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
