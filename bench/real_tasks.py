"""The real-task bench: small real tasks done by a real small instruct model, through the real
harness, checked after each run.

    python bench/real_tasks.py --quick              # 4K, one seed: for iterating (~5 min, files)
    python bench/real_tasks.py                      # 4K with seeds 1-3, 8K with seed 1, and the
                                                    # mini-swe-agent baseline at 4K (< 90 min)
    python bench/real_tasks.py --tasks 01,05 --seeds 1 --windows 4096 --no-baseline
    python bench/real_tasks.py --tasks-dir DIR      # another ladder (a held-out set)

Each task is a folder of `bench/tasks/` (or `--tasks-dir`): `purpose.md` (what a user writes
into the `# Purpose` section of the project's `SYSTEM_PROMPT.md` template), `workspace/` (the
files the agent starts with) and `check` (a `sh` script run in the workspace after the run: exit
0 is a pass). The check is also given to the run as an operator's task (`task add NAME
--check "$(cat check)"`), as a user who has one would: the harness runs it after writes, at
each session's end and at `finish`, which it refuses while the check fails. A run is
`python -m ouroboros run` in a project of its own whose config is what
`scripts/real_server.py config --model instruct` prints (`[server]` starts llama-server on
Qwen2.5-Coder-0.5B-Instruct; the files protocol, unless `--protocol` says another), with
`llm.seed` set to the run's seed, bounded in model calls and wall time. The baseline
runs the same tasks through mini-swe-agent's text-based config against one llama-server
(`bench/mini_baseline.py`).

Per run it reports: passed, model calls, sessions, the stop reason, the formats the model's calls
came in (`native`, read from text, several calls in one reply, unknown tools), the replies that
repeat the harness's own words (`echoes`: a reply holding any six-word run of what the harness
said to the model, the task's own words and files aside), and restarts after a loop whose new
session was handed the looping replies (`loop_carried`). The rows go to a JSONL file
(`--out`, default `bench/results/real_tasks.jsonl`) as they come, so a stopped bench keeps
what it measured; `--table` prints the markdown table of such a file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "bench"))

import real_server  # noqa: E402

TASKS = ROOT / "bench" / "tasks"
RESULTS = ROOT / "bench" / "results" / "real_tasks.jsonl"
MAX_CALLS = 16
"""Model calls per run: the ladder's hardest task takes a model that works about ten."""
WALL_S = 600
"""Seconds per run, server start included, a bound for a run that hangs: the calls bound the
work (16 calls take about 150 s on 2 idle cores, several times that on busy ones)."""
SEEDS = (1, 2, 3)
WINDOWS = (4096, 8192)
NGRAM = 6
"""Words in a row a reply must share with the harness's texts to count as an echo: shorter
runs are common phrases ("the file in the workspace")."""


@dataclass(frozen=True)
class Task:
    name: str
    folder: Path

    @property
    def purpose(self) -> str:
        return (self.folder / "purpose.md").read_text().strip()


@dataclass
class Outcome:
    harness: str
    task: str
    window: int
    seed: int
    passed: bool
    calls: int
    sessions: int
    stop: str
    seconds: float
    formats: dict[str, int] = field(default_factory=dict)
    echoes: int = 0
    loop_carried: int = 0


def tasks(folder: Path, chosen: Sequence[str]) -> list[Task]:
    found = [
        Task(path.name, path)
        for path in sorted(folder.iterdir())
        if (path / "purpose.md").is_file() and (path / "check").is_file()
    ]
    if chosen:
        found = [t for t in found if any(t.name.startswith(prefix) for prefix in chosen)]
    if not found:
        raise SystemExit(f"error: no task in {folder} (each needs purpose.md and check)")
    return found


def system_prompt(purpose: str) -> str:
    """The project's template with the task in its `# Purpose` section, as a user fills it in."""
    template = (ROOT / "SYSTEM_PROMPT.md").read_text()
    start = template.index("# Purpose\n") + len("# Purpose\n")
    end = template.find("\n# ", start)
    return f"{template[:start]}\n{purpose}\n{template[end:] if end != -1 else ''}"


