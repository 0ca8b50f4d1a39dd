"""The commands: what each one does, and every error a person sees said in one line."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape

from ouroboros.cli_parser import argument_parser
from ouroboros.ground.errors import ConfigError, RunError, SetupError, StateUnwritable
from ouroboros.ground.jsonl import storage
from ouroboros.ground.printable import printable
from ouroboros.ground.state_folder import EVENTS, JOURNAL, USAGE
from ouroboros.observe import status
from ouroboros.observe.describe import line_width, stderr_console, stdout_console
from ouroboros.observe.liveness import liveness

if TYPE_CHECKING:
    from ouroboros.ground.config import Settings

# Each command imports what it uses: `status` must answer in a fraction of a second, so it does
# not load the settings' models or the model client unless it has to.
Loader = Callable[[], "Settings"]

UNWRITABLE = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR}
"""Why a state or workspace folder cannot be written: said in one line, not a traceback."""
RUN_FILES = (JOURNAL, EVENTS, USAGE)
EXIT_FATAL = 1
EXIT_CONFIG = 2


def _settings(args: argparse.Namespace) -> Settings:
    from ouroboros.ground.config_file import load_settings

    path: Path = args.config or Path("config.toml")
    state: Path | None = getattr(args, "state", None)
    if args.config is None and state is not None and (state.parent / "config.toml").exists():
        path = state.parent / "config.toml"
    if args.config is not None and not path.exists():
        raise ConfigError(f"{path}: config file not found")
    overrides: dict[str, dict[str, Any]] = {}
    if getattr(args, "max_turns", None) is not None:
        overrides["supervisor"] = {"max_total_turns": args.max_turns}
    return load_settings(path, overrides)


def _run(load: Loader, args: argparse.Namespace, console: Console) -> int:
    from ouroboros.ground.config_file import check_readable
    from ouroboros.run.instructions import (
        PLACEHOLDER_WARNING,
        placeholder_purpose,
        read_instructions,
    )
    from ouroboros.run.lock import fresh_state
    from ouroboros.sinks.events import Terminal
    from ouroboros.start import run_to_end

    settings = load()
    check_readable(settings)
    # Said now, not once the server answers: a run with no server yet waits before its session.
    instructions, _ = read_instructions(settings.paths.system_prompt, 0)
    if placeholder_purpose(instructions):
        err = stderr_console()
        # Wrapped at a terminal's width (a path makes it long); whole in a pipe, as every line.
        err.print(
            f"warning: {escape(PLACEHOLDER_WARNING.format(path=settings.paths.system_prompt))}",
            soft_wrap=line_width(err) is None,
        )
    out = stdout_console()
    if args.fresh:
        aside = fresh_state(settings.paths.state_dir)
        if aside:
            out.print(f"previous run moved to {escape(str(aside))}")
    terminal = Terminal(out, quiet=args.quiet, fatal_said_elsewhere=True)
    outcome = run_to_end(settings, terminal)
    if not terminal.ended:  # no run's end was logged (it had finished before): say why
        out.print(f"run stopped: {outcome.reason}")
    return outcome.exit_code


def _state_dir(load: Loader, args: argparse.Namespace) -> Path:
    state: Path | None = args.state
    return state.resolve() if state is not None else load().paths.state_dir


def _tail(load: Loader, args: argparse.Namespace, console: Console) -> int:
    from ouroboros.observe import tail

    try:
        since = tail.parse_since(args.since) if args.since else None
    except ValueError as e:
        raise RunError(str(e)) from None
    options = tail.TailOptions(
        follow=args.follow,
        as_json=args.json,
        tools=args.tools,
        lines=args.lines,
        since=since,
        session=args.session,
    )
    try:
        return tail.tail(_state_dir(load, args), options, stdout_console(), console)
    except BrokenPipeError:  # `tail --json | head`: the reader left, which is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _status(load: Loader, args: argparse.Namespace, console: Console) -> int:
    state = args.state.resolve() if args.state is not None else status.state_dir_of(args.config)
    return status.status(state, load, stdout_console())


def _report(load: Loader, args: argparse.Namespace, console: Console) -> int:
    from ouroboros.observe.report import write_report

    state = _state_dir(load, args)
    if not any((state / name).exists() for name in RUN_FILES):
        raise RunError(f"no run in {state}: give the state folder of one with --state")
    path = write_report(state, load(), args.out, args.session)
    console.print(f"report written to {escape(str(path))}")
    return 0


def _ask(settings: Settings, request: str, what: str, console: Console) -> int:
    """Leave a request file the running supervisor looks for; only for one that runs, so no
    request is left behind to fire at the start of a later run."""
    state = settings.paths.state_dir
    if not liveness(state).alive:
        raise RunError(
            f"no run is running on {state}: start one with `python -m ouroboros run` "
            "(or give its config with --config)"
        )
    flag = state / request
    flag.touch()
    console.print(f"asked the supervisor on {escape(str(state))} to {what}")
    return 0


def _when(state: Path) -> str:
    return "at its next step" if liveness(state).alive else "when it starts (it is not running)"


def _tell(load: Loader, args: argparse.Namespace, console: Console) -> int:
    from ouroboros.operator import inbox

    if (args.text is None) == (args.file is None):
        raise RunError('say the message, or give --file: tell "text" or tell --file notes.txt')
    text = args.text
    try:
        (text or "").encode()
    except UnicodeEncodeError:  # bytes the locale could not decode, kept as surrogates
        console.print("[red]error:[/] the message is not UTF-8 text: write it in UTF-8")
        return EXIT_CONFIG
    if args.file is not None:
        # Read as a file of the agent's is: a FIFO or a device neither blocks nor fills memory.
        try:
            text = inbox.read_regular(args.file, inbox.MAX_MESSAGE_BYTES, follow=True).decode()
        except (OSError, UnicodeDecodeError) as e:
            why = getattr(e, "strerror", None) or "not UTF-8 text"
            raise RunError(f"cannot read {args.file}: {why}") from None
        except inbox.NotAMessage as e:
            raise RunError(
                f"cannot read {args.file}: it is {e}; give a regular file of at most "
                f"{inbox.MAX_MESSAGE_BYTES:,} bytes"
            ) from None
    state = load().paths.state_dir
    letter = inbox.post(state, text)
    console.print(f"message {letter.message_id} kept: the run reads it {_when(state)}")
    return 0


def _task(load: Loader, args: argparse.Namespace, console: Console) -> int:
    from ouroboros.progress.cli import task_command

    return task_command(load().paths.state_dir, args, console, _when)


def _request(load: Loader, request: str, what: str, console: Console) -> int:
    """Leave a request the run takes at its next safe point, or when it starts
    (`operator/safe_point.py`); the newer of `pause` and `unpause` decides."""
    state = load().paths.state_dir
    with storage(state / request):
        state.mkdir(parents=True, exist_ok=True)
        # Never through a link planted there, never blocked by a FIFO: the run sets either aside.
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        os.close(os.open(state / request, flags, 0o600))
    console.print(f"asked the run on {escape(str(state))} to {what} {_when(state)}")
    return 0


def _pause(load: Loader, args: argparse.Namespace, console: Console) -> int:
    from ouroboros.ground.state_folder import PAUSE_REQUEST

    return _request(load, PAUSE_REQUEST, "pause", console)


def _unpause(load: Loader, args: argparse.Namespace, console: Console) -> int:
    from ouroboros.ground.state_folder import UNPAUSE_REQUEST

    return _request(load, UNPAUSE_REQUEST, "go on", console)


def _former_unpause(load: Loader, args: argparse.Namespace, console: Console) -> int:
    """`resume` as `unpause` was named before issue 30: a resumed run is one started again."""
    console.print("warning: `resume` is now `unpause` (`run` resumes a stopped run)")
    return _unpause(load, args, console)


def _compact(load: Loader, args: argparse.Namespace, console: Console) -> int:
    from ouroboros.ground.state_folder import COMPACT_REQUEST

    return _ask(load(), COMPACT_REQUEST, "compact the context at its next turn", console)


def _rewind(load: Loader, args: argparse.Namespace, console: Console) -> int:
    from ouroboros.checkpoints.rewind import rewind

    stdout_console().print(escape(rewind(load(), args.session)))
    return 0


_COMMANDS = {
    "run": _run,
    "tell": _tell,
    "task": _task,
    "pause": _pause,
    "unpause": _unpause,
    "resume": _former_unpause,
    "compact": _compact,
    "rewind": _rewind,
    "tail": _tail,
    "status": _status,
    "report": _report,
}


def main(argv: list[str] | None = None) -> int:
    args = argument_parser().parse_args(argv)
    console = stderr_console()
    try:
        if args.command == "demo":  # it writes its own config
            from ouroboros.demo import demo_dir, run_demo

            return run_demo(demo_dir(args.dir), stdout_console())
        return _COMMANDS[args.command](cache(lambda: _settings(args)), args, console)
    except ConfigError as e:
        console.print(f"[red]config error:[/] {escape(printable(str(e)))}", soft_wrap=True)
        return EXIT_CONFIG
    except SetupError as e:  # no start gets past it: not one for a service manager to retry
        console.print(f"[red]error:[/] {escape(printable(str(e)))}", soft_wrap=True)
        return EXIT_CONFIG
    except (RunError, StateUnwritable) as e:
        console.print(f"[red]error:[/] {escape(printable(str(e)))}", soft_wrap=True)
        return EXIT_FATAL
    except OSError as e:
        if e.errno not in UNWRITABLE or e.filename is None:
            raise
        where = escape(printable(str(e.filename)))
        console.print(
            f"[red]error:[/] cannot write {where} ({e.strerror}): make it "
            "writable, or set paths.state_dir (or paths.workspace) to a folder you may write",
            soft_wrap=True,
        )
        return EXIT_FATAL
