"""What the tools' protections cost: confinement per command, the block list at any length, and a
read of a huge file.

- Confinement: `shell_exec "true"` through the real `ToolRunner`, 200 times confined by
  Landlock and 200 times not, interleaved; the difference of the medians is what confinement
  costs a command (target: at most 10 ms, issue 20). Skipped where the kernel has no Landlock.
- Block list: the verdict on commands of 30 KB and 120 KB of several shapes (one long word, many
  words, many pipes, many function definitions): the ratio of the two shows it linear (target:
  4 times the length, at most 6 times the time).
- A file of 1 GiB (sparse, one 1 GiB line) read with `file_read` limit 10: seconds and the
  process's peak memory (target: under 2 s and 200 MB more).
- The safe opener (`safefs`, which never follows a link): a 4 KB file three folders deep
  written (temporary file, fsync, rename) and read (open, fstat, read) through it and through
  plain path-based calls doing the same work, in turns, 500 times each, with openat2 and with
  the name-by-name walk; and the whole `file_write`/`file_read` call through the real
  `ToolRunner`. The target (at most 1.5 with openat2) is on the tool call: its median against
  the same less what safefs adds over the plain opens. The opener's own ratio is shown too: it
  is large on a read of a few µs, where a few µs more double it.

Run: .venv/bin/python bench/tools.py   (about 10 s; exit status 1 if a target fails)
     .venv/bin/python bench/tools.py --files   (the safe opener alone)
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from ouroboros.ground.messages import ToolCall
from ouroboros.tools import ToolCaps, ToolRunner, safefs, sandbox
from ouroboros.tools.blocklist import Blocklist
from ouroboros.tools.processes import Processes
from ouroboros.tools.shell import ShellExec
from ouroboros.tools.workspace import Workspace
from ouroboros.wiring import built_in

RUNS = 200
CONFINEMENT_MAX_MS = 10.0
LINEAR_MAX_RATIO = 6.0
READ_MAX_S = 2.0
READ_MAX_MB = 200.0
FILE_RUNS = 500
SAFE_MAX_RATIO = 1.5


def runner(root: Path, confined: bool) -> ToolRunner:
    workspace = Workspace(root / "workspace", root / "SYSTEM_PROMPT.md")
    confinement = (
        sandbox.build([workspace.root, root / "tmp"], [Path("/")], root / "state", False)
        if confined
        else None
    )
    shell = ShellExec(10, Processes(confinement))
    return ToolRunner(workspace, built_in(shell, None, True), ToolCaps(30_000))


def run(tools: ToolRunner, name: str, **arguments: object) -> float:
    """Seconds one call takes."""
    call = ToolCall(id="c", name=name, arguments=json.dumps(arguments))
    started = time.perf_counter()
    anyio.run(tools.run, call)
    return time.perf_counter() - started


def confinement_cost(root: Path) -> tuple[float, float] | None:
    """Median ms of `true` confined and not, interleaved so both see the same machine."""
    if not sandbox.abi_version():
        return None
    confined, plain = runner(root, True), runner(root, False)
    times: dict[bool, list[float]] = {True: [], False: []}
    try:
        for _ in range(RUNS):
            for mode, tools in ((True, confined), (False, plain)):
                times[mode].append(run(tools, "shell_exec", command="true"))
    finally:
        confined.close()
        plain.close()
    return statistics.median(times[True]) * 1e3, statistics.median(times[False]) * 1e3


SHAPES: dict[str, Callable[[int], str]] = {
    "one long word": lambda n: 'x="' + "y" * n + '"',
    "many words": lambda n: "echo " + "word " * (n // 5),
    "many pipes": lambda n: "cat notes.md | " * (n // 15) + "wc -l",
    "many functions": lambda n: "f() { true; }; " * (n // 15),
    "many options": lambda n: "rm " + "-v " * (n // 3) + "build",
}


def blocklist_times() -> dict[str, tuple[float, float]]:
    rules = Blocklist(workspace="/home/me/project")
    result = {}
    for shape, make in SHAPES.items():
        small, large = make(30_000), make(120_000)
        timings = []
        for command in (small, large):
            started = time.perf_counter()
            rules.reason(command)
            timings.append(time.perf_counter() - started)
        result[shape] = (timings[0], timings[1])
    return result


def huge_read(root: Path) -> tuple[float, float]:
    """Seconds and MB more peak memory for reading 10 lines of a 1 GiB one-line file."""
    path = root / "workspace" / "huge.bin"
    with path.open("wb") as f:
        f.truncate(1 << 30)
    tools = runner(root, False)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        seconds = run(tools, "file_read", path="huge.bin", limit=10)
    finally:
        tools.close()
        path.unlink()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return seconds, (after - before) / 1024


def plain_write(path: Path, data: bytes) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
    with open(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(fd)
    os.replace(temporary, path)


def plain_read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    os.fstat(fd)
    with open(fd, "rb") as f:
        return f.read()


def safe_read(ws: Workspace, relative: str) -> bytes:
    with open(safefs.open_regular(ws.locate(relative)), "rb") as f:
        return f.read()


def median_us(pair: dict[str, Callable[[], object]]) -> dict[str, float]:
    """Median µs of each of two jobs, run in turns so both see the same machine."""
    times: dict[str, list[float]] = {key: [] for key in pair}
    for _ in range(FILE_RUNS):
        for key, job in pair.items():
            started = time.perf_counter()
            job()
            times[key].append(time.perf_counter() - started)
    return {key: statistics.median(t) * 1e6 for key, t in times.items()}


def opener_costs(root: Path) -> dict[str, tuple[float, float, float]]:
    """Median µs of a write and a read through safefs and by plain path, and of the whole tool
    call (through the real ToolRunner), with openat2 and with the walk."""
    tools = runner(root, False)
    ws = tools.workspace
    relative, data = "a/b/c/notes.md", os.urandom(4096)
    path = ws.root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "notes\n" * 700
    result = {}
    modes = [("openat2", True)] if safefs.kernel_resolves() else []
    try:
        for mode, use_openat2 in [*modes, ("walk", False)]:
            safefs.USE_OPENAT2 = use_openat2
            # Writes and reads apart: an fsync slows what follows it for a while.
            w = median_us(
                {
                    "safe": lambda: safefs.replace_file(ws.locate(relative), data),
                    "plain": lambda: plain_write(path, data),
                    "tool": lambda: run(tools, "file_write", path=relative, content=text),
                }
            )
            r = median_us(
                {
                    "plain": lambda: plain_read(str(path)),
                    "safe": lambda: safe_read(ws, relative),
                    "tool": lambda: run(tools, "file_read", path=relative),
                }
            )
            result[f"write ({mode})"] = (w["safe"], w["plain"], w["tool"])
            result[f"read ({mode})"] = (r["safe"], r["plain"], r["tool"])
    finally:
        safefs.USE_OPENAT2 = None
        tools.close()
    return result


def opener_checks(root: Path) -> list[bool]:
    """The opener's own cost, and what it makes of a whole tool call: the call against the
    same call less what safefs adds over plain opens (the target is on the call)."""
    costs = opener_costs(root)
    print(
        f"\n| median of {FILE_RUNS} | safefs | plain path | ratio | tool call | call ratio |"
        "\n|---|---:|---:|---:|---:|---:|"
    )
    checks = []
    for what, (safe, plain, call) in costs.items():
        call_ratio = call / (call - max(0.0, safe - plain))
        print(
            f"| {what} | {safe:.1f} µs | {plain:.1f} µs | {safe / plain:.2f} | {call:.0f} µs "
            f"| {call_ratio:.2f} |"
        )
        if "openat2" in what:
            checks.append((what, call_ratio))
    return [
        verdict(ratio <= SAFE_MAX_RATIO, f"{what} tool call through safefs: {ratio:.2f}x")
        for what, ratio in checks
    ]


def verdict(ok: bool, text: str) -> bool:
    print(f"{'PASS' if ok else 'FAIL'}  {text}")
    return ok


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        for name in ("workspace", "tmp", "state"):
            (root / name).mkdir()
        (root / "SYSTEM_PROMPT.md").write_text("# Purpose\n")
        if "--files" in sys.argv:
            return 0 if all(opener_checks(root)) else 1
        files = opener_checks(root)
        cost = confinement_cost(root)
        blocks = blocklist_times()
        seconds, memory = huge_read(root)
    checks = []
    if cost is None:
        print("SKIP  confinement: this kernel has no Landlock")
    else:
        confined, plain = cost
        print(
            f"shell_exec 'true', median of {RUNS}: {confined:.2f} ms confined, {plain:.2f} ms not"
        )
        checks.append(
            verdict(
                confined - plain < CONFINEMENT_MAX_MS,
                f"confinement costs {confined - plain:.2f} ms a command < {CONFINEMENT_MAX_MS}",
            )
        )
    print("\n| block list on | 30 KB | 120 KB | ratio |\n|---|---:|---:|---:|")
    for shape, (small, large) in blocks.items():
        print(f"| {shape} | {small * 1e3:.1f} ms | {large * 1e3:.1f} ms | {large / small:.1f} |")
    worst = max(large / small for small, large in blocks.values())
    checks.append(verdict(worst <= LINEAR_MAX_RATIO, f"block list linear: 4x longer, {worst:.1f}x"))
    print(
        f"\nfile_read of a 1 GiB file, 10 lines: {seconds:.2f} s, {memory:.0f} MB more peak memory"
    )
    checks.append(verdict(seconds < READ_MAX_S, f"huge read {seconds:.2f} s < {READ_MAX_S}"))
    checks.append(verdict(memory < READ_MAX_MB, f"huge read {memory:.0f} MB < {READ_MAX_MB}"))
    return 0 if all(checks + files) else 1


if __name__ == "__main__":
    sys.exit(main())
