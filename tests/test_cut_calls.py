"""A reply cut off at the output limit inside a tool call (`finish_reason` "length"): the call is
neither run nor kept, and the agent is told which tool, how many bytes in, and how to do it in
smaller calls. Natively (a call's arguments stopped mid-way: in fragments as llama-server
streams them, in one chunk as Ollama does), and in the text protocol (an action left open)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import pytest

from ouroboros.context.mask import CUT_OFF_KEPT_CHARS
from ouroboros.model.byte_limit import LimitedStream, ReplyTooLarge
from ouroboros.model.scripted import Reply, ScriptedServer, tool
from ouroboros.model.text_calls import OpenCall, open_call
from ouroboros.state.snapshot import snapshot_path
from tests.conftest import Project
from tests.inprocess import run_here

FINISH = Reply(tool_calls=[tool("finish", summary="done")])
CUT = 10**6
"""`completion_tokens` past any output limit: the reply ends "length"."""


def shell_cut(size: int) -> str:
    """A shell_exec call's arguments stopped `size` bytes in, inside its command."""
    start = '{"command": "cat > big.txt <<EOF\\n'
    return start + "x" * (size - len(start))


def tool_results(body: dict[str, Any]) -> dict[str, str]:
    """Each tool result of a request, by the name of the tool that gave it."""
    calls = {
        c["id"]: c["function"]["name"] for m in body["messages"] for c in m.get("tool_calls") or ()
    }
    return {calls[m["tool_call_id"]]: m["content"] for m in body["messages"] if m["role"] == "tool"}


def test_a_call_cut_in_its_arguments_is_not_run_nor_kept_and_says_why(project: Project) -> None:
    """A 400 KB shell_exec stopped mid-way: the calls before it run; it gets an error result
    naming it and where it was cut, and no other note (the result says it all)."""
    cut = Reply(tool_calls=[tool("list_dir", path="."), ("shell_exec", shell_cut(400_000))])
    ran = run_here(project, [Reply(**{**vars(cut), "completion_tokens": CUT}), FINISH])
    assert ran.returncode == 0, ran.stderr
    second = ran.chat_requests()[1]
    results = tool_results(second)
    assert results["shell_exec"] == (
        "error: Your last reply was cut off at the output limit (256 tokens) 400,000 bytes into "
        "a shell_exec call, which was not run. Do it in smaller calls: write a long file or "
        "script in parts (`cat >> path`)."
    )
    assert not results["list_dir"].startswith("error"), "the whole call before it ran"
    assert not (project.workspace / "big.txt").exists()
    assert json.dumps(second).count("cut off at the output limit") == 1
    assert (project.state / "journal.jsonl").stat().st_size < 50_000, "the cut text is not kept"


def test_a_plan_cut_in_its_items_is_told_to_send_fewer(project: Project) -> None:
    items = ", ".join(json.dumps(f"step {n}: do the next part") for n in range(100_000))
    arguments = '{"items": [' + items
    ran = run_here(
        project, [Reply(tool_calls=[("plan", arguments)], completion_tokens=CUT), FINISH]
    )
    assert ran.returncode == 0, ran.stderr
    second = ran.chat_requests()[1]
    told = tool_results(second)["plan"]
    assert f"{len(arguments):,} bytes into a plan call, which was not run" in told, told
    assert told.endswith("Send fewer, shorter plan items.")
    assert "step 0: do the next part" not in json.dumps(second), "no item of it is kept"


