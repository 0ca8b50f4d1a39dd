"""Shared fixtures: a project folder, the scripted loopback server, and the CLI as a subprocess."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ouroboros.model.scripted import ScriptedServer, quick_config

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def load_module(path: Path) -> ModuleType:
    """A script of this project (scripts/, bench/) as a module, its folder importable too."""
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Project:
    """A throwaway project folder laid out like the real one."""

    root: Path

    @property
    def state(self) -> Path:
        return self.root / ".ouroboros"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    def configure(self, base_url: str, **sections: dict[str, Any]) -> None:
        (self.root / "config.toml").write_text(quick_config(base_url, **sections))

    def run(
        self, *args: str, timeout: float = 120, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        only_in_the_slow_tier()
        return subprocess.run(
            [sys.executable, "-m", "ouroboros", *args],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "COLUMNS": "200", **(env or {})},
        )

    def start(self, *args: str) -> subprocess.Popen[str]:
        """`python -m ouroboros ARGS` in the background, its stderr (errors) captured; its
        terminal lines (stdout) are in the logs the tests read."""
        only_in_the_slow_tier()
        return subprocess.Popen(
            [sys.executable, "-m", "ouroboros", *args],
            cwd=self.root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )

    def records(self, name: str) -> list[dict[str, Any]]:
        path = self.state / name
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.records("events.jsonl") if kind is None or r["kind"] == kind]

    def usage(self) -> list[dict[str, Any]]:
        return self.records("token_usage.jsonl")


running: list[pytest.Item] = []  # the test being set up, run or torn down


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    running[:] = [item]


def only_in_the_slow_tier() -> None:
    """`python -m ouroboros` costs a second or more per command: a test that starts it is marked
    `slow`, so that `pytest -m "not slow"` stays fast (docs/testing.md)."""
    if running and running[0].get_closest_marker("slow") is None:
        pytest.fail(f"{running[0].nodeid} starts `python -m ouroboros`: mark it `slow`")


def pytest_configure(config: pytest.Config) -> None:
    """Tests run as in a pipe, lines whole: pytest-xdist's workers set COLUMNS=80, which a run
    reads as its terminal's width (a test that wants one sets its own). Before any fixture, so
    module-scoped ones run without it too."""
    os.environ.pop("COLUMNS", None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The real llama-server tier first: the longest file, which one worker runs whole
    (`--dist loadfile`), is then never the one the others wait for at the end."""
    items.sort(key=lambda item: item.get_closest_marker("real_server") is None)


def free_port() -> int:
    """A loopback port no one listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for(condition: Callable[[], object], timeout: float = 20, step: float = 0.05) -> None:
    """Poll until `condition()` is true or the time is up (the caller asserts what it needs)."""
    deadline = time.time() + timeout
    while not condition() and time.time() < deadline:
        time.sleep(step)


@pytest.fixture
def project(tmp_path: Path) -> Project:
    root = tmp_path / "project"
    (root / "workspace").mkdir(parents=True)
    (root / "SYSTEM_PROMPT.md").write_text("# Purpose\nTest the harness.\n")
    return Project(root)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


@pytest.fixture
def llama_server() -> Iterator[ScriptedServer]:
    with ScriptedServer(dialect="llama", n_ctx=8192) as s:
        yield s


@contextmanager
def tmpfs_at(folder: Path, size: str) -> Iterator[Path]:
    """`folder`, made, on a tmpfs of `size` (root and mount(8) needed; the test is skipped
    elsewhere)."""
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.fixture
def small_disk(project: Project) -> Iterator[Path]:
    """The state folder on a 256 KB tmpfs."""
    with tmpfs_at(project.state, "256k") as state:
        yield state


def fill(disk: Path, leave: int) -> Path:
    """Take the disk's space but `leave` bytes."""
    filler = disk / "filler"
    with filler.open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass
        f.truncate(max(0, f.tell() - leave))
    return filler
