"""Every text the harness itself says to the model."""

from __future__ import annotations

PREAMBLE = """\
You are an autonomous agent running unattended under the ouroboros harness: nobody watches, so \
work on your task one tool call at a time. Paths are relative to your workspace, the folder \
your files are in, and nothing outside it is reachable.

Your context window is small ({limit:,} tokens): old tool results become placeholders (read \
again what you need), and when it is full a new session starts with only your task, your plan \
and your last turns. Write what you find and what is left to do into workspace files as you \
go, so a restart loses nothing.

Your instructions follow.

"""
"""What the tools do, their descriptions say (in every request too): said once. It names no
file and no path: a small model takes "keep notes in NOTES.md" for "read NOTES.md" first, and
given the workspace's absolute path and the instructions file's, the real small model wrote
paths of its own from them (the project's folder without `workspace/`, `../` before a file) or
read and overwrote its instructions first. Where the instructions file is, the wind-down says,
when there is something to save in it (`wind_down`)."""


FILES_PREAMBLE = """\
You change the files in your workspace to do your task. To change a file, reply with its path \
on a line, then its whole new text in a fenced block.

Your instructions follow.

"""
"""The files protocol's (`llm.tool_protocol = "files"`): no tool, no harness, no window named. The
real small model, told of tools, writes calls of its task's words or echoes their descriptions;
told only this, it writes a changed file whole as a coding assistant does, a third of the time
right (docs/benchmarks.md, "Fourth round")."""


def system_prompt(instructions: str, limit: int, files: bool = False) -> str:
    return (FILES_PREAMBLE if files else PREAMBLE.format(limit=limit)) + instructions


def first_message(task: str | None) -> str:
    """Session 1's opening: the task, and nothing else to do first (a small model takes "look
    at your notes" for its first step, and does it for ever). It ends with the task: the real
    small model answered an opening that ended "Start on it now." with those words."""
    if task is None:
        return "Session 1 of a new run. Do what your instructions above say, step by step."
    return f"Session 1 of a new run.{task_part(task)}"


def task_part(task: str | None) -> str:
    """The task, as a session's opening says it (from `# Purpose` of the instructions)."""
    return "" if task is None else f"\n\nYour task:\n\n{task}"


CONTINUE = "Continue with your task. (No one reads replies without a tool call; use the tools.)"
CONTINUE_FILES = "Continue with your task."


NO_CALL = (
    "Your reply called no tool, so nothing was done: {writes}. The tools are: {tools}. A call "
    "is written "
    '{{"name": ..., "arguments": {{...}}}}.',
    "Still no tool call, so still nothing done. Call one of: {tools}.",
)
"""What a reply without a call is told, in turn: the same words again teach a small model
nothing, and an example call is copied as it is, again and again (a small model once called
`list_dir .` from then on), so none is shown here."""


NO_CHANGE = (
    "Nothing was changed: to change a file, write its path on a line, then its whole new text "
    "in a fenced block.",
    "Still nothing changed. Write the file's path alone on a line, and right after it the "
    "file's whole new text in a fenced block.",
)
"""What a reply that changed nothing is told in the files protocol, in turn."""


def no_change(streak: int) -> str:
    return NO_CHANGE[streak % len(NO_CHANGE)]


def fence_for(text: str) -> str:
    """A fence longer than any run of backticks in `text`, so the block holds it whole."""
    ticks = [len(line.strip()) - len(line.strip().lstrip("`")) for line in text.split("\n")]
    return "`" * max(3, max(ticks, default=0) + 1)


OTHERS_NAMED = 20


def files_shown(files: list[tuple[str, str]], others: list[str]) -> str:
    """The workspace's files as a session's opening shows them in the files protocol: each in
    the form the model is to write a change in; `others`, those too big to show."""
    if not files and not others:
        return "\n\nYour workspace has no files yet."
    shown = []
    for path, text in files:
        fence = fence_for(text)
        shown.append(f"{path}\n{fence}\n{text.rstrip()}\n{fence}")
    said = "\n\nYour workspace's files:\n\n" + "\n\n".join(shown) if shown else ""
    if others:
        more = f" and {len(others) - OTHERS_NAMED:,} more" if len(others) > OTHERS_NAMED else ""
        said += f"\n\nFiles too long to show here: {', '.join(others[:OTHERS_NAMED])}{more}."
    return said


