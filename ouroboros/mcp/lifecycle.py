"""The run's MCP servers, started when the run starts and stopped when it ends, around the
supervisor (`start.py`). Imports the SDK only where servers are configured: without the
`[mcp]` extra, a run without servers never needs it."""

from __future__ import annotations

import importlib.metadata
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio

from ouroboros.ground.config import Settings
from ouroboros.ground.errors import SetupError
from ouroboros.state.journal import Journal

if TYPE_CHECKING:
    from ouroboros.mcp.hub import McpHub

SDK_VERSIONS = ((2, 3), (3, 0))
"""The SDK's releases this client is tested with (from, before): it imports one of its private
modules (`mcp.client._transport`), which a later release may move."""
INSTALL = ": pip install -e '.[mcp]' (or remove the servers from the config)"


@asynccontextmanager
async def mcp_servers(settings: Settings, journal: Journal) -> AsyncIterator[McpHub | None]:
    """The configured servers started (None when there are none), and stopped at the end."""
    if not any(s.enabled for s in settings.mcp.servers.values()):
        yield None
        return
    if (unusable := _sdk_unusable()) is not None:
        raise SetupError(f"[mcp.servers] is configured but {unusable}{INSTALL}")
    try:
        from ouroboros.mcp.hub import McpHub
        from ouroboros.mcp.sdk_log import sdk_warnings_journalled
        from ouroboros.mcp.spawn import Spawner
    except ImportError as e:
        said = f"the MCP client could not be imported ({e})"
        raise SetupError(f"[mcp.servers] is configured but {said}{INSTALL}") from None

    spawner = Spawner(settings, journal)
    failure: BaseException | None = None
    try:
        with sdk_warnings_journalled(journal):
            async with anyio.create_task_group() as tg:
                hub = McpHub(settings, journal, tg, spawner)
                try:
                    await hub.start()
                    yield hub
                except BaseException as e:  # raised again below: a task group would wrap it
                    failure = e
                finally:
                    with anyio.CancelScope(shield=True):
                        await hub.close()
                    tg.cancel_scope.cancel()
    finally:
        spawner.close()
    if failure is not None:
        raise failure


def _sdk_unusable() -> str | None:
    """Why the installed SDK cannot serve (None when it can)."""
    try:
        version = importlib.metadata.version("mcp")
    except importlib.metadata.PackageNotFoundError:
        return "the MCP client is not installed"
    release = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    low, high = SDK_VERSIONS
    if not low <= release < high:
        return f"the MCP client installed is mcp {version}, and this harness needs mcp>=2.3,<3"
    return None
