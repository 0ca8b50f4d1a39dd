"""The real-task bench's baseline: one task run through mini-swe-agent 2.4.6's text-based config.

    python bench/mini_baseline.py --base-url http://127.0.0.1:8431/v1 \\
        --task bench/tasks/01-write-file --seed 1 [--max-calls 20] [--wall-s 300] [--keep DIR]

prints one JSON line: task, seed, passed (the task's `check` run in the workspace after the run),
model_calls, stop (mini's exit status: Submitted, LimitsExceeded, RepeatedFormatError, the name of
an exception that ended it, or `timeout` when it was killed at the wall bound) and seconds.
`run_task` is the same for bench/real_tasks.py.

mini-swe-agent is not a dependency of ouroboros. On first use this makes it a venv of its own,
`bench/.venv-mini` (git-ignored), with `python -m venv` and `pip install mini-swe-agent==2.4.6`,
and runs its `mini` command there as a subprocess, so this module imports without it.

How `mini` is run, all of it as shipped but what the bench must set:
- `-c mini_textbased.yaml`, the package's config whose prompts ask for one ```mswea_bash_command
  block per reply, with `model.model_class=litellm_textbased`, the model that parses those blocks
  (the yaml does not name it: without it mini sends its bash tool and reads tool calls);
- the model `openai/local` at `--base-url` (litellm's OpenAI-compatible route; llama-server
  ignores the name), ouroboros's default temperature and the run's seed in every request;
- `model.cost_tracking=ignore_errors` (litellm has no price for a local model, which mini
  otherwise treats as fatal) and `--cost-limit 0`: the bound is `agent.step_limit`, model calls;
- `--yolo --exit-immediately`: commands run unconfirmed, and a submission ends the run;
- its working directory a fresh copy of the task's `workspace/`, the task `purpose.md`'s text.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TypedDict

from ouroboros.ground.config import LLMSettings

VENV = Path(__file__).resolve().parent / ".venv-mini"
MINI = VENV / "bin" / "mini"
PACKAGE = "mini-swe-agent==2.4.6"
TEMPERATURE = LLMSettings.model_fields["temperature"].default
"""Ouroboros's own default, so that both harnesses sample the model alike."""
CHECK_TIMEOUT_S = 60


class Row(TypedDict):
    task: str
    seed: int
    passed: bool
    model_calls: int
    stop: str
    seconds: float