def check(task: Task, workspace: Path) -> bool:
    try:
        done = subprocess.run(
            ["sh", str(task.folder / "check")],
            cwd=workspace,
            capture_output=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def project(task: Task, where: Path, window: int, seed: int, protocol: str = "") -> Path:
    """A project of the run's own: the task's workspace, the template with its purpose, and the
    newcomer's config with the bench's bounds."""
    # A task whose agent starts with nothing has no workspace/ in a checkout (git keeps no empty
    # folder), so it is made here rather than by a placeholder file the agent would see.
    (where / "workspace").mkdir(parents=True)
    if (task.folder / "workspace").is_dir():
        shutil.copytree(task.folder / "workspace", where / "workspace", dirs_exist_ok=True)
    (where / "SYSTEM_PROMPT.md").write_text(system_prompt(task.purpose))
    server = real_server.config(window, real_server.free_port(), ["--threads", "2"], "instruct")
    # The seed is the harness's (`llm.seed`, varied per request): a server's `--seed` would
    # draw a prompt asked again the same way.
    server = server.replace("[llm]\n", f"[llm]\nseed = {seed}\n", 1)
    if protocol:  # another protocol than the newcomer's config says
        server = re.sub(r'(?m)^tool_protocol = ".*"\n', "", server)
        server = server.replace("[llm]\n", f'[llm]\ntool_protocol = "{protocol}"\n', 1)
    bounds = (
        f"\n[supervisor]\nmax_total_turns = {MAX_CALLS}\nmax_wall_time_s = {WALL_S}\n"
        "\n[checkpoints]\nenabled = false\n"
    )
    (where / "config.toml").write_text(server + bounds)
    # The check is given to the run too, as a user who has one would: the harness then refuses a
    # `finish` while it fails. As its command, not a script's path: the opening shows it, and a
    # folder named there is taken for the place to work in.
    command = (task.folder / "check").read_text().strip()
    subprocess.run(
        [sys.executable, "-m", "ouroboros", "--config", "config.toml", "task", "add", task.name,
         "--check", command],
        cwd=where, check=True, capture_output=True,
    )  # fmt: skip
    return where


def records(path: Path) -> Iterator[dict[str, Any]]:
    if not path.is_file():
        return
    with path.open() as lines:
        for line in lines:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def ngrams(text: str) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i : i + NGRAM]) for i in range(len(w) - NGRAM + 1)}


def _text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    calls = message.get("tool_calls") or []
    return content + "".join(f" {c.get('arguments', '')}" for c in calls)


@dataclass
class Tally:
    """What the journal shows of the model's replies, record by record."""

    own: set[tuple[str, ...]]
    """The task's words: a reply repeating them repeats the user, not the harness."""
    where: str = ""
    """The run's folder: a path in a reply names a file, it repeats no one."""
    said: set[tuple[str, ...]] = field(default_factory=set)
    formats: Counter[str] = field(default_factory=Counter)
    calls: int = 0
    sessions: int = 0
    echoes: int = 0
    loop_carried: int = 0
    looped: bool = False

    def words(self, text: str) -> set[tuple[str, ...]]:
        return ngrams(text.replace(self.where, " ") if self.where else text)

    def opening(self, record: dict[str, Any]) -> None:
        self.sessions += 1
        opening = record.get("messages", [])
        for message in opening:
            if message.get("kind") in ("system", "user"):
                self.said |= self.words(message.get("content") or "")
        if self.looped and any(m.get("kind") == "assistant" for m in opening):
            self.loop_carried += 1
        self.looped = False

    def message(self, record: dict[str, Any]) -> None:
        message = record.get("message", {})
        if message.get("kind") == "user":
            self.said |= self.words(message.get("content") or "")
        if message.get("kind") != "assistant" or not record.get("usage"):
            return
        self.calls += 1
        tool_calls = message.get("tool_calls") or []
        if tool_calls:
            self.formats[record.get("calls_from_text") or "native"] += 1
        if len(tool_calls) > 1:
            self.formats["several"] += 1
        for unknown in record.get("unknown_tools") or []:
            self.formats[f"unknown:{unknown}"] += 1
        written = record.get("written") or _text(message)
        if self.words(written) & (self.said - self.own):
            self.echoes += 1


