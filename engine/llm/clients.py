"""Chat clients over the official SDKs: Anthropic (Messages API), OpenAI and OpenAI-compatible servers
(Chat Completions). One attempt per `chat` call (the SDKs' own retries are off; see retry.py); every
SDK error becomes an `LLMError` without the key."""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import anthropic
import openai

from .errors import LLMError
from .keys import env_key
from .models import ModelSpec

COMPAT_PLACEHOLDER_KEY = "not-needed"  # the OpenAI SDK insists on a key; local servers ignore it


@dataclass
class ChatRequest:
    system: str
    messages: list[dict[str, str]]  # [{"role": "user" | "assistant", "content": str}]
    temperature: float = 0.7
    max_tokens: int = 4096

    def prompt_chars(self) -> int:
        return len(self.system) + sum(len(m["content"]) for m in self.messages)


@dataclass
class ChatResult:
    text: str
    input_tokens: int
    output_tokens: int
    stop_reason: str = ""
    latency_s: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict)


def estimate_tokens(chars: int) -> int:
    return max(1, chars // 4)


class ChatClient(Protocol):
    spec: ModelSpec

    async def chat(self, request: ChatRequest, timeout_s: float) -> ChatResult: ...


def _retry_after(response: Any) -> float | None:
    try:
        value = response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, TypeError, ValueError):
        return None


def _convert(exc: Exception, sdk: Any) -> LLMError:
    """Map an SDK exception to an LLMError (its message carries no key: LLMError redacts)."""
    if isinstance(exc, sdk.APITimeoutError):
        return LLMError("the request timed out", kind="timeout", retryable=True)
    if isinstance(exc, sdk.APIConnectionError):
        return LLMError(f"cannot reach the server: {exc}", kind="connection", retryable=True)
    if isinstance(exc, sdk.APIStatusError):
        status = getattr(exc, "status_code", None) or 0
        after = _retry_after(getattr(exc, "response", None))
        message = str(getattr(exc, "message", "") or exc)
        if status == 429:
            return LLMError(message, kind="rate", retryable=True, status=status, retry_after=after)
        if status >= 500 or status in (408, 409):
            return LLMError(message, kind="server", retryable=True, status=status, retry_after=after)
        hint = " (check the key variable)" if status in (401, 403) else ""
        return LLMError(message + hint, kind="client", retryable=False, status=status)
    return LLMError(f"{type(exc).__name__}: {exc}", kind="client", retryable=False)


class AnthropicChat:
    """Messages API through `anthropic.AsyncAnthropic` (ANTHROPIC_BASE_URL is honoured by the SDK)."""

    def __init__(self, spec: ModelSpec, *, timeout_s: float = 180.0):
        self.spec = spec
        key = env_key(spec.key_var)
        if key is None:
            raise LLMError(f"{spec.key_var} is not set", kind="client", retryable=False)
        self._client = anthropic.AsyncAnthropic(api_key=key, max_retries=0, timeout=timeout_s)
        # Newer SDKs (and models) dropped sampling parameters: send a temperature only where accepted.
        self._takes_temperature = "temperature" in inspect.signature(self._client.messages.create).parameters

    async def chat(self, request: ChatRequest, timeout_s: float) -> ChatResult:
        started = time.monotonic()
        extra: dict[str, Any] = {"temperature": request.temperature} if self._takes_temperature else {}
        try:
            resp = await self._client.messages.create(
                model=self.spec.model,
                system=request.system,
                # the SDK's MessageParam is a union of TypedDicts; ours are plain {"role", "content": str} dicts
                messages=request.messages,  # type: ignore[arg-type]
                max_tokens=request.max_tokens,
                timeout=timeout_s,
                **extra,
            )
        except anthropic.AnthropicError as exc:
            raise _convert(exc, anthropic) from None
        text = "".join(getattr(b, "text", "") for b in (resp.content or []) if getattr(b, "type", "") == "text")
        usage = resp.usage
        return ChatResult(
            text=text,
            input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
            output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
            stop_reason=str(resp.stop_reason or ""),
            latency_s=time.monotonic() - started,
        )

    async def close(self) -> None:
        await self._client.close()


def _reasoning_model(model: str) -> bool:
    return model.startswith(("gpt-5", "o1", "o3", "o4"))


class OpenAIChat:
    """Chat Completions through `openai.AsyncOpenAI`: api.openai.com (or OPENAI_BASE_URL), or an
    OpenAI-compatible server (vLLM, Ollama, LM Studio) at the model string's base URL."""

    def __init__(self, spec: ModelSpec, *, timeout_s: float = 180.0):
        self.spec = spec
        key = env_key(spec.key_var)
        if key is None and not spec.local:
            raise LLMError(f"{spec.key_var} is not set", kind="client", retryable=False)
        kwargs: dict[str, Any] = {"api_key": key or COMPAT_PLACEHOLDER_KEY, "max_retries": 0, "timeout": timeout_s}
        if spec.local:
            kwargs["base_url"] = spec.base_url
        self._client = openai.AsyncOpenAI(**kwargs)

    def _params(self, request: ChatRequest) -> dict[str, Any]:
        messages = [{"role": "system", "content": request.system}] + list(request.messages)
        params: dict[str, Any] = {"model": self.spec.model, "messages": messages}
        if not self.spec.local and _reasoning_model(self.spec.model):
            params["max_completion_tokens"] = request.max_tokens  # these models take no temperature
        else:
            params["max_tokens"] = request.max_tokens
            params["temperature"] = request.temperature
        return params

    async def chat(self, request: ChatRequest, timeout_s: float) -> ChatResult:
        started = time.monotonic()
        try:
            resp = await self._client.chat.completions.create(**self._params(request), timeout=timeout_s)
        except openai.OpenAIError as exc:
            raise _convert(exc, openai) from None
        if not resp.choices:
            raise LLMError("the answer has no choices", kind="answer", retryable=True)
        choice = resp.choices[0]
        text = choice.message.content or ""
        usage = resp.usage
        if usage is not None:
            tin, tout = int(usage.prompt_tokens or 0), int(usage.completion_tokens or 0)
        else:  # some local servers send no usage: estimate
            tin, tout = estimate_tokens(request.prompt_chars()), estimate_tokens(len(text))
        return ChatResult(
            text=text,
            input_tokens=tin,
            output_tokens=tout,
            stop_reason=str(choice.finish_reason or ""),
            latency_s=time.monotonic() - started,
        )

    async def embed(self, texts: list[str], timeout_s: float) -> tuple[list[list[float]], int]:
        """Embeddings (`/embeddings`) and the input tokens they used."""
        try:
            resp = await self._client.embeddings.create(model=self.spec.model, input=texts, timeout=timeout_s)
        except openai.OpenAIError as exc:
            raise _convert(exc, openai) from None
        vectors = [list(d.embedding) for d in sorted(resp.data, key=lambda d: d.index)]
        tokens = int(getattr(resp.usage, "prompt_tokens", 0) or 0) if resp.usage else 0
        return vectors, tokens

    async def close(self) -> None:
        await self._client.close()


def make_client(spec: ModelSpec, *, timeout_s: float = 180.0) -> AnthropicChat | OpenAIChat:
    if spec.provider == "anthropic":
        return AnthropicChat(spec, timeout_s=timeout_s)
    return OpenAIChat(spec, timeout_s=timeout_s)