def ensure_mini() -> Path:
    """The `mini` command of the bench's own venv, made on first use."""
    if MINI.is_file():
        return MINI
    steps = (
        [sys.executable, "-m", "venv", str(VENV)],
        [str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", PACKAGE],
    )
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise SystemExit(
                f"error: `{' '.join(step)}` failed ({last}): fix that, or delete {VENV} "
                "and run again"
            )
    return MINI


def mini_command(mini: Path, purpose: str, base_url: str, seed: int, max_calls: int) -> list[str]:
    settings = {
        "model.model_class": "litellm_textbased",
        "model.model_name": "openai/local",
        "model.model_kwargs.api_base": base_url,
        "model.model_kwargs.api_key": "none",
        "model.model_kwargs.temperature": TEMPERATURE,
        "model.model_kwargs.seed": seed,
        "model.cost_tracking": "ignore_errors",
        "agent.step_limit": max_calls,
    }
    specs = [f"{key}={json.dumps(value)}" for key, value in settings.items()]
    configs = [arg for spec in ["mini_textbased.yaml", *specs] for arg in ("-c", spec)]
    return [str(mini), *configs, "--cost-limit", "0", "--yolo", "--exit-immediately",
            "--task", purpose]  # fmt: skip


def mini_environment(config_dir: Path) -> dict[str, str]:
    return os.environ | {
        # Otherwise mini's first run asks on the terminal for a default model and an API key.
        "MSWEA_CONFIGURED": "true",
        # mini reads an .env from, and writes its last trajectory to, this folder: a run's own
        # keeps a user's settings (a default model, keys) out and leaves theirs alone.
        "MSWEA_GLOBAL_CONFIG_DIR": str(config_dir),
        # litellm fetches its price list from GitHub when imported; there may be no internet,
        # and prices are not used (cost_tracking above).
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }


def descendants(pid: int) -> list[int]:
    """The processes under `pid`, read from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it ended while the folder was read
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        found.extend(below := children.get(todo.pop(), []))
        todo.extend(below)
    return found


def kill_run(mini: subprocess.Popen[bytes]) -> None:
    """Kill mini and the command it is running: mini starts each command in a session of its
    own, out of reach of a kill of mini's group, and orphaned once mini is gone."""
    os.killpg(mini.pid, signal.SIGSTOP)  # so that it starts no new command while the tree is read
    groups = {mini.pid}
    for pid in descendants(mini.pid):
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            continue
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            continue
    mini.wait()


def read_trajectory(trajectory: Path, log: Path, returncode: int) -> tuple[int, str]:
    """Model calls and exit status from the trajectory mini saves after every step."""
    try:
        info = json.loads(trajectory.read_text())["info"]
    except FileNotFoundError:
        lines = log.read_text(errors="replace").strip().splitlines() or ["no output"]
        raise SystemExit(
            f"error: mini-swe-agent ended (exit code {returncode}) before its first step: "
            f"{lines[-1].strip()}"
        ) from None
    except json.JSONDecodeError:
        raise SystemExit(
            "error: mini-swe-agent was killed at the wall bound while it saved its trajectory, "
            "whose counts are lost: run the task again"
        ) from None
    return int(info["model_stats"]["api_calls"]), str(info["exit_status"])


def check(task_dir: Path, workspace: Path) -> bool:
    try:
        done = subprocess.run(
            ["sh", str(task_dir.resolve() / "check")],
            cwd=workspace,
            capture_output=True,
            timeout=CHECK_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def run_mini(command: list[str], where: Path, wall_s: float) -> tuple[int, str]:
    """Run `mini` in `where`/workspace, killed past `wall_s`: its model calls and stop reason."""
    trajectory, log = where / "trajectory.json", where / "mini.log"
    with log.open("wb") as out:
        run = subprocess.Popen(
            [*command, "--output", str(trajectory)],
            cwd=where / "workspace",
            env=mini_environment(where / "mswea-config"),
            # No terminal: mini stops at its limits instead of asking for new ones.
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            run.wait(timeout=wall_s)
        except subprocess.TimeoutExpired:
            kill_run(run)
            # mini saves after each step and counts a call as it sends it: the step it was
            # killed in had sent one more than the last save holds.
            saved = (
                read_trajectory(trajectory, log, run.returncode)[0] if trajectory.exists() else 0
            )
            return saved + 1, "timeout"
    return read_trajectory(trajectory, log, run.returncode)


def run_task(
    task_dir: Path,
    base_url: str,
    seed: int,
    max_calls: int,
    wall_s: float,
    keep: Path | None = None,
) -> Row:
    """Run the task once through mini-swe-agent on the server at `base_url`; `keep` receives the
    workspace after the run, mini's trajectory and its output."""
    purpose = (task_dir / "purpose.md").read_text().strip()
    command = mini_command(ensure_mini(), purpose, base_url, seed, max_calls)
    with tempfile.TemporaryDirectory(prefix="mini-baseline-") as folder:
        where = Path(folder)
        (where / "workspace").mkdir(parents=True)
        if (task_dir / "workspace").is_dir():  # git keeps no empty folder: a task may have none
            shutil.copytree(
                task_dir / "workspace", where / "workspace", symlinks=True, dirs_exist_ok=True
            )
        started = time.monotonic()
        calls, stop = run_mini(command, where, wall_s)
        seconds = time.monotonic() - started
        passed = check(task_dir, where / "workspace")
        if keep is not None:
            shutil.rmtree(keep, ignore_errors=True)
            shutil.copytree(where, keep, symlinks=True, ignore=shutil.ignore_patterns("mswea-*"))
    return Row(task=task_dir.name, seed=seed, passed=passed, model_calls=calls, stop=stop,
               seconds=round(seconds, 1))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="the server's /v1 endpoint")
    parser.add_argument("--task", type=Path, required=True, help="a folder of bench/tasks")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-calls", type=int, default=20)
    parser.add_argument("--wall-s", type=float, default=300)
    parser.add_argument("--keep", type=Path, help="copy the workspace and trajectory here")
    args = parser.parse_args()
    if not (args.task / "purpose.md").is_file() or not (args.task / "check").is_file():
        raise SystemExit(f"error: {args.task} is no task (it needs purpose.md and check)")
    row = run_task(args.task, args.base_url, args.seed, args.max_calls, args.wall_s, args.keep)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
