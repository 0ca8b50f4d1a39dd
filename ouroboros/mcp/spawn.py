"""How each server is reached: a stdio server started as shell commands are (confined by
`tools.sandbox` with its own `network`, the `tools.env` allow-list plus its own `env`, a private
TMPDIR, the run's process and memory limits, killed with the run), a Streamable HTTP server
through the SDK's client."""

from __future__ import annotations

import os
import shutil
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from mcp.client._transport import TransportStreams

from ouroboros.ground.config import Settings
from ouroboros.ground.mcp_settings import McpServerSettings
from ouroboros.mcp.http import capped_http
from ouroboros.mcp.server import Opener
from ouroboros.mcp.stdio import Fault, confined_stdio
from ouroboros.state.journal import Journal
from ouroboros.tools.environment import command_env, make_scratch, remove_scratch
from ouroboros.tools.processes import Processes, confined_processes


class Spawner:
    def __init__(self, settings: Settings, journal: Journal):
        self.settings, self.journal = settings, journal
        self.scratch = make_scratch()
        self.limit = settings.mcp.max_message_mb << 20
        self._processes: dict[bool, Processes] = {}
        """One set of confined processes per `network` setting the servers ask for."""

    def opener(self, server: McpServerSettings) -> Opener:
        if server.url is not None:
            url, limit = server.url, self.limit

            def http(fault: Fault) -> AbstractAsyncContextManager[TransportStreams]:
                return capped_http(url, limit)  # its faults are the SDK's errors

            return http
        assert server.command is not None
        network = self.settings.tools.network if server.network is None else server.network
        workspace = self.settings.paths.workspace
        cwd = workspace / server.cwd if server.cwd is not None else workspace
        env = {**command_env(os.environ, self.settings.tools.env, self.scratch), **server.env}
        program, args = server.command, server.args
        processes, limit = self._for(network), self.limit

        def stdio(fault: Fault) -> AbstractAsyncContextManager[TransportStreams]:
            try:  # looked up at each start: a program installed since is found
                command = [found(program, os.get_exec_path(env)), *args]
            except NotFound as e:
                fault.note(str(e))  # whole: where it looked may be longer than an error's line
                raise
            return confined_stdio(command, Path(cwd), env, processes, limit, fault)

        return stdio

    def _for(self, network: bool) -> Processes:
        if network not in self._processes:
            s, journal = self.settings, self.journal
            processes, summary = confined_processes(
                s, self.scratch, network, journal, "MCP servers"
            )
            journal.notify("tools", f"MCP servers (network {str(network).lower()}): {summary}")
            self._processes[network] = processes
        return self._processes[network]

    def close(self) -> None:
        for processes in self._processes.values():
            processes.close()
        remove_scratch(self.scratch)


class NotFound(Exception):
    """A server's program is nowhere it was looked for: the message says where."""


def found(program: str, path: list[str]) -> str:
    """`program` as it will be run: with a slash, as it is (from the server's folder); without
    one, its first executable file in the absolute folders of `path` (the server's PATH; a
    relative one would be the workspace, where the agent writes), then beside the running
    interpreter: the `[mcp]` extra installs servers into the venv's `bin/`, which is not on PATH
    when the venv was not activated."""
    if "/" in program:
        return program
    beside = str(Path(sys.executable).parent)
    for folder in (*(f for f in path if os.path.isabs(f)), beside):
        if (where := shutil.which(program, path=folder)) is not None:
            return where
    looked = f"PATH ({os.pathsep.join(path)}) nor in {beside}"
    raise NotFound(f"{program} is not on {looked}: install it, or give `command` its path")
