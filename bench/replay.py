"""Real agent trajectories replayed through the real `python -m ouroboros run`, at real windows.

Each trajectory (JSONL: step, thought, action, observation, returncode; the files and folders
given, a folder meaning every `*.jsonl` in it, by default ../shared/trajectories; held-out ones
kept outside the repository run the same way) is the model behind a loopback llama-server look-alike
(`ouroboros.model.scripted.ScriptedServer`). Each reply is the first step not yet delivered (its
result has not appeared whole in a request, or for a text-only step the reply itself), so a
restart goes on with the trajectory and a step the harness lost is served again; after the last
one, `finish`.
A reply is the step's thought and a `shell_exec` call of its recorded command; a `BASH_ENV` script
prints the recorded output and exits with the recorded code before the command can run. A reply
that would not fit `llm.max_output_tokens` is first served as a server stops it: the head of its
thought, `finish_reason: "length"`, its call (written after the thought) lost; the model, told to
go on, then writes the step again keeping the head of its thought that fits with the call (a call
that alone does not fit is cut there, as a server stops). With --uncut only the second form is
served, as before issue 32. The floors and the unmanaged agent hold the stopped replies too:
every agent gets them from this model. The server counts tokens with llama-server's
`/apply-template` and `/tokenize` (Gemma 3 270M; calls and tool schemas rendered as JSON), else
(or with --bytes4) bytes/4 + 4 per message, and refuses a request whose prompt plus reply exceeds
the window (HTTP 400 `exceed_context_size_error`). The harness runs with its defaults: the window
set, `shell_timeout_s` 30, and 3 x steps + 30 turns at most (a guard).

Run:  .venv/bin/python bench/replay.py [PATHS...] [--windows 8192 32768] [--bytes4] [--keep DIR]
      [--uncut]
About 35 s for the three trajectories at two windows on 2 cores; exit status 1 if a target fails.
--keep DIR keeps each run's project (`python -m ouroboros tail --state DIR/NAME/.ouroboros`);
its path is in the system prompt, so another folder can move the figures a little.
To replay another version of the harness, put its folder first on PYTHONPATH.

First the figures issue 23 judges a run by, per run and in total, each with its target and PASS or
FAIL (bench/issue_table.py): restarts that lose the agent's last step (0); results the model
never saw (0); restarts after a completed wind-down (its message, then every reply it asked for:
at least 95% in every run); sessions divided by the equal-promises floor (at most 1.1; the plain
keep-3 floor's ratio beside it); at 32K and larger windows, the prefill divided by an unmanaged
agent's (at most 1.2) and cache breaks per session (at most 3; smaller windows show theirs
without a verdict; the total counts the 32K runs); overflows (0).

The two floors (bench/floor.py), both from the trajectory as served, counted by the real
tokenizer, with the harness's default protection (`protected_observations` newest results whole
within `protected_max_fraction` of the budget, the rest as placeholders) and every prompt's
fixed part (tool schemas, system prompt, opening message) as in the run's first request:
- keep-3: the fewest sessions any policy keeping the newest results whole needs, with exact
  counts, everything else masked at once, nothing carried over; a session ends when the next
  reply would not fit the prompt budget.
- equal promises: the same, and the wind-down the harness promises, placed by an oracle that
  knows the replies to come: every session but the last ends with the wind-down message (its
  real size) and `session.wind_down_turns` of the trajectory's own replies (their real sizes,
  not a percentile), each fitting the budget, the results of each cut to what the harness
  shows at least (1 KB, head and tail), the newest results still whole; the wind-down's last
  step opens the next session (reply and whole results, carried, not generated again), as its
  results are seen there first. Each session winds down as late as its replies fit (greedy:
  a later wind-down leaves the next session less to hold).

Columns, per trajectory and window:
- sessions (floors): sessions run; the keep-3 and the equal-promises floor;
- overflows: requests refused because prompt + reply exceeded the window;
- lost at restart: restarts whose first request lacked the previous session's last step (its reply
  and every result, none a placeholder); the second table says why, and counts results carried
  but shortened;
- never shown: tool results in the journal never sent whole (in brackets: sent as placeholders);
- wind-downs complete: followed by all `session.wind_down_turns` replies (not counting a session
  the run ended by finish);
- ended w/o wind-down: sessions but the last with no wind-down (none is excused: as the harness
  gets it, no step is bigger than max_output_tokens plus the tool cap);
- price error: |harness's price - real tokens| / real of shell results of 100+ tokens, p50 / p90
  (from `result_tokens` of `tool_call` events, once the harness logs them);
- placeholders naming all: distinct placeholders sent that name every part of the second table: the
  command (30 chars), `exit N`, lines, bytes, the output's first and last non-blank lines
  (20 chars), where to read it again; and the share that quote an empty line (`""`);
- served again: replies for a step already served; shortened: replies cut to fit;
- stopped at the limit: replies served as a server stops them at max_output_tokens (in brackets:
  the calls lost in them).

Its parts: replay_tokens.py (token counts), replay_model.py (the trajectory as the model),
replay_run.py (one replay), replay_floors.py and replay_measures.py (the figures),
replay_report.py (the tables and targets).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from issue_table import Result, issue_table
from replay_measures import measure, total
from replay_report import DETAILS, MAIN, table, verdicts
from replay_run import replay
from replay_tokens import PROJECT_ROOT, RealTokens, tokenizer

import ouroboros

__all__ = ["RealTokens", "measure", "replay"]
"""What tests/test_real_server.py replays a trajectory with."""

TRAJECTORIES = PROJECT_ROOT.parent / "shared" / "trajectories"
WINDOWS = (8_192, 32_768)


def trajectories(paths: list[Path]) -> list[Path]:
    """The files given, and every `*.jsonl` in the folders given, in order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(path.glob("*.jsonl")))
        elif path.is_file():
            found.append(path)
        else:
            raise SystemExit(f"no trajectory file or folder at {path}")
    if not found:
        raise SystemExit(f"no *.jsonl trajectory in {', '.join(map(str, paths))}")
    return found


def setting(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    return key, json.loads(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        help=f"trajectories (JSONL), or folders of them (*.jsonl); default {TRAJECTORIES}",
    )
    parser.add_argument("--windows", nargs="+", type=int, default=list(WINDOWS))
    parser.add_argument("--bytes4", action="store_true", help="count bytes/4, not real tokens")
    parser.add_argument("--keep", type=Path, help="keep each run's project folder in this one")
    parser.add_argument(
        "--uncut",
        action="store_true",
        help="never stop a reply at max_output_tokens: shorten it to fit (as before issue 32)",
    )
    parser.add_argument(
        "--context",
        type=setting,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a [context] setting for the harness (mask_low_water=0.3); the floor keeps defaults",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    results: list[Result] = []
    paths = trajectories(args.paths or [TRAJECTORIES])
    with tokenizer(args.bytes4) as tokens:
        replies = "shortened to fit" if args.uncut else "stopped at"
        print(f"Token counts: {tokens.source}. Harness: {ouroboros.__path__[0]}")
        print(f"Replies longer than max_output_tokens: {replies} the limit.\n")
        for path in paths:
            for window in args.windows:
                run = replay(path, window, tokens, args.keep, dict(args.context), not args.uncut)
                results.append(measure(run))
                print(f"  {results[-1].label}: {results[-1].n['seconds']} s", file=sys.stderr)
    overall = total(results)
    table(MAIN, [*results, overall])
    table(DETAILS, [*results, overall])
    ok = issue_table(results, overall)
    ok &= verdicts(results)
    print(f"\n({time.monotonic() - started:.0f} s; token counts: {tokens.source})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
