"""The calls that failed, remembered across restarts (`DeadEnds`, the feature's part of the
run's state), folded from the tool results the run journals anyway; and the record of one met
again (`DeadEndMet`), which its note in the result and its event in `tail` come with.

A dead end is a call (its tool and its arguments, as canonical JSON) whose newest result
failed: an error, or an exit status other than 0. Its failure's signature is that status and
the output's last non-empty line (decimals, such as a test run's timing, made `#`): the same
call failing with the same signature failed "the same way". A result that does not fail clears
the call's dead end; one that fails another way starts it again. A call the harness died in
(an interrupted result, no `ToolRun`) is not the call's failure and is not folded. Pure."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ouroboros.ground import prompts
from ouroboros.ground.messages import ToolMessage
from ouroboros.policy.loops import failed
from ouroboros.state.fold import Part, RunState
from ouroboros.state.loop_tally import own_text
from ouroboros.state.records import MessageRecord, Record

MAX_KEPT = 100
"""Dead ends the run remembers: past it, the one failed longest ago is forgotten."""
LISTED = 10
"""In an opening at most, the newest (its share of the prompt budget may hold fewer)."""
STATUS_LISTED = 3
"""Of the newest, in `status.json` (and `status`'s row)."""
SIGNATURE_CHARS = 200
"""Of the last line, compared."""
CALL_CHARS, LINE_CHARS = 80, 80
"""Of the call and of its last line, as an opening lists them: enough to recognise them."""
DECIMAL = re.compile(r"\d+\.\d+")


class DeadEndMet(Record):
    """A call failed the same way a remembered dead end did: its result was noted so."""

    kind: Literal["dead_end"] = "dead_end"
    session: int
    call_id: str
    call: str
    """The call, short (`DeadEnd.call`)."""
    failure: str
    times: int
    """It had failed so before..."""
    last_session: int
    """...the newest time in this session."""

    def events(self) -> list[tuple[str, dict[str, Any]]]:
        return [("dead_end", self.model_dump(exclude={"v", "ts", "kind"}))]


class DeadEnd(BaseModel):
    model_config = ConfigDict(frozen=True)
    call: str
    """The call as the agent is shown it: the command of a `shell_exec`, else the tool and its
    arguments, cut to `CALL_CHARS`."""
    failure: str
    """How it failed, short: `exit 2, "the last line"`, or `error, "..."`."""
    signature: str
    times: int
    """Failed so, in a row of its results that all failed so."""
    session: int
    """The newest time."""
    ts: str


def canonical(arguments: str) -> str:
    """The arguments as canonical JSON (keys sorted, no blanks), or as sent where they are not
    JSON: `{"b":1, "a":2}` and `{"a": 2, "b": 1}` are the same call."""
    try:
        parsed = json.loads(arguments or "{}")
    except (ValueError, RecursionError):
        return arguments
    return json.dumps(parsed, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def key_of(result: ToolMessage) -> str:
    """The call's identity: a digest, so that the fold keeps a file's content no more than once
    (in its result's record)."""
    text = f"{result.name}\n{canonical(result.arguments)}"
    return hashlib.sha256(text.encode(errors="surrogatepass")).hexdigest()[:24]


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _last_line(result: ToolMessage) -> str:
    lines = [line for line in own_text(result).splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _status(result: ToolMessage) -> str:
    return "error" if result.error or result.exit_code is None else f"exit {result.exit_code}"


def signature(result: ToolMessage) -> str:
    """How a failed result failed: its status and its last line, timings aside."""
    said = DECIMAL.sub("#", _last_line(result))[:SIGNATURE_CHARS]
    return f"{_status(result)}\n{said}"


def call_of(result: ToolMessage) -> str:
    command = None
    if result.name == "shell_exec":
        try:
            command = json.loads(result.arguments).get("command")
        except (ValueError, RecursionError, AttributeError):
            command = None
    if isinstance(command, str):
        return f"shell_exec `{_short(command, CALL_CHARS)}`"
    return _short(f"{result.name} {canonical(result.arguments)}", CALL_CHARS)


def failure_of(result: ToolMessage) -> str:
    return f"{_status(result)}, {json.dumps(_short(_last_line(result), LINE_CHARS))}"


@dataclass
class DeadEnds(Part):
    """The run's dead ends by call, the newest last; and how often one was met again."""

    folds = (DeadEndMet,)
    folds_results = True

    ends: dict[str, DeadEnd] = field(default_factory=dict)
    met: int = 0

    def apply(self, record: Record, state: RunState) -> None:
        if isinstance(record, DeadEndMet):
            self.met += 1
            return
        assert isinstance(record, MessageRecord)
        result = record.message
        if not isinstance(result, ToolMessage):
            return
        key = key_of(result)
        before = self.ends.pop(key, None)  # the newest goes last
        if not failed(result):
            return
        said = signature(result)
        again = before is not None and before.signature == said
        self.ends[key] = DeadEnd(
            call=call_of(result),
            failure=failure_of(result),
            signature=said,
            times=before.times + 1 if before is not None and again else 1,
            session=record.session,
            ts=record.ts,
        )
        if len(self.ends) > MAX_KEPT:
            del self.ends[next(iter(self.ends))]

    def same(self, result: ToolMessage) -> DeadEnd | None:
        """The dead end this failed result repeats: the same call, failed the same way."""
        if not failed(result):
            return None
        known = self.ends.get(key_of(result))
        return known if known is not None and known.signature == signature(result) else None

    def listing(self, tokens: Callable[[str], int], budget: int) -> str:
        """What an opening says of them: the newest first, as many as `budget` tokens hold
        (at most `LISTED`); "" for none."""
        text, lines = "", 0
        for end in reversed(self.ends.values()):
            longer = (text or prompts.DEAD_ENDS) + prompts.dead_end(
                end.call, end.failure, end.session, end.times
            )
            if lines == LISTED or tokens(longer) > budget:
                break
            text, lines = longer, lines + 1
        return text

    def status(self) -> dict[str, Any]:
        newest = list(self.ends.values())[-STATUS_LISTED:]
        return {
            "dead_ends": {
                "count": len(self.ends),
                "met": self.met,
                "newest": [
                    end.model_dump(include={"call", "failure", "times", "session", "ts"})
                    for end in reversed(newest)
                ],
            }
        }
