"""`python -m ouroboros` is the command line's `main` (in this process: the fast tier's)."""

from __future__ import annotations

import runpy
import sys

import pytest


def test_python_m_ouroboros_runs_the_command_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["ouroboros", "--help"])
    with pytest.raises(SystemExit) as ended:
        runpy.run_module("ouroboros", run_name="__main__")
    assert ended.value.code == 0
    assert "run" in capsys.readouterr().out