def tool_texts() -> str:
    """What the built-in tools' schemas say to the model in every request (a small model copies
    a tool's description into its calls too)."""
    from ouroboros.tools import ToolCaps, ToolRunner
    from ouroboros.tools.shell import ShellExec
    from ouroboros.tools.workspace import Workspace
    from ouroboros.wiring import built_in

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        workspace = Workspace(root, root / "SYSTEM_PROMPT.md")
        runner = ToolRunner(workspace, built_in(ShellExec(10), root, True), ToolCaps(1000))
        try:
            return json.dumps(runner.schemas())
        finally:
            runner.close()


def measured(
    journal: list[dict[str, Any]], own: set[tuple[str, ...]], where: str = ""
) -> dict[str, Any]:
    """What the journal shows of the model's replies: formats, echoes, loops carried."""
    tally = Tally(own, where)
    tally.said |= ngrams(tool_texts())
    for record in journal:
        kind = record.get("kind")
        if kind == "session_start":
            tally.opening(record)
        elif kind == "loop" and record.get("level", 0) >= 2:
            tally.looped = True
        elif kind == "message":
            tally.message(record)
    return {
        "calls": tally.calls,
        "sessions": tally.sessions,
        "formats": dict(tally.formats),
        "echoes": tally.echoes,
        "loop_carried": tally.loop_carried,
    }


def own_words(task: Task) -> set[tuple[str, ...]]:
    """The task's words: a reply that repeats them repeats the user, not the harness. A file is
    the user's as a whole, its path with its text (as the files protocol shows it, and as a
    reply writing it back whole writes it)."""
    texts = [task.purpose, (task.folder / "check").read_text()]
    workspace = task.folder / "workspace"
    for path in workspace.rglob("*"):
        if path.is_file():
            texts.append(f"{path.relative_to(workspace)}\n{path.read_text(errors='replace')}")
    return set().union(*(ngrams(t) for t in texts))