def no_call(tools: list[str], streak: int) -> str:
    """A reply without a tool call, the `streak`th in a row before it."""
    writers = [t for t in ("file_write", "shell_exec") if t in tools]
    writes = (
        f"a file changes only through {' or '.join(writers)}"
        if writers
        else "only a tool call acts"
    )
    if "file_write" in tools:  # the reader takes such a block for file_write's call
        writes += ", or by its path on a line, then its whole new text in a fenced block"
    return NO_CALL[streak % len(NO_CALL)].format(writes=writes, tools=", ".join(tools))


def unknown_tool(names: list[str], tools: str, example: str, in_task: list[str]) -> str:
    """`in_task`: the names that are words of the task (what it asks to write, called)."""
    quoted = ", ".join(f"`{n}`" for n in names)
    said = f"There is no tool {quoted}; nothing of that was run."
    if in_task:
        named = ", ".join(f"`{n}`" for n in in_task)
        said += f" {named} is in your task, to work on with the tools, not a tool to call."
    shown = f" For example:\n{example}" if example else ""
    return f"{said} The tools are: {tools}.{shown}"


def cut_off_before_a_call(max_output_tokens: int) -> str:
    return (
        f"Your last reply was cut off at the output limit ({max_output_tokens:,} tokens) before "
        "it called a tool, so nothing was run. Make the tool call first, with little text."
    )


def restart_marker(
    session: int,
    previous_turns: int,
    reason: str,
    carried: int,
    actions: list[str],
    detail: str = "",
    task: str | None = None,
    looped: str | None = None,
) -> str:
    """`looped`: the loop the session was told of (`loop_line`), whatever ended it."""
    why = {
        "context_full": "the context was full",
        "context_overflow": "the prompt no longer fitted the server's window",
        "max_turns": "it reached its turn limit",
        "loop": f"it was going in circles ({looped or detail})",
        "rewound": "the operator rewound the workspace",
    }.get(reason, reason)
    if looped and reason != "loop":
        why += f", after going in circles ({looped})"
    carried_text = (
        f"The last {carried} messages of that session follow."
        if carried
        else "Nothing was carried over."
    )
    summary = "".join(f"\n- {a}" for a in actions)
    if summary:
        summary = f"\nIts last actions:{summary}"
    return (
        f"Session {session}. The previous session ran {previous_turns} turns and ended because "
        f"{why}. Your workspace files hold your progress; your instructions above were re-read "
        f"from disk. {carried_text}{summary}{task_part(task)}"
    )


def rewound(session: int, moved_aside: str, finished: bool = True) -> str:
    """After `python -m ouroboros rewind`: said at the end of the next session's first message."""
    if not finished:
        where = f"files it moved are in {moved_aside}" if moved_aside else "it moved none"
        return (
            f"\n\nThe operator began rewinding the workspace to the start of session {session} "
            "and the rewind did not finish: some files may be as they were then, others as you "
            f"left them; {where} (out of your reach). Look at your files again before you go on."
        )
    moved = (
        f"today's files were moved to {moved_aside} (out of your reach)"
        if moved_aside
        else "none of today's files had to move"
    )
    return (
        f"\n\nThe workspace was rewound to the start of session {session} by the operator; "
        f"{moved}. Look at your files again before you go on: they are as they were then."
    )


def wind_down(room: int, turns_left: int, instructions: str) -> str:
    """`instructions`: the instructions file as the tools reach it (a bare `SYSTEM_PROMPT.md`
    named a file in the workspace, which no session reads)."""
    return (
        f"This session is nearly full: about {room:,} tokens are left before it ends. Save what "
        "matters to your workspace files now: progress, findings, next steps, and in "
        f"{instructions} what every later session should know; and update your plan with the "
        f"plan tool (what is done, what is next). The session restarts after {turns_left} more "
        "replies; the next one begins with your plan, your last reply and its results."
    )


LOOPS = {
    "repeat": "you made the same tool call {n} in a row",
    "cycle": "you went round the same calls {n} over",
    "failing": "the same call failed the same way {n}",
    "no_calls": "you gave {n} without a tool call",
    "overflows": "the server refused {n} as too long",
    "session_repeat": "this session redid the previous session's calls with the same results",
}


