"""What `replay.py` measures of a run: restarts and what they carried, results never shown,
wind-downs, price errors, placeholders; all of it as a `Result`."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

from issue_table import Result
from replay_floors import equal_promises_floor, floor, prefill_figures
from replay_model import DEFAULTS, PLACEHOLDER
from replay_run import Run

from ouroboros.context import mask
from ouroboros.ground.messages import (
    AssistantMessage,
    Message,
    ToolMessage,
)
from ouroboros.ground.prompts import DEAD_END_NOTE
from ouroboros.state.loop_tally import own_text

PARTS = ("command", "exit", "lines", "bytes", "first", "last", "where")


def first_request(run: Run, session: int) -> list[dict[str, Any]]:
    marker = f"Session {session}."
    for body in run.requests:
        messages: list[dict[str, Any]] = body["messages"]
        if len(messages) > 1 and str(messages[1].get("content")).startswith(marker):
            return messages
    return []


def last_step_fate(previous: list[Message], sent: list[dict[str, Any]]) -> tuple[str, int]:
    """Whether a session's last step is whole in the next session's first request ('kept') or
    why not, and how many of its results were carried shortened."""
    reply = next(m for m in reversed(previous) if isinstance(m, AssistantMessage))
    ids = [c.id for c in reply.tool_calls]
    results = {m.tool_call_id: m.content for m in previous if isinstance(m, ToolMessage)}
    carried = sent[2:]
    got = {m["tool_call_id"]: m["content"] for m in carried if m["role"] == "tool"}
    whole = {i: got[i] for i in ids if i in got and not PLACEHOLDER.match(got[i])}
    shortened = sum(text != results.get(i) for i, text in whole.items())
    if not carried:
        return "nothing carried", 0
    if all(m["role"] == "user" for m in carried):
        return "only a harness message carried", 0
    if not any(
        m["role"] == "assistant"
        and [c["id"] for c in m.get("tool_calls") or []] == ids
        and (ids or m["content"] in (reply.content, mask.cut_off_reply(reply).content))
        for m in carried
    ):
        return "reply missing", 0
    if not set(ids) <= got.keys():
        return "result missing", shortened
    return ("kept" if len(whole) == len(ids) else "result only as a placeholder"), shortened


def restarts(run: Run) -> Counter[str]:
    n: Counter[str] = Counter()
    for number in range(2, len(run.sessions) + 1):
        fate, shortened = last_step_fate(run.sessions[number - 2], first_request(run, number))
        n.update({"restarts": 1, "lost": fate != "kept", f"lost: {fate}": fate != "kept"})
        n["carried shortened"] += shortened
    return n


def never_shown(run: Run) -> Counter[str]:
    sent: dict[bool, set[str]] = {True: set(), False: set()}
    for body in run.requests:
        for m in body["messages"]:
            if m["role"] == "tool":
                sent[bool(PLACEHOLDER.match(m["content"]))].add(m["tool_call_id"])
    missing = run.results.keys() - sent[False]
    return Counter({"never shown": len(missing), "as placeholders": len(missing & sent[True])})


def wind_downs(run: Run) -> Counter[str]:
    """Wind-downs, and those followed by every promised reply (not in a session ended by finish)."""
    n: Counter[str] = Counter()
    sessions = run.sessions[:-1] if run.end == "finish" else run.sessions
    for number, messages in enumerate(sessions):
        for index, m in enumerate(messages):
            if getattr(m, "origin", None) == "wind_down":
                replies = sum(r > index for r in run.replies[number])
                n.update({"wind-downs": 1, "complete": replies >= DEFAULTS.session.wind_down_turns})
    return n


def restarts_after_wind_down(run: Run) -> Counter[str]:
    """Restarts whose session ended after a complete wind-down: its message, then every reply
    it asked for."""
    turns, n = DEFAULTS.session.wind_down_turns, Counter[str]()
    for number, messages in enumerate(run.sessions[:-1]):
        notices = [i for i, m in enumerate(messages) if getattr(m, "origin", None) == "wind_down"]
        replies = sum(r > notices[-1] for r in run.replies[number]) if notices else 0
        n["after complete wind-down"] += bool(notices) and replies >= turns
    return n


def ended_without_wind_down(run: Run) -> Counter[str]:
    """Sessions but the last with no wind-down. No step of a trajectory is bigger than
    max_output_tokens plus the tool cap as the harness gets it (a reply is served within
    max_output_tokens, its one call's output is capped), so none is excused."""
    ended = sum(
        not any(getattr(m, "origin", None) == "wind_down" for m in messages)
        for messages in run.sessions[:-1]
    )
    return Counter({"no wind-down": ended})


def price_errors(run: Run) -> list[float] | None:
    """|price - real| / real of shell results of 100+ real tokens, as first sent in the session
    that priced them (one the session ended before sending is left out); None: no prices."""
    priced = [e for e in run.events if e["kind"] == "tool_call" and "result_tokens" in e]
    if not priced:
        return None
    sent: dict[tuple[int, str], dict[str, Any]] = {}
    for body in run.requests:
        session = int(re.findall(r"Session (\d+)", body["messages"][1]["content"])[0])
        for m in body["messages"]:
            if m["role"] == "tool" and not PLACEHOLDER.match(m["content"]):
                sent.setdefault((session, m["tool_call_id"]), m)
    errors = []
    for event in priced:
        result, wire = (
            run.results.get(event["call_id"]),
            sent.get((event["session"], event["call_id"])),
        )
        real = run.trajectory.tokens.message(wire) if wire else 0
        if result and result.name == "shell_exec" and real >= 100:
            errors.append(abs(event["result_tokens"] - real) / real)
    return errors


def said(content: str) -> list[str]:
    """The output's own non-blank lines: not the harness's dead-end note, exit-code line or cut
    marker."""
    lines = content.splitlines()
    lines = lines[1:] if lines and lines[0].startswith(DEAD_END_NOTE) else lines
    lines = lines[1:] if lines and lines[0].startswith("exit code ") else lines
    return [line for line in lines if line.strip() and not line.startswith("[... ")]


def mentions(text: str, wanted: str, chars: int) -> bool:
    """`text` names the first `chars` characters of `wanted` (maybe spaces squeezed, escaped)."""
    heads = {wanted.strip()[:chars], " ".join(wanted.split())[:chars]}
    heads |= {json.dumps(head, ensure_ascii=False)[1:-1] for head in heads}
    return any(head in t for head in heads for t in (text, " ".join(text.split())))


def parts_named(text: str, result: ToolMessage) -> set[str]:
    try:
        arguments = json.loads(result.arguments or "{}")
        subject = str(arguments.get("command") or arguments.get("path") or "")
    except json.JSONDecodeError:  # a call cut at max_output_tokens
        subject = result.arguments
    lines = said(result.content)
    found = {
        "command": mentions(text, subject, 30),
        "exit": result.exit_code is None or f"exit {result.exit_code}" in text,
        "lines": re.search(r"\d[\d,]* lines", text) is not None,
        "bytes": re.search(r"\d[\d,]* bytes", text) is not None,
        "first": not lines or mentions(text, lines[0], 20),
        "last": not lines or mentions(text, lines[-1], 20),
        "where": any(w in text for w in (".outputs/", "file_read", "search_context")),
    }
    return {part for part, ok in found.items() if ok}


def placeholders(run: Run) -> Counter[str]:
    """Distinct placeholders sent, and how many name each part, all of them, or quote `""`."""
    n: Counter[str] = Counter()
    for call_id, text in {
        (m["tool_call_id"], m["content"])
        for body in run.requests
        for m in body["messages"]
        if m["role"] == "tool" and PLACEHOLDER.match(m["content"])
    }:
        result = run.results.get(call_id)
        parts = parts_named(text, result) if result else set()
        empty_line = re.search(r'\s""[,;\]]', text) is not None
        n.update({"placeholders": 1, "all": parts == set(PARTS), '""': empty_line})
        n.update(parts)
    return n


def not_as_recorded(run: Run) -> int:
    """Shell results whose head is not the recorded output's: BASH_ENV did not do its job (the
    note of a repeated dead end, the harness's, left out)."""
    t = run.trajectory
    return sum(
        own_text(result)[:100] != t.steps[t.call_steps[call_id]].output[:100]
        for call_id, result in run.results.items()
        if call_id in t.call_steps and not t.served[t.call_steps[call_id]].call_cut
    )


def measure(run: Run) -> Result:
    t = run.trajectory
    n = Counter(
        steps=len(t.steps),
        sessions=len(run.sessions),
        floor=floor(run),
        promises=equal_promises_floor(run),
        overflows=t.overflows,
        again=sum(k - 1 for k in t.serves.values()),
        shortened=sum(s.completion != s.whole_completion for s in t.served.values()),
        cut=sum(s.call_cut for s in t.served.values()),
        stopped=len(t.stopped),
        **{"calls lost": sum(t.steps[i].action is not None for i in t.stopped)},
        requests=t.requests,
        seconds=round(run.seconds),
        runs=1,
        finished=int(run.end == "finish"),
    )
    n["not as recorded"] = not_as_recorded(run)
    counters = (restarts, never_shown, wind_downs, restarts_after_wind_down, placeholders)
    for counted in (*counters, ended_without_wind_down, prefill_figures):
        n.update(counted(run))
    return Result(run.label, n, price_errors(run), run.window)


def total(results: list[Result]) -> Result:
    errors = [e for r in results for e in r.price_errors or []]
    priced = any(r.price_errors is not None for r in results)
    return Result("total", sum((r.n for r in results), Counter()), errors if priced else None)
