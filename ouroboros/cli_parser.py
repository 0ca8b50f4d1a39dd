"""python -m ouroboros: run an LLM agent unattended for days against a local model server
(Ollama, llama-server, vLLM, LM Studio), and watch it.

examples:
  python -m ouroboros run                 start, or resume the run in .ouroboros/
  python -m ouroboros run --max-turns 50  stop after 50 model calls in all
  python -m ouroboros tail -f             watch it: a line per model call and event
  python -m ouroboros status              is it alive, where is it, what is left
  python -m ouroboros tell "use pytest"    a message for the agent, at its next step
  python -m ouroboros task add "x" --check "pytest -q"   an item only its check passes
  python -m ouroboros pause / unpause     hold the run (no model call) / let it go on
  python -m ouroboros report              an HTML page of the whole run
  python -m ouroboros rewind --session 3  the workspace as it was when session 3 started
  python -m ouroboros demo                a whole run in seconds with a scripted model

Settings: config.toml next to where you run it (or --config), and OUROBOROS_<SECTION>__<KEY>.
"""

from __future__ import annotations

import argparse
import re
import textwrap
from pathlib import Path
from typing import Any, NoReturn

from ouroboros.ground.printable import printable


class _Parser(argparse.ArgumentParser):
    """argparse, its errors said in one line (not after the usage), a mistyped command with the
    one meant."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (`{self.prog} --help` says more)\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.dest == "command" and action.choices is not None and value not in action.choices:
            # Only for a mistyped command: the settings' names load pydantic, which `status`
            # and `tail` never need.
            from ouroboros.ground.config_names import closest

            meant = closest(value, action.choices)
            hint = f"did you mean {meant}?" if meant else f"one of {', '.join(action.choices)}"
            raise argparse.ArgumentError(None, f"{printable(value)}: unknown command; {hint}")
        super()._check_value(action, value)


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Help that fits the terminal (argparse takes its width from COLUMNS): each paragraph of
    prose filled to it; indented lines (examples) kept as written where they fit, else each
    explanation put under its command, and a command too long broken as a shell line goes on."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        paragraphs = re.split(r"\n[ \t]*\n", text.strip("\n"))
        return "\n\n".join(
            "\n".join(indent + line for line in _paragraph(p, max(width, 40))) for p in paragraphs
        )


def _paragraph(text: str, width: int) -> list[str]:
    lines = text.splitlines()
    if not any(line.startswith(" ") for line in lines):  # prose
        return textwrap.wrap(" ".join(lines), width)
    if all(len(line) <= width for line in lines):
        return lines
    # Examples, one too wide: every one with its explanation under it, alike.
    return [part for line in lines for part in _example(line, width)]


def _example(line: str, width: int) -> list[str]:
    """An example's line, a command then (after two spaces or more) what it does, as lines of
    `width` at most: the explanation under the command."""
    if not line.startswith(" "):
        return textwrap.wrap(line, width)
    lead = line[: len(line) - len(line.lstrip())]
    command, _, explanation = [*re.split(r"(\s{2,})", line.strip(), maxsplit=1), "", ""][:3]
    margin = lead + "    "
    said = textwrap.wrap(explanation, width, initial_indent=margin, subsequent_indent=margin)
    if len(lead + command) <= width:
        return [lead + command, *said]
    # A shell command: broken between its words (a quoted one is one word) where a shell line
    # may go on, so that it is still copied whole.
    parts = [lead]
    for word in re.findall(r"(?:\"[^\"]*\"|'[^']*'|\S)+", command):
        if parts[-1].strip() and len(f"{parts[-1]} {word} \\") > width:
            parts.append(margin)
        parts[-1] += word if not parts[-1].strip() else f" {word}"
    return [*(part + " \\" for part in parts[:-1]), parts[-1], *said]


CONFIG_HELP = "config file (default: ./config.toml)"


def _calls(text: str) -> int:
    """`--max-turns`: a count of model calls, said wrong in one line naming the flag (as a
    setting, it would be blamed on the config file)."""
    if not text.isdecimal():
        raise argparse.ArgumentTypeError(
            f"{printable(text)!r} is not a number of calls (0 or more)"
        )
    return int(text)


def _command(
    commands: Any, name: str, summary: str, example: str, details: str = ""
) -> argparse.ArgumentParser:
    """A command whose --help says what it does and shows it used."""
    parser = commands.add_parser(
        name,
        help=summary,
        description=f"{summary}.{' ' + details if details else ''}",
        epilog=f"example:\n  {example}",
        formatter_class=_Formatter,
    )
    if name != "demo":  # it writes its own
        _config_flag(parser)
    return parser  # type: ignore[no-any-return]


def _config_flag(parser: argparse.ArgumentParser) -> None:
    """`--config` after the command as well as before it (where it was given first, it is
    kept unless given again here)."""
    parser.add_argument("--config", type=Path, default=argparse.SUPPRESS, help=CONFIG_HELP)


def argument_parser() -> argparse.ArgumentParser:
    """Every command, its flags and its help."""
    parser = _Parser(
        prog="python -m ouroboros",
        description=__doc__,  # this module's docstring is what `--help` says first
        formatter_class=_Formatter,
    )
    parser.add_argument("--config", type=Path, help=CONFIG_HELP)
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")
    run_cmd = _command(
        commands,
        "run",
        "start the agent, or resume the run in the state folder",
        "python -m ouroboros run --max-turns 200",
        "It runs until a limit, the agent's finish, or Ctrl-C; running it again resumes "
        "without losing a completed turn.",
    )
    run_cmd.add_argument(
        "--max-turns", type=_calls, metavar="N", help="stop the run after N model calls in all"
    )
    run_cmd.add_argument(
        "--fresh", action="store_true", help="move the old state aside and start anew"
    )
    run_cmd.add_argument(
        "-q", "--quiet", action="store_true", help="only errors, warnings and the end (unattended)"
    )
    tell_cmd = _command(
        commands,
        "tell",
        "leave a message for the agent, delivered at its next step",
        'python -m ouroboros tell "the tests live in tests/, run them with pytest"',
        "It is kept in the state folder the moment this returns, and shown to the agent as a "
        "message from you once, after its current step's results (or when the run starts, if "
        "it is not running). `status` lists what is pending and when it was delivered.",
    )
    tell_cmd.add_argument("text", nargs="?", help="the message")
    tell_cmd.add_argument("--file", type=Path, help="read the message from a file")
    task_cmd = _command(
        commands,
        "task",
        "give the agent work items it passes only by their checks",
        'python -m ouroboros task add "parse ISO dates" --check "pytest -q tests/test_dates.py"',
        "Kept in the state folder the moment this returns, taken at the run's next step (or "
        "when it starts). The agent cannot edit or delete them; `finish` is refused while one "
        "fails (progress.finish_needs_checks).",
    )
    tasks = task_cmd.add_subparsers(dest="task_command", required=True, metavar="subcommand")
    add_cmd = tasks.add_parser("add", help="add one task")
    add_cmd.add_argument("text", help="what is to be done, one line")
    add_cmd.add_argument(
        "--check", required=True, help="a shell command that exits 0 once it is done"
    )
    list_cmd = tasks.add_parser("list", help="the tasks, passing or not")
    import_cmd = tasks.add_parser(
        "import", help="add many: a TOML file of [[task]] tables or JSONL, each text and check"
    )
    import_cmd.add_argument("file", type=Path)
    for each in (add_cmd, list_cmd, import_cmd):
        _config_flag(each)
    _command(
        commands,
        "pause",
        "pause the run at its next step: no model call and no tool until `unpause`",
        "python -m ouroboros pause",
        "The current model call and its tools finish; nothing new starts. The pause is in the "
        "journal: a run restarted while paused stays paused.",
    )
    _command(
        commands,
        "unpause",
        "let a paused run go on",
        "python -m ouroboros unpause",
        "A run pauses when `pause` is given, and before each new session with "
        "supervisor.auto_restart = false (there Enter in its terminal also goes on). Given to "
        "a run that is not running, it is taken when the run starts.",
    )
    # Its name before issue 30, out of the list: `resume` is starting a stopped run again.
    resume_cmd = commands.add_parser(
        "resume", description="former name of `unpause`: let a paused run go on."
    )
    _config_flag(resume_cmd)
    _command(
        commands,
        "compact",
        "ask the running supervisor to compact the context at its next turn",
        "python -m ouroboros compact",
        "The model writes a recap of the older part of its session, which replaces it.",
    )
    rewind_cmd = _command(
        commands,
        "rewind",
        "put the workspace back as it was when a session started (the run must not be running)",
        "python -m ouroboros rewind --session 3",
        "Today's files it replaces or removes are moved to a folder of the state folder, never "
        "deleted; the next session is told. `status` lists the sessions with a checkpoint.",
    )
    rewind_cmd.add_argument("--session", type=int, metavar="N", required=True, help="session N")
    state_help = (
        "state folder (default: paths.state_dir; without --config, a config.toml next to "
        "this folder is used for the budgets and lines)"
    )
    tail_cmd = _command(
        commands,
        "tail",
        "both logs merged, one readable line per model call and event",
        "python -m ouroboros tail -n 50 --session 3",
    )
    tail_cmd.add_argument(
        "-f", "--follow", action="store_true", help="start near the end, keep printing new lines"
    )
    tail_cmd.add_argument("-n", "--lines", type=int, metavar="N", help="only the last N lines")
    tail_cmd.add_argument(
        "--since", metavar="TIME", help="from a time (2026-11-23T14:00) or an age (10m, 2h, 1d)"
    )
    tail_cmd.add_argument("--session", type=int, metavar="N", help="only session N")
    tail_cmd.add_argument("--state", type=Path, help=state_help)
    tail_cmd.add_argument("--json", action="store_true", help="the records unchanged, merged")
    tail_cmd.add_argument("--tools", action="store_true", help="a line per tool call too")
    status_cmd = _command(
        commands,
        "status",
        "is the run alive, where it is, what is left",
        "python -m ouroboros status --state runs/a/.ouroboros",
    )
    status_cmd.add_argument("--state", type=Path, help=state_help)
    report_cmd = _command(
        commands,
        "report",
        "an HTML page with a chart of the run",
        "python -m ouroboros report --out run.html",
    )
    report_cmd.add_argument("--state", type=Path, help=state_help)
    report_cmd.add_argument("--session", type=int, metavar="N", help="a page on session N alone")
    report_cmd.add_argument(
        "--out", type=Path, help="where to write (default: <state>/report.html)"
    )
    demo_cmd = _command(
        commands,
        "demo",
        "a whole run in seconds with a scripted model",
        "python -m ouroboros demo --dir /tmp/demo",
    )
    demo_cmd.add_argument("--dir", type=Path, help="project folder (default: a new temp folder)")
    return parser
