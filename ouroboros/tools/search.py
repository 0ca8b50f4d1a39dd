"""`search_context`: the agent looks up what earlier sessions saw, ran and logged.

The journal can hold 100,000 records and more, so the search runs as one case-insensitive regex
over the file's bytes and parses only the lines that match (bench/search_context.py measures it).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ouroboros.ground.jsonl import Problem, parse_object
from ouroboros.ground.state_folder import EVENTS, JOURNAL
from ouroboros.tools.abandonable import abandonable
from ouroboros.tools.tool import Output, Tool, ToolArgs, ToolContext, ToolFailed

EXCERPT_CHARS = 240
MAX_RESULTS = 50


class SearchContextArgs(ToolArgs):
    """Search, newest first, earlier sessions' messages, the shell commands run (exit_code -1:
    the failed ones) or the event log (type: an event kind)."""

    source: Literal["sessions", "commands", "logs"]
    query: str = ""
    """Case-insensitive; empty: everything."""
    exit_code: int | None = None
    type: str = ""
    last_n: int = Field(20, ge=1, le=MAX_RESULTS)


def _newest_matching(
    path: Path, needles: list[bytes], skipped: list[Problem]
) -> Iterator[dict[str, Any]]:
    """Records whose line contains every needle (case-insensitive), newest first.

    Lowering the whole file once and scanning backwards with `rfind` keeps this at C speed, and
    a caller that wants the last 20 stops after 20 matches instead of parsing the whole file.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return
    raw = raw[: raw.rfind(b"\n") + 1]  # a torn last line is not a record yet
    # ASCII-only lowering keeps every byte offset the same as in `raw`.
    data = raw.lower() if needles else raw
    needles = [n.lower() for n in needles]
    end = len(data)
    while end > 0:
        position = data.rfind(needles[0], 0, end) if needles else end - 1
        if position == -1:
            return
        begin = data.rfind(b"\n", 0, position) + 1
        stop = data.find(b"\n", position)
        end = begin
        if all(n in data[begin:stop] for n in needles[1:]):
            record = parse_object(raw[begin:stop])
            if record is None:
                line = raw.count(b"\n", 0, begin) + 1
                skipped.append(Problem(path, line, "not a JSON object"))
            else:
                yield record


def _json_fragment(text: str) -> bytes:
    """How `text` appears inside a JSON line, so the byte search matches escapes too."""
    return json.dumps(text, ensure_ascii=False)[1:-1].encode()


def _excerpt(text: str, query: str) -> str:
    at = text.lower().find(query.lower()) if query else 0
    start = max(0, at - EXCERPT_CHARS // 3)
    piece = text[start : start + EXCERPT_CHARS].replace("\n", " ⏎ ")
    return ("…" if start else "") + piece + ("…" if start + EXCERPT_CHARS < len(text) else "")


def search_sessions(journal: Path, query: str, last_n: int, skipped: list[Problem]) -> list[str]:
    # The most selective needle first: it drives the regex scan.
    needles = ([_json_fragment(query)] if query else []) + [b'"kind":"message"']
    found: list[str] = []
    for record in _newest_matching(journal, needles, skipped):
        if len(found) == last_n:
            break
        message = record["message"]
        content = message.get("content", "") + "".join(
            f" {c['name']}({c['arguments']})" for c in message.get("tool_calls", [])
        )
        if query.lower() in content.lower():
            role = message["kind"] + (f" {message['name']}" if message["kind"] == "tool" else "")
            found.append(
                f"[session {record['session']} {record['ts'][:19]} {role}] "
                f"{_excerpt(content, query)}"
            )
    return found[-last_n:]


def search_commands(
    journal: Path, query: str, exit_code: int | None, last_n: int, skipped: list[Problem]
) -> list[str]:
    """Every shell_exec with its exit code, joining each call to its result (newest first)."""
    results: dict[str, int | None] = {}
    found: list[str] = []
    needles = [b'"shell_exec"', b'"kind":"message"']
    for record in _newest_matching(journal, needles, skipped):
        message = record["message"]
        if message["kind"] == "tool":
            results[message["tool_call_id"]] = message.get("exit_code")
            continue
        for call in reversed(message.get("tool_calls", [])):
            if call["name"] != "shell_exec" or call["id"] not in results:
                continue
            code = results.pop(call["id"])
            try:
                command = str(json.loads(call["arguments"]).get("command", ""))
            except (json.JSONDecodeError, AttributeError):
                command = call["arguments"]
            if query.lower() not in command.lower():
                continue
            if (exit_code == -1 and code == 0) or exit_code not in (None, -1, code):
                continue
            shown = "?" if code is None else code
            found.append(
                f"[session {record['session']} {record['ts'][:19]}] exit {shown}: {command}"
            )
            if len(found) == last_n:
                return found[::-1]
    return found[::-1]


def search_logs(
    events: Path, query: str, kind: str, last_n: int, skipped: list[Problem]
) -> list[str]:
    needles = ([_json_fragment(query)] if query else []) + (
        [f'"kind":"{kind}"'.encode()] if kind else []
    )
    found: list[str] = []
    for record in _newest_matching(events, needles, skipped):
        if len(found) == last_n:
            break
        if kind and record["kind"] != kind:
            continue
        fields = {k: v for k, v in record.items() if k not in ("v", "seq", "ts", "kind")}
        text = json.dumps(fields, ensure_ascii=False)
        if query.lower() in text.lower():
            found.append(f"[{record['ts'][:19]} {record['kind']}] {_excerpt(text, query)}")
    return found[::-1]


def search_context(state_dir: Path, workspace: Path, args: SearchContextArgs) -> Output:
    journal = state_dir / JOURNAL
    skipped: list[Problem] = []
    if args.source == "sessions":
        found = search_sessions(journal, args.query, args.last_n, skipped)
    elif args.source == "commands":
        found = search_commands(journal, args.query, args.exit_code, args.last_n, skipped)
    else:
        events = state_dir / EVENTS
        found = search_logs(events, args.query, args.type, args.last_n, skipped)
    notes = [str(problem) for problem in skipped]
    if not found:
        raise ToolFailed(" ".join([f"nothing in {args.source} matches {args.query!r}", *notes]))
    header = f"{len(found)} newest matches in {args.source} (working folder {workspace}):"
    return Output("\n".join([header, *found, *notes]))


class SearchContext(Tool):
    """Searches the run's state folder; offered once a session has ended (before, there is
    nothing to search: its schema would be dead weight)."""

    name, args, from_session = "search_context", SearchContextArgs, 2

    def __init__(self, state_dir: Path):
        self.state_dir = state_dir

    async def run(self, args: SearchContextArgs, context: ToolContext) -> Output:
        return await abandonable(search_context, self.state_dir, context.workspace.root, args)
