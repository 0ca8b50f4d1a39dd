"""How each server is reached: a stdio server started as shell commands are (confined by
`tools.sandbox` with its own `network`, the `tools.env` allow-list plus its own `env`, a private
TMPDIR, the run's process and memory limits, killed with the run), a Streamable HTTP server
through the SDK's client."""

from __future__ import annotations

import os
from contextlib import AbstractAsyncContextManager
from functools import partial
from pathlib import Path

from mcp.client._transport import TransportStreams

from ouroboros.config import Settings
from ouroboros.mcp.http import capped_http
from ouroboros.mcp.server import Opener
from ouroboros.mcp.settings import McpServerSettings
from ouroboros.mcp.stdio import Fault, confined_stdio
from ouroboros.run.journal import Journal
from ouroboros.tools.environment import command_env
from ouroboros.tools.processes import Processes
from ouroboros.tools.scratch import make_scratch, remove_scratch
from ouroboros.wiring import confine


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
        command = [server.command, *server.args]
        return partial(confined_stdio, command, Path(cwd), env, self._for(network), self.limit)

    def _for(self, network: bool) -> Processes:
        if network not in self._processes:
            t = self.settings.tools
            settings = self.settings.model_copy(
                update={"tools": t.model_copy(update={"network": network})}
            )
            confinement, summary = confine(settings, self.scratch)
            if confinement is None and t.sandbox == "auto":
                said = f"MCP servers run unconfined: {summary}"
                self.journal.notify("warning", said)
            self._processes[network] = Processes(
                confinement, max_processes=t.max_processes, max_memory_mb=t.max_memory_mb
            )
            for gap in self._processes[network].gaps:
                self.journal.notify("warning", f"MCP servers: {gap}")
            said = f"MCP servers (network {str(network).lower()}): {summary}"
            self.journal.notify("tools", said)
        return self._processes[network]

    def close(self) -> None:
        for processes in self._processes.values():
            processes.close()
        remove_scratch(self.scratch)
