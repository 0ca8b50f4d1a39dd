"""A blocking call the run can always stop waiting for."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel

T = TypeVar("T")


async def abandonable(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a daemon thread, given up on when the caller is cancelled: a thread stuck in
    a system call (a FIFO, a hung disk) never keeps the run from stopping. (anyio's own worker
    threads, even with `abandon_on_cancel`, are joined when the process exits.)"""
    done, results, errors = anyio.Event(), list[T](), list[BaseException]()
    token = anyio.lowlevel.current_token()

    def work() -> None:
        try:
            results.append(fn(*args))
        except BaseException as e:  # handed to the caller, raised there
            errors.append(e)
        with contextlib.suppress(anyio.RunFinishedError, RuntimeError):  # nobody waits now
            anyio.from_thread.run_sync(done.set, token=token)

    threading.Thread(target=work, name=f"tool {fn.__name__}", daemon=True).start()
    await done.wait()
    if errors:
        raise errors[0]
    return results[0]
