"""A loop as people read it: what repeated, quoted whole where there is room and cut inside its
quotes where there is not, in the terminal, `status` and the report alike."""

from __future__ import annotations

import pytest

from ouroboros.observe.describe import describe, loop_text
from ouroboros.observe.report import notable_table

REPLY = (
    "I will first read the parser module to see how the dates are parsed, then write a test "
    "for the ISO format and run it"
)
FAILING = [
    'shell_exec {"command": "pytest -x tests/test_dates.py"}',
    "FAILED tests/test_dates.py::test_iso - ValueError: unconverted data remains: Z",
    "3 times",
]


def loop(kind: str, evidence: list[str], level: int = 1) -> dict[str, object]:
    return {
        "v": 1,
        "ts": "2026-11-29T10:00:00.000+00:00",
        "kind": "loop",
        "session": 2,
        "loop": kind,
        "evidence": evidence,
        "level": level,
        "detections": 1,
    }


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize(
    "record",
    [
        loop("no_calls", [REPLY[:77] + "...", "3 replies"]),
        loop("failing", FAILING, level=2),
        loop("repeat", ['file_read {"path": "src/parser.py"}', "3 times"], level=3),
    ],
    ids=["no_calls", "failing", "repeat"],
)
def test_a_loop_line_fits_and_cuts_inside_its_quotes(record: dict[str, object], width: int) -> None:
    line = describe(record, width=width)
    assert line is not None
    text = line.plain
    assert len(text) <= width
    # Each quote is closed: a quote is cut inside it, never the line in the middle of one.
    assert text.count("“") == text.count("”") >= 1, text
    assert not text.endswith("…") or text.endswith("…”"), text


def test_a_reply_loop_says_what_the_reply_began_with() -> None:
    """It read `[reply cut off … it began...; 3 replies`: nothing after "it began"."""
    said = loop_text(loop("no_calls", [REPLY[:77] + "...", "3 replies"]))
    assert said == (
        f"no_calls -> nudge: 3 replies without a tool call, the newest: “{REPLY[:77]}…”"
    )


def test_the_report_lists_a_loop_as_words_not_a_python_list() -> None:
    listed = notable_table([loop("failing", FAILING, level=2)])
    assert "evidence=" not in listed
    assert "[&#x27;" not in listed
    assert "failing -&gt; restart: the same call failed the same way 3 times" in listed
    assert (
        "“FAILED tests/test_dates.py::test_iso - ValueError: unconverted data remains: Z”" in listed
    )
