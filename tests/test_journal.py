"""The journal: what a resume folds back is what the run had, from a snapshot or without one."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, get_args

import pytest

from ouroboros.context.tokens import CallFigures
from ouroboros.ground.errors import RunError
from ouroboros.ground.figures import RunLimits, WindowFigures
from ouroboros.ground.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from ouroboros.ground.state_folder import JOURNAL
from ouroboros.model.retry import Retry, journalled
from ouroboros.run.lock import refuse_lost_journal
from ouroboros.server.records import ServerExited, ServerPart, ServerStarted
from ouroboros.state.fold import RunState
from ouroboros.state.journal import Journal, fold
from ouroboros.state.records import (
    JOURNAL_RECORD,
    KINDS,
    Compaction,
    Cut,
    EndReason,
    Mask,
    MessageRecord,
    Refused,
    RunEnd,
    RunStart,
    SessionEnd,
    SessionStart,
    SideCall,
    Starting,
    ToolStarted,
    WindDown,
)
from ouroboros.state.snapshot import load, snapshot_path

WINDOW = WindowFigures(
    server="llama-server",
    detail="test",
    context_limit=8192,
    prompt_budget=7000,
    soft_line=4900,
    hard_line=6300,
    frame_tokens=7,
)


def usage(turn: int, prompt: int) -> CallFigures:
    return CallFigures(
        prompt_tokens=prompt,
        completion_tokens=40 + turn,
        source="server",
        raw_prompt=prompt - 100,
        raw_reply=35,
        silent_truncation=False,
        raw_kinds={"system": 400, "assistant": 30 * turn, "output:text": prompt - 500 - 30 * turn},
        turn=turn,
    )


def step(journal: Journal, session: int, turn: int) -> str:
    call = ToolCall(id=f"s{session}c{turn}", name="shell_exec", arguments='{"command": "ls"}')
    reply = AssistantMessage(content=f"step {turn}", tool_calls=(call,))
    journal.append(MessageRecord(session=session, message=reply, usage=usage(turn, 900 * turn)))
    journal.append(ToolStarted(session=session, call_id=call.id, name=call.name))
    result = ToolMessage(
        tool_call_id=call.id, name=call.name, content=f"line {turn}\n" * 60, exit_code=0
    )
    journal.append(MessageRecord(session=session, message=result))
    return call.id


def session(journal: Journal, number: int, turns: int) -> list[str]:
    opening = [SystemMessage(content="be useful"), UserMessage(content=f"Session {number}.")]
    journal.append(SessionStart(session=number, reason="context_full", messages=opening))
    return [step(journal, number, turn) for turn in range(1, turns + 1)]


def a_run(path: Path) -> RunState:
    """Every kind of record, two sessions, the second under way; the live state at the end."""
    journal = Journal(path)
    journal.append(RunStart(model="m", base_url="http://x/v1", window=WINDOW))
    session(journal, 1, 4)
    journal.append(SessionEnd(session=1, reason=EndReason.CONTEXT_FULL, turns=4))
    journal.append(RunEnd(reason=EndReason.STOPPED, detail="stop requested (SIGTERM)"))
    journal.append(RunStart(model="m", base_url="http://x/v1", resumed=True, window=WINDOW))
    ids = session(journal, 2, 5)
    journal.append(Mask(session=2, call_ids=ids[:2]))
    journal.append(Cut(session=2, cuts={ids[4]: 300}))
    recap = AssistantMessage(content="what I did so far")
    journal.append(Compaction(session=2, start=4, recap=recap))
    raw = {"system": 400, "output:text": 5000}
    refused = Refused(
        session=2,
        prompt_tokens=9000,
        completion_tokens=0,
        source="refused",
        raw_prompt=5400,
        raw_reply=0,
        silent_truncation=False,
        raw_kinds=raw,
    )
    journal.append(refused)
    journal.append(SideCall(session=2, usage=usage(5, 3000).model_copy(update={"purpose": "c"})))
    notice = UserMessage(content="Save your state.", origin="wind_down")
    journal.append(
        WindDown(
            session=2,
            projected=6400,
            hard_line=6300,
            room=600,
            reply_allowance=200,
            turns_left=2,
            message=notice,
        )
    )
    step(journal, 2, 6)
    journal.close()
    return journal.state


def figures(state: RunState) -> dict[str, Any]:
    """Everything a resumed run decides from."""
    view = state.view
    return {
        **{
            f.name: getattr(state, f.name)
            for f in dataclasses.fields(state)
            if f.name not in ("view", "ledger")
        },
        "recent_replies": list(state.recent_replies),
        "ledger": dataclasses.asdict(state.ledger),
        "history": view.history,
        "sent": view.messages(),
        "raw_kinds": view.raw_kinds,
        "masked": view.masked_ids,
        "cuts": view.cuts,
    }


def test_a_resume_folds_back_what_the_run_had_with_and_without_its_snapshot(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.jsonl"
    live = figures(a_run(path))
    assert snapshot_path(path).exists()
    start = load(path)
    assert start is not None
    assert start[1] > 0  # the fold starts where the snapshot stands
    from_snapshot, _ = fold(path)
    assert figures(from_snapshot) == live
    snapshot_path(path).unlink()
    whole, _ = fold(path)
    assert figures(whole) == live
    assert live["session"] == 2
    assert live["wind_down_replies"] == 1
    assert live["cuts"]
    assert live["masked"]


def test_a_snapshot_of_another_journal_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    a_run(path)
    kept = snapshot_path(path).read_bytes()
    path.unlink()
    journal = Journal(path)
    journal.append(RunStart(model="m", base_url="http://x/v1"))
    session(journal, 1, 2)
    journal.close()
    snapshot_path(path).write_bytes(kept)  # the older run's snapshot, next to a new journal
    state, _ = fold(path)
    assert (state.session, state.total_turns) == (1, 2)


def test_a_bad_line_is_skipped_and_named_and_a_snapshot_spares_the_lines_before_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.jsonl"
    live = figures(a_run(path))
    data = path.read_bytes()
    at = data.index(b'"tool_started"')  # in session 1, before the snapshot
    path.write_bytes(data[:at] + b'"tool_startex"' + data[at + 14 :])
    state, reader = fold(path)
    assert reader.problems == []  # not read again
    assert figures(state) == live
    snapshot_path(path).unlink()
    state, reader = fold(path)
    assert [str(p)[:43] for p in reader.problems] == ["journal.jsonl, line 4: not a valid record ("]
    assert str(reader.problems[0]).endswith("; skipped (the file keeps it)")
    assert state.total_turns == 10


def test_a_recap_is_written_and_read_under_its_old_name_snapshot(tmp_path: Path) -> None:
    """The `Compaction` record's recap is `snapshot` on disk: journals already written fold the
    same, and new ones are written as they were."""
    path = tmp_path / "journal.jsonl"
    a_run(path)
    lines = path.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if '"kind":"compaction"' in line)
    written = json.loads(lines[at])
    assert "recap" not in written
    assert written["snapshot"]["content"] == "what I did so far"
    # The line as a version before the rename wrote it, word for word.
    lines[at] = (
        '{"v":2,"ts":"2026-11-20T10:00:00.000+00:00","kind":"compaction","session":2,"start":4,'
        '"snapshot":{"kind":"user","content":"an older recap","origin":"compaction"}}'
    )
    path.write_text("\n".join(lines) + "\n")
    snapshot_path(path).unlink()
    state, reader = fold(path)
    assert reader.problems == []
    older = UserMessage(content="an older recap", origin="compaction")
    assert state.view.recap == older
    assert state.view.messages()[1] == older


def test_a_notice_named_once_is_journalled_once_a_run_even_across_a_resume(
    tmp_path: Path,
) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path)
    journal.notify("warning", "tools run unconfined", once="unconfined")
    journal.notify("warning", "tools run unconfined", once="unconfined")
    journalled(journal)(Retry(2, 1.234, 3.0, RuntimeError("HTTP 503"), "http://x/v1", 0))
    journal.close()
    resumed = Journal(path)
    resumed.notify("warning", "tools run unconfined", once="unconfined")
    resumed.close()
    kinds = [line.split('"event":"')[1].split('"')[0] for line in path.read_text().splitlines()]
    assert kinds == ["warning", "retry"]
    assert '"wait_s":1.23' in path.read_text().splitlines()[1]


def test_notices_before_the_run_start_do_not_make_a_journal_lost(tmp_path: Path) -> None:
    """A first start whose server never came up journals only its limits and notices (its
    retries): the next start goes on; those followed by anything but a run start are a replaced
    journal."""
    journal = Journal(tmp_path / JOURNAL)
    journal.append(Starting(limits=RunLimits(max_total_turns=3, wind_down_turns=2)))
    assert journal.state.limits is not None
    assert journal.state.limits.max_total_turns == 3
    journalled(journal)(Retry(1, 0.5, 0.0, RuntimeError("connection refused"), "http://x/v1", 0))
    journal.notify("warning", "shell commands run unconfined: no Landlock")
    journal.close()
    refuse_lost_journal(tmp_path)
    journal = Journal(tmp_path / JOURNAL)
    journal.append(SessionStart(session=1, reason="fresh", messages=[]))
    journal.close()
    with pytest.raises(RunError, match="does not begin with a run start"):
        refuse_lost_journal(tmp_path)


def test_a_journal_of_a_start_whose_server_kept_dying_goes_on(tmp_path: Path) -> None:
    """A typo in the server's command: the run stopped before its run start, its journal
    holding only the harness's own records (the server's starts and exits, a warning, the error
    it stopped at), each written with what is None left out. The next start, the typo fixed,
    goes on: no `--fresh`."""
    journal = Journal(tmp_path / JOURNAL)
    journal.append(Starting(limits=RunLimits(max_total_turns=3, wind_down_turns=2)))
    journal.append(ServerStarted(pid=12, log="server.log"))
    journal.append(ServerExited(pid=12, code=3, signal=None, up_s=0.1, tail="no such file"))
    journal.append(ServerStarted(pid=13, log="server.log", restart=True))
    journal.append(ServerExited(pid=13, code=None, signal="SIGKILL", up_s=0.2, tail=""))
    journal.notify("warning", "server.pid held '0 1', which names no server")
    journal.append(RunEnd(reason=EndReason.ERROR, detail="the model server stopped twice"))
    journal.close()
    refuse_lost_journal(tmp_path)
    again = Journal(tmp_path / JOURNAL)
    again.close()
    assert again.problems == []
    assert again.state.part(ServerPart).last_exit == "killed by SIGKILL after 0.2 s"


def test_every_field_that_may_be_none_is_read_back_where_the_journal_left_it_out() -> None:
    """The journal leaves out what is None: a record kind whose field may be None but has no
    default would make every such line unreadable (a journal no resume could read)."""
    # Reading a line knows every kind (the features' are imported to read one, if need be).
    JOURNAL_RECORD.validate_json(RunEnd(reason=EndReason.ERROR).model_dump_json())
    for kind, record in KINDS.items():
        for name, field in record.model_fields.items():
            if type(None) in get_args(field.annotation):
                assert not field.is_required(), f"{kind}.{name}: absent, it cannot be read"
