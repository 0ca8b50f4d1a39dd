"""The commands. Nothing runs on import; `main` returns the exit code."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ouroboros.compaction import COMPACT_REQUEST
from ouroboros.config import ConfigError, Settings, load_settings
from ouroboros.demo import demo_dir, run_demo
from ouroboros.jsonl import StorageFull
from ouroboros.lock import RESUME_REQUEST, RunError, fresh_state
from ouroboros.observe import status, tail
from ouroboros.observe.report import write_report
from ouroboros.supervisor import run_to_end

EXIT_FATAL = 1
EXIT_CONFIG = 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ouroboros", description=__doc__)
    parser.add_argument("--config", type=Path, help="config file (default: ./config.toml)")
    commands = parser.add_subparsers(dest="command", required=True)
    run_cmd = commands.add_parser(
        "run", help="start the agent, or resume the run in the state folder"
    )
    run_cmd.add_argument("--max-turns", type=int, help="stop the run after N model calls in all")
    run_cmd.add_argument(
        "--fresh", action="store_true", help="move the old state aside and start anew"
    )
    commands.add_parser(
        "resume", help="let a run waiting before a restart (auto_restart=false) go on"
    )
    commands.add_parser(
        "compact", help="ask the running supervisor to compact the context at its next turn"
    )
    state_help = (
        "state folder (default: paths.state_dir; without --config, a config.toml next to "
        "this folder is used for the budgets and lines)"
    )
    tail_cmd = commands.add_parser(
        "tail", help="both logs merged, one readable line per model call and event"
    )
    tail_cmd.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    tail_cmd.add_argument("--state", type=Path, help=state_help)
    tail_cmd.add_argument("--json", action="store_true", help="the records unchanged, merged")
    tail_cmd.add_argument("--tools", action="store_true", help="a line per tool call too")
    status_cmd = commands.add_parser("status", help="is the run alive, where it is, what is left")
    status_cmd.add_argument("--state", type=Path, help=state_help)
    report_cmd = commands.add_parser("report", help="an HTML page with a chart of the run")
    report_cmd.add_argument("--state", type=Path, help=state_help)
    report_cmd.add_argument(
        "--out", type=Path, help="where to write (default: <state>/report.html)"
    )
    demo_cmd = commands.add_parser("demo", help="a whole run in seconds with a scripted model")
    demo_cmd.add_argument("--dir", type=Path, help="project folder (default: a new temp folder)")
    return parser


def _settings(args: argparse.Namespace) -> Settings:
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


def _run(settings: Settings, args: argparse.Namespace, console: Console) -> int:
    if args.fresh:
        aside = fresh_state(settings.paths.state_dir)
        if aside:
            console.print(f"previous run moved to {aside}")
    outcome = run_to_end(settings, console)
    console.print(f"run stopped: {outcome.reason}")
    return outcome.exit_code


def _state_dir(settings: Settings, args: argparse.Namespace) -> Path:
    state: Path | None = args.state
    return state.resolve() if state is not None else settings.paths.state_dir


def _tail(settings: Settings, args: argparse.Namespace, console: Console) -> int:
    options = tail.TailOptions(follow=args.follow, as_json=args.json, tools=args.tools)
    try:
        return tail.tail(_state_dir(settings, args), options, tail.stdout_console(), console)
    except BrokenPipeError:  # `tail --json | head`: the reader left, which is fine
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _status(settings: Settings, args: argparse.Namespace, console: Console) -> int:
    return status.status(_state_dir(settings, args), settings, tail.stdout_console())


def _report(settings: Settings, args: argparse.Namespace, console: Console) -> int:
    path = write_report(_state_dir(settings, args), settings, args.out)
    console.print(f"report written to {path}")
    return 0


def _ask(settings: Settings, request: str, what: str, console: Console) -> int:
    """Leave a request file the running supervisor looks for."""
    flag = settings.paths.state_dir / request
    flag.parent.mkdir(parents=True, exist_ok=True)
    flag.touch()
    console.print(f"asked the supervisor on {settings.paths.state_dir} to {what}")
    return 0


def _resume(settings: Settings, args: argparse.Namespace, console: Console) -> int:
    return _ask(settings, RESUME_REQUEST, "go on", console)


def _compact(settings: Settings, args: argparse.Namespace, console: Console) -> int:
    return _ask(settings, COMPACT_REQUEST, "compact the context at its next turn", console)


_COMMANDS = {
    "run": _run,
    "resume": _resume,
    "compact": _compact,
    "tail": _tail,
    "status": _status,
    "report": _report,
}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        if args.command == "demo":  # it writes its own config
            return run_demo(demo_dir(args.dir), console)
        settings = _settings(args)
        return _COMMANDS[args.command](settings, args, console)
    except ConfigError as e:
        console.print(f"[red]config error:[/] {escape(str(e))}", soft_wrap=True)
        return EXIT_CONFIG
    except (RunError, StorageFull) as e:
        console.print(f"[red]error:[/] {escape(str(e))}", soft_wrap=True)
        return EXIT_FATAL
