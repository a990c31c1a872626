"""A bounded retry policy of our own (the SDKs' retries are off): per-attempt timeout, exponential
backoff with jitter, `retry-after` honoured up to a cap, retries only for 429 / 5xx / timeouts /
connection errors."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from .errors import LLMError

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    timeout_s: float = 180.0  # one attempt, end to end
    max_attempts: int = 4  # attempts in all (1 = no retry)
    base_delay_s: float = 1.0
    max_delay_s: float = 30.0
    max_retry_after_s: float = 60.0  # a server asking for longer gets this much

    def delay(self, attempt: int, error: LLMError, rng: random.Random) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        if error.retry_after is not None and error.retry_after >= 0:
            return min(error.retry_after, self.max_retry_after_s)
        backoff = min(self.max_delay_s, self.base_delay_s * (2 ** (attempt - 1)))
        return backoff * (0.5 + rng.random() / 2)


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    rng: random.Random | None = None,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    on_retry: Callable[[int, LLMError, float], None] | None = None,
) -> T:
    """Run `attempt` until it succeeds, fails for good, or `policy.max_attempts` are used up.
    Raises the last `LLMError`. Every attempt is bounded by `policy.timeout_s`."""
    rng = rng or random.Random()
    last: LLMError | None = None
    for number in range(1, max(1, policy.max_attempts) + 1):
        try:
            return await asyncio.wait_for(attempt(), timeout=policy.timeout_s)
        except TimeoutError:
            last = LLMError(f"no answer within {policy.timeout_s:g} s", kind="timeout", retryable=True)
        except LLMError as exc:
            last = exc
        if not last.retryable or number >= policy.max_attempts:
            break
        wait = policy.delay(number, last, rng)
        if on_retry is not None:
            on_retry(number, last, wait)
        await sleep(wait)
    assert last is not None
    raise last
