"""The commands. Nothing runs on import; `main` returns the exit code."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import anyio
from rich.console import Console

from ouroboros.config import ConfigError, Settings, load_settings
from ouroboros.events import EventLog
from ouroboros.journal import JournalCorrupt
from ouroboros.supervisor import RunError, fresh_state, run

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
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    path: Path = args.config or Path("config.toml")
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
    log = EventLog(settings.paths.state_dir, console)
    try:
        outcome = anyio.run(run, settings, log)
    finally:
        log.close()
    console.print(f"run stopped: {outcome.reason}")
    return outcome.exit_code


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    console = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        settings = _settings(args)
        if args.command == "resume":
            flag = settings.paths.state_dir / "resume"
            flag.parent.mkdir(parents=True, exist_ok=True)
            flag.touch()
            console.print(f"asked the supervisor on {settings.paths.state_dir} to go on")
            return 0
        return _run(settings, args, console)
    except ConfigError as e:
        console.print(f"[red]config error:[/] {e}", soft_wrap=True)
        return EXIT_CONFIG
    except (RunError, JournalCorrupt) as e:
        console.print(f"[red]error:[/] {e}", soft_wrap=True)
        return EXIT_FATAL
