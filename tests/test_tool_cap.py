"""The cap on a tool's output is in tokens, priced as the harness prices content: an output of
digits (about a token a byte) and one of prose (about four bytes a token) are cut alike."""

from __future__ import annotations

import json

from ouroboros.context.tokens import Calibration
from ouroboros.context.truncate import cap_output, capped_bytes, output_price
from ouroboros.model.scripted import Reply, count_tokens, tool
from tests.conftest import Project
from tests.inprocess import run_here

DIGITS = "".join(f"{i % 10},{(i * 7) % 10},{(i * 3) % 10}\n" for i in range(4000))
PROSE = "".join(f"The parser reads line {i} and finds nothing wrong with it.\n" for i in range(400))


def test_digits_and_prose_are_cut_to_the_same_price() -> None:
    calibration = Calibration()
    kept = {}
    for name, text in (("digits", DIGITS), ("prose", PROSE)):
        size = capped_bytes(calibration, 1000, text)
        price = output_price(calibration, text)(cap_output(text, size).text)
        assert 950 <= price <= 1000, (name, price)
        kept[name] = size
    assert kept["prose"] > 2.5 * kept["digits"], kept


def test_an_output_that_fits_is_kept_whole() -> None:
    text = PROSE[:2000]
    assert capped_bytes(Calibration(), 1000, text) == len(text.encode())


def results(project: Project) -> list[dict[str, object]]:
    journal = (project.state / "journal.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in journal]
    messages = [r["message"] for r in records if r["kind"] == "message"]
    return [m for m in messages if m["kind"] == "tool"]


def test_a_run_stores_digits_within_the_cap_in_tokens(project: Project) -> None:
    # At 8K the cap is a quarter of the prompt budget: 1,689 tokens. By bytes (a quarter of the
    # budget at four bytes a token) the digits would keep 6,759 bytes, about as many tokens.
    (project.workspace / "digits.txt").write_text(DIGITS)
    (project.workspace / "prose.txt").write_text(PROSE * 3)
    replies = [
        Reply(tool_calls=[tool("shell_exec", command="cat digits.txt")]),
        Reply(tool_calls=[tool("shell_exec", command="cat prose.txt")]),
        Reply(text="Done."),
    ]
    run_here(project, replies, window=8192, supervisor={"max_total_turns": 3, "max_restarts": 0})
    digits, prose = results(project)
    counted = []
    for result in (digits, prose):
        counted.append(count_tokens({"messages": [{"role": "tool", "content": result["content"]}]}))
        assert "Full output: .outputs/" in str(result["content"]), "the whole text saved, and said"
    # Priced before the server counted either (1.2 tokens a pre-token): under the cap, alike.
    assert all(1000 <= n <= 1689 for n in counted), counted
    assert abs(counted[0] - counted[1]) < 0.2 * max(counted), counted
    assert len(str(prose["content"])) > 2.5 * len(str(digits["content"]))


def test_the_former_byte_cap_still_bounds_the_output(project: Project) -> None:
    (project.workspace / "prose.txt").write_text(PROSE)
    replies = [Reply(tool_calls=[tool("shell_exec", command="cat prose.txt")]), Reply(text="Ok.")]
    run_here(
        project,
        replies,
        window=8192,
        context={"max_tool_output_bytes": 2000},
        supervisor={"max_total_turns": 2, "max_restarts": 0},
    )
    (result,) = results(project)
    assert len(str(result["content"]).encode()) <= 2000
