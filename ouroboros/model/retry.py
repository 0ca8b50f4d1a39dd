"""The one retry layer (tenacity): transient server errors only, with backoff, honouring the
server's `Retry-After`; an overflow is never retried unchanged."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_never,
    wait_random_exponential,
)
from tenacity.stop import stop_base

from ouroboros.clock import SYSTEM_CLOCK, Clock
from ouroboros.config import LLMSettings
from ouroboros.model.llm import TransientError

T = TypeVar("T")


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
    on_retry: Callable[[int, float, BaseException], None],
    clock: Clock = SYSTEM_CLOCK,
) -> T:
    """The one retry layer: transient errors only, exponential backoff with jitter, waiting on
    `clock`."""

    def report(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        if error is not None:
            on_retry(state.attempt_number, wait, error)

    backoff = wait_random_exponential(multiplier=settings.retry_initial_s, max=settings.retry_max_s)

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
