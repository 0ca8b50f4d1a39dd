"""The figures issue 23 judges a replay by, each with its target, per run and in total.

`replay.py` measures a run into a `Result` (plain counts); this module turns the counts into the
issue's table and its verdicts. The cache figures are judged at 32K and larger windows only (at
8K restarts, not masking rounds, are most of what is processed again); smaller ones show theirs
without a verdict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

CACHE_WINDOW = 32_768
"""The window from which the prompt-cache targets apply."""
WIND_DOWN_SHARE = 0.95
PROMISES_RATIO = 1.1
PREFILL_RATIO = 1.2
BREAKS_PER_SESSION = 3.0


@dataclass
class Result:
    label: str
    n: Counter[str]
    price_errors: list[float] | None
    window: int = 0
    """0: the total of several runs."""


def ratio(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def cache_runs(r: Result, results: list[Result]) -> Counter[str]:
    """The counts the cache figures are taken from: the run's, or for the total every run at
    `CACHE_WINDOW` or more."""
    if r.window:
        return r.n
    return sum((x.n for x in results if x.window >= CACHE_WINDOW), Counter())


def judged_for_cache(r: Result) -> bool:
    return not r.window or r.window >= CACHE_WINDOW


@dataclass(frozen=True)
class Figure:
    title: str
    target: str
    value: Callable[[Result, list[Result]], str]
    passes: Callable[[Result, list[Result]], bool | None]
    """None: no verdict for this run."""


def lost(r: Result, _: list[Result]) -> str:
    return f"{r.n['lost']} of {r.n['restarts']}"


def after_wind_down(r: Result, _: list[Result]) -> str:
    whole = r.n["restarts"]
    share = f" ({ratio(r.n['after complete wind-down'], whole):.0%})" if whole else ""
    return f"{r.n['after complete wind-down']} of {whole}{share}"


def promises(r: Result, _: list[Result]) -> str:
    n = r.n
    keep3 = ratio(n["sessions"], n["floor"])
    sessions = f"{n['sessions']}/{n['promises']}"
    return f"{ratio(n['sessions'], n['promises']):.2f} ({sessions}; keep-3 {keep3:.2f})"


def prefill(r: Result, results: list[Result]) -> str:
    n = cache_runs(r, results)
    return f"{ratio(n['processed'], n['bound']):.2f}" if n["bound"] else "–"


def breaks(r: Result, results: list[Result]) -> str:
    n = cache_runs(r, results)
    return f"{ratio(n['breaks'], n['sessions']):.1f}" if n["sessions"] else "–"


def prefill_passes(r: Result, results: list[Result]) -> bool | None:
    n = cache_runs(r, results)
    if not judged_for_cache(r) or not n["bound"]:
        return None
    return n["processed"] <= PREFILL_RATIO * n["bound"]


def breaks_pass(r: Result, results: list[Result]) -> bool | None:
    n = cache_runs(r, results)
    if not judged_for_cache(r) or not n["sessions"]:
        return None
    return n["breaks"] <= BREAKS_PER_SESSION * n["sessions"]


FIGURES = [
    Figure("restarts that lose the last step", "0", lost, lambda r, _: not r.n["lost"]),
    Figure(
        "results the model never saw",
        "0",
        lambda r, _: str(r.n["never shown"]),
        lambda r, _: not r.n["never shown"],
    ),
    Figure(
        "restarts after a completed wind-down",
        f"≥ {WIND_DOWN_SHARE:.0%} per run",
        after_wind_down,
        lambda r, _: r.n["after complete wind-down"] >= WIND_DOWN_SHARE * r.n["restarts"],
    ),
    Figure(
        "sessions ÷ equal-promises floor (sessions/floor; ÷ keep-3 floor)",
        f"≤ {PROMISES_RATIO}",
        promises,
        lambda r, _: r.n["sessions"] <= PROMISES_RATIO * r.n["promises"],
    ),
    Figure(
        "prefill ÷ an unmanaged agent's",
        f"≤ {PREFILL_RATIO} at {CACHE_WINDOW // 1024}K+",
        prefill,
        prefill_passes,
    ),
    Figure(
        "cache breaks per session",
        f"≤ {BREAKS_PER_SESSION:g} at {CACHE_WINDOW // 1024}K+",
        breaks,
        breaks_pass,
    ),
    Figure("overflows", "0", lambda r, _: str(r.n["overflows"]), lambda r, _: not r.n["overflows"]),
]


def verdict(passed: bool | None) -> str:
    return "n/a" if passed is None else "PASS" if passed else "FAIL"


def issue_table(results: list[Result], overall: Result) -> bool:
    """Prints the table (a figure a row, a run a column, the total last) and the verdicts; True
    when every figure passes in every run and in total."""
    runs = [*results, overall]
    print("| Figure | Target | " + " | ".join(r.label for r in runs) + " |")
    print("|---|---|" + "---:|" * len(runs))
    ok = True
    lines = []
    for figure in FIGURES:
        cells = []
        failing = []
        for r in runs:
            passed = figure.passes(r, results)
            cells.append(f"{figure.value(r, results)} {verdict(passed)}")
            if passed is False:
                failing.append(f"{r.label} {figure.value(r, results)}")
        print(f"| {figure.title} | {figure.target} | " + " | ".join(cells) + " |")
        ok &= not failing
        detail = f": {', '.join(failing)}" if failing else ""
        lines.append(f"{verdict(not failing)}  {figure.title} {figure.target}{detail}")
    print()
    print("\n".join(lines))
    print()
    return ok