def test_a_text_action_cut_open_names_its_tool(project: Project) -> None:
    content = "word " * 50_000
    action = '```json\n{"tool": "file_write", "arguments": {"path": "notes.md", "content": "'
    text = f"I write the notes.\n{action}{content}"
    ran = run_here(
        project,
        [Reply(text=text, completion_tokens=CUT), Reply(text="```bash\nexit 0\n```"), FINISH],
        llm={"tool_protocol": "text"},
    )
    assert ran.returncode == 0, ran.stderr
    told = ran.chat_requests()[1]["messages"][-1]["content"]
    size = len(text.encode()) - len("I write the notes.\n```json\n")
    assert told == (
        f"Your last reply was cut off at the output limit (256 tokens) {size:,} bytes into a "
        "file_write call, which was not run. Write the file in parts: file_write the first, then "
        "`cat >> path` the others."
    )
    assert not (project.workspace / "notes.md").exists()

    # Killed right after that reply was journalled: the resumed run tells it the same, from the
    # reply as written (the view shows a placeholder).
    journal = project.state / "journal.jsonl"
    records = project.records("journal.jsonl")
    cut = next(i for i, r in enumerate(records) if r["kind"] == "message" and r.get("usage"))
    journal.write_text("".join(journal.read_text().splitlines(keepends=True)[: cut + 1]))
    snapshot_path(journal).unlink(missing_ok=True)
    resumed = run_here(project, [FINISH], llm={"tool_protocol": "text"})
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.chat_requests()[0]["messages"][-1]["content"] == told


@pytest.mark.parametrize(
    ("dialect", "size"),
    [
        pytest.param("llama", 40_000, id="in-fragments"),
        pytest.param("ollama", 400_000, id="one-chunk"),
    ],
)
@pytest.mark.slow
def test_a_call_cut_on_the_wire_is_told_what_happened(
    project: Project, dialect: str, size: int
) -> None:
    script = [Reply(tool_calls=[("shell_exec", shell_cut(size))], completion_tokens=CUT), FINISH]
    with ScriptedServer(script, dialect=dialect) as server:  # type: ignore[arg-type]
        project.configure(server.url)
        done = project.run("run")
        second = server.chat_requests()[1]
    assert done.returncode == 0, done.stderr
    told = tool_results(second)["shell_exec"]
    assert f"cut off at the output limit (256 tokens) {size:,} bytes into a shell_exec" in told
    assert not (project.workspace / "big.txt").exists()


