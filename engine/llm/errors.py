"""The one error type LLM clients raise: what went wrong, whether a retry may help, never a key."""

from __future__ import annotations

from .keys import redact


class LLMError(Exception):
    """A failed LLM call. `kind`: timeout | rate | server | connection | client | answer."""

    def __init__(
        self, message: str, *, kind: str, retryable: bool, status: int | None = None, retry_after: float | None = None
    ):
        self.message = redact(message)[:2000]
        self.kind = kind
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after
        super().__init__(self.message)

    def __str__(self) -> str:
        status = f" (HTTP {self.status})" if self.status else ""
        return f"{self.kind}{status}: {self.message}"
