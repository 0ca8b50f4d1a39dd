"""A Linux kernel without Landlock (before 5.13, or not in `lsm=`) still confines what it can:
no capabilities, the read-only view outside the workspace, the socket filter, and says what it
lacks. The kernel here has Landlock: `sandbox.build(abi=0)` builds what such a kernel gets."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from ouroboros.ground.messages import ToolCall
from ouroboros.tools import ToolCaps, ToolRunner, sandbox
from ouroboros.tools.processes import Processes
from ouroboros.tools.shell import ShellExec
from ouroboros.tools.workspace import Workspace
from ouroboros.wiring import built_in


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[tuple[ToolRunner, sandbox.Confinement]]:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "sentinel").write_text("untouched\n")
    os.chmod(tmp_path / "outside" / "sentinel", 0o644)
    confinement = sandbox.build(
        [tmp_path / "workspace"], [Path("/")], tmp_path / "state", False, abi=0
    )
    if confinement.isolation is None:
        confinement.close()
        pytest.skip("no namespaces here: nothing but capabilities to check without Landlock")
    shell = ShellExec(5, Processes(confinement, use_cgroup=False), {"PATH": os.environ["PATH"]})
    tools = ToolRunner(
        Workspace(tmp_path / "workspace", tmp_path / "SYSTEM_PROMPT.md"),
        built_in(shell, None, True),
        ToolCaps(4000),
    )
    yield tools, confinement
    tools.close()


def shell(tools: ToolRunner, command: str) -> str:
    call = ToolCall(id="c", name="shell_exec", arguments=json.dumps({"command": command}))
    return anyio.run(tools.run, call).message.content


def test_without_landlock_what_holds_still_holds(
    runner: tuple[ToolRunner, sandbox.Confinement], tmp_path: Path
) -> None:
    tools, confinement = runner
    sentinel = tmp_path / "outside" / "sentinel"
    assert confinement.fd is None
    assert "no Landlock" in confinement.summary
    assert any("no Landlock" in gap for gap in confinement.gaps)
    assert shell(tools, "echo inside > notes.md").startswith("exit code 0")
    assert (tmp_path / "workspace" / "notes.md").read_text() == "inside\n"
    shell(tools, f"echo changed > {sentinel}; chmod 000 {sentinel}")
    assert sentinel.read_text() == "untouched\n"
    assert sentinel.stat().st_mode & 0o777 == 0o644
    chown = shell(tools, "touch mine && chown 1:1 mine && echo chowned")
    assert "chowned" not in chown  # no capabilities
    unix = shell(
        tools, "python3 -c \"import socket; socket.socket(socket.AF_UNIX); print('made')\""
    )
    assert "made" not in unix  # the socket filter, network = false


def test_landlock_required_refuses_a_kernel_without_it(tmp_path: Path) -> None:
    with pytest.raises(sandbox.SandboxError) as refused:
        sandbox.build(
            [tmp_path], [Path("/")], tmp_path / "state", True, landlock_required=True, abi=0
        )
    assert "no Landlock" in str(refused.value)
