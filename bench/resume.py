"""Resume bench: how long a run takes to fold its journal back, and how much memory, as the
journal grows to 100,000 records and more.

A journal shaped like a long real run (sessions of 25 turns: a reply with its usage, the tool
start, a 0.5-4 KB result; masks past the middle of a session, a wind-down, a session end) is
written through the product's own `Journal` (so its snapshots are written as a run writes
them), then folded back in a fresh process, the way `python -m ouroboros run` does on start:
once from the snapshot, once without it (the whole journal, as after a lost snapshot). Time is
measured around `Journal(path)` only (not the interpreter's start); memory is the process's
peak RSS, imports included.

Targets (issue 14): at 100,000 records, under 1 s and under 150 MB.

Run: .venv/bin/python bench/resume.py [--records 10000 100000] [--keep]   (about a minute)
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ouroboros.context.tokens import CallFigures
from ouroboros.ground.figures import RunLimits, WindowFigures
from ouroboros.ground.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from ouroboros.state.journal import Journal, Sink
from ouroboros.state.records import (
    EndReason,
    Mask,
    MaskReason,
    MessageRecord,
    RunStart,
    SessionEnd,
    SessionStart,
    ToolStarted,
    WindDown,
)
from ouroboros.state.snapshot import snapshot_path

TURNS = 25
WINDOW = 8_192
TARGET_S = 1.0
TARGET_MB = 150
WORDS = "the of parser token window session result file test value error line config".split()

PROBE = """
import json, resource, sys, time
from pathlib import Path
started = time.perf_counter()
from ouroboros.state.journal import Journal, Sink
imported = time.perf_counter()
journal = Journal(Path(sys.argv[1]))
folded = time.perf_counter()
state = journal.state
print(json.dumps({
    "import_s": imported - started,
    "fold_s": folded - imported,
    "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "turns": state.total_turns,
    "session": state.session,
    "messages": len(state.messages),
}))
"""


def text(rng: random.Random, size: int) -> str:
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        words.append(word + ("\n" if rng.random() < 0.12 else " "))
        length += len(word) + 1
    return "".join(words)


def write_journal(path: Path, records: int, seed: int = 7, sinks: Sequence[Sink] = ()) -> None:
    """About `records` journal records of a long run (3 per turn), through the product's own
    `Journal` and the given sinks (the event log, for a run `status` and `tail` can read)."""
    rng = random.Random(seed)
    journal = Journal(path, durable=False)
    journal.sinks.extend(sinks)
    limits = RunLimits(max_total_turns=records, wind_down_turns=2)
    window = WindowFigures(
        server="llama-server",
        detail="bench",
        context_limit=WINDOW,
        prompt_budget=6_758,
        soft_line=4_730,
        hard_line=6_082,
        frame_tokens=4,
    )
    journal.append(
        RunStart(model="bench", base_url="http://127.0.0.1:1/v1", limits=limits, window=window)
    )
    call = 0
    while journal.state.total_turns * 3 < records:
        session = journal.state.session + 1
        opening = [
            SystemMessage(content=text(rng, 3000)),
            UserMessage(content=f"Session {session}.", origin="restart"),
        ]
        journal.append(SessionStart(session=session, reason="context_full", messages=opening))
        ids: list[str] = []
        for turn in range(1, TURNS + 1):
            call += 1
            tool = ToolCall(id=f"call_{call}", name="shell_exec", arguments='{"command": "make"}')
            reply = AssistantMessage(content=text(rng, 300), tool_calls=(tool,))
            prompt, completion = 1200 + 200 * turn, rng.randint(40, 300)
            used = prompt + completion
            usage = CallFigures(
                prompt_tokens=prompt,
                completion_tokens=completion,
                source="server",
                raw_prompt=1400 + 240 * turn,
                raw_reply=120,
                silent_truncation=False,
                raw_kinds={"system": 900, "assistant": 30 * turn, "output:text": 210 * turn},
                turn=turn,
                context_limit=WINDOW,
                zone="normal" if used < 4_730 else "soft" if used < 6_082 else "hard",
            )
            journal.append(MessageRecord(session=session, message=reply, usage=usage))
            journal.append(ToolStarted(session=session, call_id=tool.id, name=tool.name))
            result = ToolMessage(
                tool_call_id=tool.id,
                name=tool.name,
                content=text(rng, rng.randint(500, 4000)),
                exit_code=rng.choice((0, 0, 1)),
                arguments=tool.arguments,
            )
            journal.append(MessageRecord(session=session, message=result))
            ids.append(tool.id)
            if turn > TURNS // 2 and turn % 3 == 0:
                mask = Mask(
                    session=session,
                    call_ids=ids[:2],
                    reason=MaskReason.SOFT_THRESHOLD,
                    projected_before=prompt + 200,
                    projected_after=prompt - 1_000,
                )
                journal.append(mask)
                ids = ids[2:]
            if turn == TURNS - 2:
                notice = UserMessage(content="Save your state.", origin="wind_down")
                journal.append(
                    WindDown(
                        session=session,
                        projected=7000,
                        hard_line=7000,
                        room=1000,
                        reply_allowance=300,
                        turns_left=2,
                        message=notice,
                    )
                )
        journal.append(
            SessionEnd(
                session=session, reason=EndReason.CONTEXT_FULL, turns=journal.state.session_turns
            )
        )
    journal.close()


def probe(path: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, check=True
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--keep", action="store_true", help="leave the journals in /tmp")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ouroboros-resume-"))
    ok = True
    print("| records | journal | from snapshot | peak RSS | whole journal | peak RSS |")
    print("|---:|---:|---:|---:|---:|---:|")
    try:
        for records in args.records:
            path = folder / f"{records}" / "journal.jsonl"
            path.parent.mkdir()
            write_journal(path, records)
            lines = sum(1 for _ in path.open("rb"))
            fast = probe(path)
            snapshot_path(path).unlink()
            whole = probe(path)
            assert (fast["turns"], fast["messages"]) == (whole["turns"], whole["messages"])
            print(
                f"| {lines:,} | {path.stat().st_size / 1e6:.0f} MB | {fast['fold_s']:.3f} s | "
                f"{fast['peak_mb']:.0f} MB | {whole['fold_s']:.2f} s | {whole['peak_mb']:.0f} MB |"
            )
            if records >= 100_000:
                ok &= fast["fold_s"] < TARGET_S and fast["peak_mb"] < TARGET_MB
        print(f"\n(imports before the fold: {fast['import_s']:.2f} s, not counted)")
        target = f"resume at 100,000 records < {TARGET_S} s, < {TARGET_MB} MB"
        print(f"{'PASS' if ok else 'FAIL'}  {target}")
    finally:
        if args.keep:
            print(f"journals kept in {folder}")
        else:
            shutil.rmtree(folder)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
