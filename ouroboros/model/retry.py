"""The one retry layer (tenacity): transient errors only (`llm.TransientError`), with backoff on
the run's clock, honouring the server's `Retry-After`; an overflow is never retried unchanged.
Every failed try is reported; the first, then one at growing intervals, is marked as worth a
line to a person (`journalled`: a `retry` notice)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_never,
    wait_exponential_jitter,
)
from tenacity.stop import stop_base

from ouroboros.ground.clock import SYSTEM_CLOCK, Clock
from ouroboros.ground.config import LLMSettings
from ouroboros.model.llm import StoodStill, TransientError, Unreachable
from ouroboros.state.journal import Journal

T = TypeVar("T")

TOLD_AT_MIN = (1, 2, 5, 10, 20, 30, 60)
"""Minutes of waiting after which a person is told again that the run still waits (then every
`TOLD_EVERY_MIN`): a wait of a night makes a dozen lines, not one a try."""
TOLD_EVERY_MIN = 60


@dataclass(frozen=True)
class Retry:
    """A failed try the retry layer tells of, before it waits for the next."""

    attempt: int
    wait_s: float
    waited_s: float
    """Since the first try of this call."""
    error: BaseException
    server: str
    """The server's address (`llm.base_url`)."""
    for_s: float
    """How long the layer tries in all (`llm.retry_for_s`); 0: for ever."""
    told: bool = True
    """Worth a line to a person: the first failure, then the first past each of `TOLD_AT_MIN`
    minutes of waiting."""

    @property
    def unreachable(self) -> bool:
        """Nothing answers at the address (discovery wraps the client's error in its own)."""
        return isinstance(self.error, Unreachable) or isinstance(self.error.__cause__, Unreachable)


def times_told(waited_s: float) -> int:
    """How many of the times a wait is told again have passed after `waited_s` seconds."""
    minutes = waited_s / 60
    passed = sum(1 for at in TOLD_AT_MIN if minutes >= at)
    if minutes >= TOLD_AT_MIN[-1]:
        passed += int((minutes - TOLD_AT_MIN[-1]) // TOLD_EVERY_MIN)
    return passed


class StopAfter(stop_base):
    """Stop once `seconds` have passed on `clock` since the first failure (tenacity's own
    `stop_after_delay` reads the system's monotonic time, which a fake clock does not move)."""

    def __init__(self, seconds: float, clock: Clock):
        self.seconds, self.clock = seconds, clock
        self.deadline: float | None = None

    def __call__(self, retry_state: RetryCallState) -> bool:
        now = self.clock.now()
        if self.deadline is None:
            self.deadline = now + self.seconds
        return now >= self.deadline


async def retrying(
    call: Callable[[], Awaitable[T]],
    settings: LLMSettings,
    on_retry: Callable[[Retry], None],
    clock: Clock = SYSTEM_CLOCK,
) -> T:
    """The one retry layer: transient errors only, exponential backoff with a little jitter,
    waiting on `clock`. `on_retry` hears of every failed try before the wait for the next."""
    started = clock.now()
    told = 0

    def report(state: RetryCallState) -> None:
        nonlocal told
        error = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        waited = clock.now() - started
        if error is None:
            return
        said = state.attempt_number == 1 or times_told(waited) > told
        told = times_told(waited)
        server, for_s = settings.base_url, settings.retry_for_s
        on_retry(Retry(state.attempt_number, wait, waited, error, server, for_s, said))

    # Doubling from `retry_initial_s` to `retry_max_s`, plus at most `retry_initial_s` of jitter
    # (several runs on one server do not all come back at the same instant); not tenacity's
    # full jitter, whose waits jump anywhere between 0 and the cap.
    backoff = wait_exponential_jitter(
        multiplier=settings.retry_initial_s,
        max=settings.retry_max_s,
        jitter=settings.retry_initial_s,
    )

    def wait(state: RetryCallState) -> float:
        """The backoff, or longer when the server said how long (`Retry-After`)."""
        error = state.outcome.exception() if state.outcome else None
        asked = error.retry_after if isinstance(error, TransientError) else None
        return max(backoff(state), min(asked or 0.0, settings.retry_max_s))

    stop = StopAfter(settings.retry_for_s, clock) if settings.retry_for_s else stop_never
    async for attempt in AsyncRetrying(
        retry=retry_if_exception_type(TransientError),
        wait=wait,
        stop=stop,
        sleep=clock.sleep,
        before_sleep=report,
        reraise=True,
    ):
        with attempt:
            return await call()
    raise AssertionError("unreachable: tenacity either returns or raises")


def journalled(journal: Journal) -> Callable[[Retry], None]:
    """The retry layer's report before it waits, as a notice: readers show that the run waits,
    for what, until when, and why."""

    def report(retry: Retry) -> None:
        journal.notify(
            "retry",
            str(retry.error)[:300],
            attempt=retry.attempt,
            wait_s=round(retry.wait_s, 2),
            waited_s=round(retry.waited_s),
            server=retry.server,
            retry_for_s=retry.for_s,
            unreachable=retry.unreachable,
            stood_still=isinstance(retry.error, StoodStill),
            told=retry.told,
        )

    return report
