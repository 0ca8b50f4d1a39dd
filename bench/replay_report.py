"""The tables `replay.py` prints: the columns of each, and the targets it checks."""

from __future__ import annotations

import math
from collections.abc import Callable

from issue_table import Result
from replay_measures import PARTS


def share(part: int, whole: int) -> str:
    return f"{part / whole:.0%}" if whole else "–"


def quantile(values: list[float], q: float) -> float:
    return sorted(values)[max(0, math.ceil(q * len(values)) - 1)]


def prices(r: Result) -> str:
    if r.price_errors is None:
        return "n/a"
    errors = r.price_errors
    return f"{quantile(errors, 0.5):.1%} / {quantile(errors, 0.9):.1%}" if errors else "none"


Column = tuple[str, Callable[[Result], str]]
MAIN: list[Column] = [
    ("Run", lambda r: r.label),
    ("Steps", lambda r: str(r.n["steps"])),
    ("Sessions (floors)", lambda r: f"{r.n['sessions']} ({r.n['floor']}, {r.n['promises']})"),
    ("Overflows", lambda r: str(r.n["overflows"])),
    ("Lost at restart", lambda r: f"{r.n['lost']} of {r.n['restarts']}"),
    ("Never shown", lambda r: f"{r.n['never shown']} ({r.n['as placeholders']})"),
    ("Wind-downs complete", lambda r: f"{r.n['complete']} of {r.n['wind-downs']}"),
    ("Ended w/o wind-down", lambda r: f"{r.n['no wind-down']}"),
    ("Price error p50 / p90", prices),
    ("Processed ÷ append-only", lambda r: f"{r.n['processed'] / max(r.n['bound'], 1):.2f}"),
    ("Breaks / session", lambda r: f"{r.n['breaks'] / max(r.n['sessions'], 1):.1f}"),
    ("Whole results / request", lambda r: f"{r.n['whole results sent'] / r.n['requests']:.1f}"),
    ("Placeholders naming all", lambda r: share(r.n["all"], r.n["placeholders"])),
    ("Served again", lambda r: str(r.n["again"])),
    ("Shortened (calls cut)", lambda r: f"{r.n['shortened']} ({r.n['cut']})"),
    ("Stopped at the limit (calls lost)", lambda r: f"{r.n['stopped']} ({r.n['calls lost']})"),
    ("Requests", lambda r: str(r.n["requests"])),
    ("Seconds", lambda r: str(r.n["seconds"])),
]


def wind_down_share(r: Result) -> float:
    return r.n["complete"] / r.n["wind-downs"] if r.n["wind-downs"] else 1.0


def no_jump(r: Result) -> bool:
    return r.n["no wind-down"] == 0


def part_share(part: str) -> Column:
    return (f"`{part}`" if part == '""' else part, lambda r: share(r.n[part], r.n["placeholders"]))


def lost_why(r: Result) -> str:
    why = [f"{k[6:]} {v}" for k, v in sorted(r.n.items()) if k.startswith("lost: ") and v]
    return ", ".join(why) or "–"


def restart_and_break_share(r: Result) -> str:
    processed = max(r.n["processed"], 1)
    restarts, breaks = r.n["processed at restarts"], r.n["processed at breaks"]
    return f"{restarts / processed:.0%} / {breaks / processed:.0%}"


DETAILS: list[Column] = [
    ("Run", lambda r: r.label),
    ("Lost at restart: why", lost_why),
    ("Carried shortened", lambda r: str(r.n["carried shortened"])),
    ("Placeholders", lambda r: str(r.n["placeholders"])),
    *map(part_share, (*PARTS, '""')),
    ("Not as recorded", lambda r: str(r.n["not as recorded"])),
    ("Processed (append-only)", lambda r: f"{r.n['processed']:,} ({r.n['bound']:,})"),
    ("Processed: restarts / breaks", restart_and_break_share),
    ("Finished", lambda r: f"{r.n['finished']} of {r.n['runs']}"),
]


def table(columns: list[Column], results: list[Result]) -> None:
    print("| " + " | ".join(title for title, _ in columns) + " |")
    print("|---|" + "---:|" * (len(columns) - 1))
    for r in results:
        print("| " + " | ".join(cell(r) for _, cell in columns) + " |")
    print()


def p90_within(r: Result) -> bool:
    return not r.price_errors or quantile(r.price_errors, 0.9) <= 0.10


TARGETS: list[tuple[str, str, Callable[[Result], bool]]] = [
    ("every wind-down complete", "Wind-downs complete", lambda r: wind_down_share(r) == 1),
    ("no session ended without a wind-down", "Ended w/o wind-down", no_jump),
    ("price error p90 <= 10%", "Price error p50 / p90", p90_within),
    ("outputs served as recorded", "Not as recorded", lambda r: not r.n["not as recorded"]),
    ("every replay ended by finish", "Finished", lambda r: r.n["finished"] == r.n["runs"]),
]


def verdicts(results: list[Result]) -> bool:
    cells = dict(MAIN + DETAILS)
    ok = True
    for target, column, passes in TARGETS:
        if column.startswith("Price") and all(r.price_errors is None for r in results):
            print(f"n/a   {target}: n/a (harness does not log prices)")
            continue
        ok &= (passed := all(map(passes, results)))
        failing = ", ".join(f"{r.label} {cells[column](r)}" for r in results if not passes(r))
        print(f"{'PASS' if passed else 'FAIL'}  {target}" + (f": {failing}" if failing else ""))
    return ok
