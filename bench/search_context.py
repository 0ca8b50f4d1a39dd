"""How fast `search_context` answers on a journal of 100,000 records (and 10,000, for the ratio).

Writes synthetic journals shaped like real ones (assistant tool calls, shell and file results of
a few hundred bytes to a few KB, injected messages) into a temporary folder, then times each
source with a selective query, a common query and no query. Run:
    .venv/bin/python bench/search_context.py
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from ouroboros.tools.search import search_commands, search_logs, search_sessions

COMPACT = (",", ":")
"""The journal's own separators: searches look for `"kind":"message"` as written."""
WORDS = "import def return self value error test assert build deploy config module".split()


def line(record: dict[str, object]) -> str:
    return json.dumps(record, separators=COMPACT) + "\n"


def write_journal(folder: Path, records: int, seed: int = 1) -> tuple[Path, Path]:
    rng = random.Random(seed)
    journal = folder / f"journal-{records}.jsonl"
    events = folder / f"events-{records}.jsonl"
    with journal.open("w") as j, events.open("w") as e:
        call = 0
        for n in range(records // 2):
            session = 1 + n // 2000
            ts = f"2026-11-{1 + n // 20000:02d}T10:00:{n % 60:02d}"
            name = rng.choice(["shell_exec", "file_read", "file_write"])
            arguments = json.dumps(
                {"command": f"pytest -q tests/test_{rng.randrange(500)}.py"}
                if name == "shell_exec"
                else {"path": f"src/mod_{rng.randrange(500)}.py"}
            )
            call += 1
            assistant = {
                "kind": "assistant",
                "content": "Next step.",
                "tool_calls": [{"id": f"c{call}", "name": name, "arguments": arguments}],
            }
            body = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(40, 600)))
            if n == records // 4:
                body += " the unique needle phrase"
            result = {
                "kind": "tool",
                "tool_call_id": f"c{call}",
                "name": name,
                "content": body,
                "exit_code": rng.choice([0, 0, 0, 1]) if name == "shell_exec" else None,
                "arguments": arguments,
            }
            for message in (assistant, result):
                j.write(
                    line(
                        {
                            "v": 1,
                            "ts": ts,
                            "kind": "message",
                            "session": session,
                            "message": message,
                        }
                    )
                )
            e.write(line({"v": 1, "ts": ts, "kind": "tool_call", "name": name}))
            if n % 500 == 0:
                e.write(line({"v": 1, "ts": ts, "kind": "context_mask", "masked": 3}))
    return journal, events


def timed(label: str, fn: Callable[[], list[str]], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        found = fn()
        best = min(best, time.perf_counter() - started)
    print(f"  {label:<42} {best * 1000:8.1f} ms  ({len(found)} results)")
    return best


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        results: dict[int, float] = {}
        for size in (10_000, 100_000):
            journal, events = write_journal(Path(tmp), size)
            mb = journal.stat().st_size / 1e6
            print(f"journal of {size:,} records ({mb:.0f} MB):")
            queries = {
                "sessions, rare query": partial(search_sessions, journal, "Unique Needle", 20),
                "sessions, common query": partial(search_sessions, journal, "deploy", 20),
                "commands, failures only": partial(search_commands, journal, "", -1, 20),
                "commands, query": partial(search_commands, journal, "test_42.", None, 20),
                "logs, by type": partial(search_logs, events, "", "context_mask", 20),
            }
            total = sum(timed(label, query) for label, query in queries.items())
            results[size] = total
        ratio = results[100_000] / results[10_000]
        print(
            f"\nall five queries: {results[10_000] * 1000:.0f} ms at 10k records, "
            f"{results[100_000] * 1000:.0f} ms at 100k (ratio {ratio:.1f})"
        )


if __name__ == "__main__":
    main()