def loop_named(kind: str, evidence: list[str]) -> str:
    """What the agent (and the reader) is told of a loop: its kind and what repeated."""
    *what, count = evidence if kind != "session_repeat" else [*evidence, ""]
    repeated = "; ".join(f"`{w}`" for w in what)
    return LOOPS[kind].format(n=count) + (f": {repeated}" if repeated else "")


def loop_line(kind: str, evidence: list[str]) -> str:
    """A loop as the next session's opening names it: the kind, and the tools it went round with
    (no arguments, no words of the reply: a model that copies would go round it again)."""
    *what, count = evidence if kind != "session_repeat" else [*evidence, ""]
    tools = dict.fromkeys(w.split(" ", 1)[0] for w in what) if kind in CALL_LOOPS else {}
    named = ", ".join(f"`{t}`" for t in tools)
    return LOOPS[kind].format(n=count) + (f" ({named})" if named else "")


CALL_LOOPS = ("repeat", "cycle", "failing")
"""The loops whose evidence starts with the calls made: `tool arguments`."""


def loop_nudge(kind: str, evidence: list[str]) -> str:
    return (
        f"You are going in circles: {loop_named(kind, evidence)}. Doing it again will not give "
        "a different result: stop, think about why, and change approach."
    )


def loop_wind_down(kind: str, evidence: list[str], turns_left: int) -> str:
    return (
        f"You are still going in circles after being told: {loop_named(kind, evidence)}. This "
        "session restarts to break the loop. Save what you learnt to your workspace files now, "
        f"and what not to try again; you have {turns_left} more replies."
    )


def cut_off_in_file(max_output_tokens: int) -> str:
    """The files protocol's: a reply cut off at the output limit before its block closed."""
    return (
        f"Your last reply was cut off at the output limit ({max_output_tokens:,} tokens) before "
        "its block ended, so nothing was changed. Write only the file's path and its whole new "
        "text, no other words."
    )


def cut_off(max_output_tokens: int) -> str:
    return (
        f"Your last reply was cut off at the output limit ({max_output_tokens:,} tokens), so its "
        "last tool call may be incomplete. Keep each reply short: write big files in parts."
    )


def cut_in_call(tool: str | None, size: int, max_output_tokens: int) -> str:
    """A reply cut off at the output limit inside a call (`tool`, if it was named) `size` bytes
    into its arguments: what happened, and how to do it in smaller calls."""
    if tool == "file_write":
        smaller = "Write the file in parts: file_write the first, then `cat >> path` the others."
    elif tool == "plan":
        smaller = "Send fewer, shorter plan items."
    else:
        smaller = "Do it in smaller calls: write a long file or script in parts (`cat >> path`)."
    return (
        f"Your last reply was cut off at the output limit ({max_output_tokens:,} tokens) "
        f"{size:,} bytes into {f'a {tool} call' if tool else 'an action'}, which was not run. "
        f"{smaller}"
    )


CRASH_INTERRUPTED = (
    "error: this call was interrupted when the harness process died; whether it took effect is "
    "unknown. Check before repeating it."
)


def operator_cut(size: int, shown: int) -> str:
    return (
        f"\n[... the message is {size:,} bytes; only its first {shown:,} fit your context "
        "window: ask for the rest in a shorter form if you need it]"
    )


def from_operator(text: str, sent_at: str) -> str:
    """A message `python -m ouroboros tell` left for the agent."""
    return (
        f"A message from the person who runs you (sent {sent_at}); take it into account, "
        f"then go on with your work:\n\n{text}"
    )


DEAD_END_NOTE = "[dead end: "
"""How the note a repeated failure's result starts with begins: the loops compare results
without it (`state/loop_tally.own_text`), placeholders quote the output's lines, not it."""


def times(n: int) -> str:
    """How often, in words."""
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def dead_end_note(count: int, session: int, current: int) -> str:
    """Before the result of a call that failed the same way before (`deadends/`)."""
    when = "in this session" if session == current else f"last in session {session}"
    return (
        f"{DEAD_END_NOTE}this exact call failed this way {times(count)} before, {when}; "
        "change something first]\n"
    )


def dead_end(call: str, failure: str, session: int, count: int) -> str:
    """One remembered failed call, as a new session's opening lists it."""
    return f"\n- {call}: {failure} (session {session}{', ' + times(count) if count > 1 else ''})"


DEAD_ENDS = "\n\nCalls that failed before, newest first (unchanged, they fail again):"
