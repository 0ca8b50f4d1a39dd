"""The time a run reads and waits on: the system's, or a fake one that moves only when told.

What a run measures (its wall-time limit) and what it waits for (the retry layer's backoff) go
through a `Clock`, so a test of either waits on nothing and depends on no machine's speed.
"""

from __future__ import annotations

import time
from typing import Protocol

import anyio
from anyio.lowlevel import checkpoint


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch, as `time.time()`: the journal's timestamps are on this scale."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    now = staticmethod(time.time)

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


class FakeClock:
    """Starts at the real time (the journal stamps its records with the real time, and a run's
    elapsed time is measured from them); then moves only when slept on or advanced."""

    def __init__(self, start: float | None = None):
        self.at = time.time() if start is None else start
        self.slept: list[float] = []
        """Every sleep asked for, in order."""

    def now(self) -> float:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += seconds

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.advance(seconds)
        await checkpoint()  # other tasks still get their turn, as in a real sleep


SYSTEM_CLOCK = SystemClock()