def run_ouroboros(
    task: Task, window: int, seed: int, keep: Path | None, protocol: str = ""
) -> Outcome:
    with tempfile.TemporaryDirectory(prefix=f"bench-{task.name}-") as folder:
        where = project(task, Path(folder), window, seed, protocol)
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "ouroboros", "--config", "config.toml", "run", "--quiet"],
            cwd=where,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            _, errors = process.communicate(timeout=WALL_S + 120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
            _, errors = process.communicate()
        seconds = time.monotonic() - started
        journal = list(records(where / ".ouroboros" / "journal.jsonl"))
        ends = [r for r in journal if r.get("kind") == "run_end"]
        stop = ends[-1]["reason"] if ends else f"exit {process.returncode}"
        if process.returncode not in (0, None) and not ends:
            stop += f": {errors.decode(errors='replace').strip().splitlines()[-1:]}"
        figures = measured(journal, own_words(task), str(where))
        passed = check(task, where / "workspace")
        if keep is not None:
            target = keep / f"{task.name}-{window}-s{seed}"
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(where, target, symlinks=True)
        harness = f"ouroboros ({protocol})" if protocol else "ouroboros"
        return Outcome(harness, task.name, window, seed, passed, stop=stop,
                       seconds=round(seconds, 1), **figures)  # fmt: skip


def run_baseline(task: Task, seed: int, base_url: str) -> Outcome:
    import mini_baseline

    row = mini_baseline.run_task(task.folder, base_url, seed, MAX_CALLS, WALL_S)
    return Outcome(
        "mini-swe-agent",
        task.name,
        real_server.DEFAULT_CTX,
        seed,
        bool(row["passed"]),
        calls=int(row["model_calls"]),
        sessions=1,
        stop=str(row["stop"]),
        seconds=float(row["seconds"]),
    )


def table(rows: Iterable[dict[str, Any]]) -> str:
    """The markdown table: a line per task and harness and window, seeds pooled."""
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["harness"], row["window"], row["task"]), []).append(row)
    lines = [
        "| harness | window | task | passed | calls | sessions | stops | formats | echoes "
        "| loops carried |",
        "|---|---:|---|---:|---:|---:|---|---|---:|---:|",
    ]
    totals: dict[tuple[str, int], Counter[str]] = {}
    for (harness, window, task), runs in sorted(groups.items()):
        passed = sum(r["passed"] for r in runs)
        formats: Counter[str] = Counter()
        for r in runs:
            formats.update(r.get("formats") or {})
        stops = Counter(r["stop"] for r in runs)
        lines.append(
            f"| {harness} | {window:,} | {task} | {passed} of {len(runs)} "
            f"| {sum(r['calls'] for r in runs)} | {sum(r['sessions'] for r in runs)} "
            f"| {', '.join(f'{s} {n}' for s, n in stops.most_common())} "
            f"| {', '.join(f'{f} {n}' for f, n in sorted(formats.items())) or '-'} "
            f"| {sum(r.get('echoes', 0) for r in runs)} "
            f"| {sum(r.get('loop_carried', 0) for r in runs)} |"
        )
        total = totals.setdefault((harness, window), Counter())
        total["runs"] += len(runs)
        total["passed"] += passed
        total["calls"] += sum(r["calls"] for r in runs)
        total["echoes"] += sum(r.get("echoes", 0) for r in runs)
        total["loop_carried"] += sum(r.get("loop_carried", 0) for r in runs)
    for (harness, window), t in sorted(totals.items()):
        share = t["passed"] / t["runs"] if t["runs"] else 0
        lines.append(
            f"| **{harness}** | **{window:,}** | **all** | **{t['passed']} of {t['runs']} "
            f"({share:.0%})** | {t['calls']} | | | | {t['echoes']} | {t['loop_carried']} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="4K, seed 1, no baseline")
    parser.add_argument("--tasks", default="", help="comma-separated name prefixes (01,05)")
    parser.add_argument("--tasks-dir", type=Path, default=TASKS)
    parser.add_argument("--seeds", default="", help="comma-separated seeds at 4K (default 1,2,3)")
    parser.add_argument("--windows", default="", help="comma-separated windows (4096,8192)")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument(
        "--protocol", default="", help="llm.tool_protocol of the runs (default: the config's)"
    )
    parser.add_argument("--baseline-only", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--keep", type=Path, help="copy each run's project folder here")
    parser.add_argument("--table", type=Path, help="print the table of a results file and stop")
    args = parser.parse_args(argv)
    if args.table:
        print(table(records(args.table)))
        return 0
    chosen = tasks(args.tasks_dir, [p for p in args.tasks.split(",") if p])
    seeds = [int(s) for s in args.seeds.split(",") if s] or ([1] if args.quick else list(SEEDS))
    windows = [int(w) for w in args.windows.split(",") if w] or (
        [4096] if args.quick else list(WINDOWS)
    )
    # 4K with every seed; a larger window with the first seed only (the budget is 90 minutes).
    plan = [(w, s) for w in windows for s in (seeds if w == min(windows) else seeds[:1])]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []

    def record(outcome: Outcome) -> None:
        row = asdict(outcome)
        rows.append(row)
        with args.out.open("a") as out:
            out.write(json.dumps(row) + "\n")
        print(
            f"{outcome.harness:15} {outcome.task:20} {outcome.window:>5} s{outcome.seed} "
            f"{'PASS' if outcome.passed else 'fail'} calls {outcome.calls:>2} sessions "
            f"{outcome.sessions} {outcome.stop:14} echoes {outcome.echoes} "
            f"{outcome.seconds:>5.0f} s {outcome.formats}",
            flush=True,
        )

    if not args.baseline_only:
        for window, seed in plan:
            for task in chosen:
                record(run_ouroboros(task, window, seed, args.keep, args.protocol))
    if not (args.quick or args.no_baseline):
        model = real_server.model_file("instruct")
        server = real_server.RealServer(ctx=min(windows), model=model, extra_args=["--jinja"])
        with server:
            for seed in seeds:
                for task in chosen:
                    record(run_baseline(task, seed, server.base_url))
    print()
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
