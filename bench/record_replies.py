"""Keep a real model's replies as test fixtures for the reply reader.

    python bench/record_replies.py RUN_FOLDER... > tests/data/replies/NAME.jsonl

Each RUN_FOLDER is a project a run left (`bench/real_tasks.py --keep DIR` keeps them): its
journal's replies are read as the model wrote them (`written` where calls were taken out of the
text), and each kind worth a test is kept once: several calls in a reply, an unknown tool, a
reply cut off at the output limit, one that repeats the harness's words, a call written as
text, a reply with no call. The line says what the reply reader makes of it now (`calls`,
`unknown`, a phrase of the answer): review it before committing, since from then on the tests
hold the reader to it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from real_tasks import ngrams, records

from ouroboros.model.reply_reader import answer, read_reply

TOOLS = ["file_read", "file_write", "list_dir", "shell_exec", "plan", "finish"]
"""The built-in tools a run offers (the runs recorded have no MCP server)."""


def replies(folder: Path) -> Iterator[tuple[dict[str, Any], set[tuple[str, ...]]]]:
    """Each reply with what the harness had said before it (its word runs)."""
    said: set[tuple[str, ...]] = set()
    for record in records(folder / ".ouroboros" / "journal.jsonl"):
        if record.get("kind") == "session_start":
            for message in record.get("messages", []):
                if message.get("kind") in ("system", "user"):
                    said |= ngrams(message.get("content") or "")
        if record.get("kind") != "message":
            continue
        message = record["message"]
        if message.get("kind") == "user":
            said |= ngrams(message.get("content") or "")
        if message.get("kind") == "assistant" and record.get("usage"):
            native = bool(message.get("tool_calls")) and not record.get("calls_from_text")
            if not native:
                yield record, said


def kind(record: dict[str, Any], said: set[tuple[str, ...]], line: dict[str, Any]) -> str | None:
    content = line["content"]
    if record["usage"].get("finish_reason") == "length":
        return "cut off at the output limit"
    if ngrams(content) & said and not line["calls"]:
        return "repeats the harness's words"
    if line.get("unknown"):
        return "calls a tool there is not"
    if len(line["calls"]) > 1:
        return "several calls in one reply"
    if line["calls"]:
        return "one call written as text"
    return "no call" if content.strip() else None


def main(folders: list[str]) -> int:
    kept: set[str] = set()
    for folder in map(Path, folders):
        for record, said in replies(folder):
            content = record.get("written") or record["message"].get("content") or ""
            cut_off = record["usage"].get("finish_reason") == "length"
            found = read_reply(content, False, TOOLS, False, cut_off)
            schemas = [{"function": {"name": name, "parameters": {}}} for name in TOOLS]
            has_calls = bool(found.calls)
            told = answer(found.text, has_calls, found.unknown, schemas, False, cut_off, 512)
            line: dict[str, Any] = {
                "content": content,
                "finish_reason": record["usage"].get("finish_reason"),
                "tools": TOOLS,
                "calls": [[c.name, json.loads(c.arguments)] for c in found.calls],
                "unknown": list(found.unknown),
            }
            what = kind(record, said, line)
            if what is None or what in kept:
                continue
            kept.add(what)
            if told is not None:
                line["told"] = told.split(".")[0]
            print(json.dumps({"what": f"{what} ({folder.name})", **line}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