@pytest.mark.parametrize("dialect", ["ollama", "llama"])
@pytest.mark.slow
def test_a_call_the_byte_cap_falls_in_is_named(project: Project, dialect: str) -> None:
    """A whole call in one chunk (as Ollama sends it) past `llm.max_reply_bytes`: the client
    never reads the chunk whole, yet the call is named from its start, not lost; in fragments
    (llama-server), the fragments read are the call cut."""
    script = [Reply(tool_calls=[("shell_exec", shell_cut(400_000))]), FINISH]
    with ScriptedServer(script, dialect=dialect) as server:  # type: ignore[arg-type]
        project.configure(server.url, llm={"max_reply_bytes": 100_000})
        done = project.run("run")
        second = server.chat_requests()[1]
    assert done.returncode == 0, done.stderr
    told = tool_results(second)["shell_exec"]
    size = r"9\d,\d{3}" if dialect == "ollama" else r"[\d,]+"
    assert re.search(rf"output limit \(256 tokens\) {size} bytes into a shell_exec call", told)
    assert len(tool_results(second)) == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Writing it.\n```bash\ncat > a.md <<'EOF'\nline", OpenCall("shell_exec", 23)),
        ('```json\n{"tool": "plan", "arguments": {"items": ["a"', OpenCall("plan", 44)),
        ("```\n{", OpenCall(None, 1)),
        ('<tool_call>{"name": "file_write", "arguments": {"pa', OpenCall("file_write", 40)),
        ("```bash\nls\n```\nDone, now I think about", None),
        ("<think>I could write ```bash\nls", None),
        ("Just prose, cut", None),
    ],
    ids=[
        "bash",
        "json-action",
        "json-unnamed",
        "hermes",
        "closed-then-prose",
        "reasoning",
        "prose",
    ],
)
def test_the_call_a_cut_reply_ends_inside(text: str, expected: OpenCall | None) -> None:
    assert open_call(text) == expected


class _Parts(httpx2.AsyncByteStream):
    def __init__(self, parts: list[bytes]):
        self.parts = parts

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            yield part


@pytest.mark.parametrize(
    ("blank", "split"), [(b"\n\n", 1), (b"\r\n\r\n", 1), (b"\r\n\r\n", 2), (b"\r\n\r\n", 3)]
)
def test_the_event_the_byte_cap_falls_in_starts_after_a_blank_line_split_between_reads(
    blank: bytes, split: int
) -> None:
    """The cap falls in a text event whose blank line before came in two reads: the event cut
    is that one, never the call before it (which would be named as a call cut)."""
    named = {"tool_calls": [{"index": 0, "function": {"name": "finish"}}]}
    call = b"data: " + json.dumps({"choices": [{"delta": named}]}).encode()
    text = b'data: {"choices":[{"delta":{"content":"' + b"x" * 1000
    parts = [call + blank[:split], blank[split:] + text]
    limit = len(call) + len(blank) + 100

    async def read() -> ReplyTooLarge:
        with pytest.raises(ReplyTooLarge) as caught:
            async for _ in LimitedStream(_Parts(parts), limit, ""):
                pass
        return caught.value

    cut = anyio.run(read)
    assert cut.event_head.startswith(b'data: {"choices":[{"delta":{"content"')
    assert cut.event_bytes == 100


def test_a_reply_cut_off_before_any_call_is_shown_short_and_journalled_whole(
    project: Project,
) -> None:
    """Its thought is written again, shorter, once the model is told it was cut off: kept whole it
    would take `max_output_tokens` of every later prompt next to the reply that does the step."""
    thought = "THOUGHT: I look at the layout first, then trace the bug. " + "parse-tz " * 400
    script = [
        Reply(text=thought, completion_tokens=CUT),
        Reply(text="Listing.", tool_calls=[tool("list_dir", path=".")]),
        FINISH,
    ]
    ran = run_here(project, script)
    assert ran.returncode == 0, ran.stderr
    for body in ran.chat_requests()[1:]:
        replies = [m for m in body["messages"] if m["role"] == "assistant"]
        # Its own first words, cut at a word; nothing the harness says stands in its place (a
        # small model copies that into every reply after).
        shown = replies[0]["content"]
        assert thought.startswith(shown)
        assert len(shown) <= CUT_OFF_KEPT_CHARS < len(thought)
        assert shown.endswith("parse-tz")
    told = ran.chat_requests()[1]["messages"][-1]
    assert told["role"] == "user"
    assert "cut off at the output limit" in told["content"]
    assert "Listing." in json.dumps(ran.chat_requests()[2]), "a reply that made a call is whole"
    kept = [r["message"] for r in project.records("journal.jsonl") if r["kind"] == "message"]
    assert kept[0]["content"] == thought, "the journal keeps what the model wrote"


def test_a_reply_cut_off_after_its_calls_is_shown_whole(project: Project) -> None:
    script = [
        Reply(
            text="Listing first.", tool_calls=[tool("list_dir", path=".")], completion_tokens=CUT
        ),
        FINISH,
    ]
    ran = run_here(project, script)
    assert ran.returncode == 0, ran.stderr
    replies = [m for m in ran.chat_requests()[1]["messages"] if m["role"] == "assistant"]
    assert replies[0]["content"] == "Listing first."


def test_a_reply_cut_off_shorter_than_its_placeholder_is_shown_whole(project: Project) -> None:
    """At a tiny output limit the placeholder would take more room than the text it hides."""
    script = [Reply(text="Let me see", completion_tokens=CUT), FINISH]
    ran = run_here(project, script)
    assert ran.returncode == 0, ran.stderr
    replies = [m for m in ran.chat_requests()[1]["messages"] if m["role"] == "assistant"]
    assert replies[0]["content"] == "Let me see"
