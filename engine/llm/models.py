"""Model strings: `anthropic:MODEL`, `openai:MODEL`, `openai-compat:MODEL@http://HOST:PORT/v1`.

A model string never carries a key; keys come from the environment (see keys.py). The string is also
the mutator's name (`llm:<model string>`), so URLs with credentials or query strings are refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from remote.errors import InputError

from .keys import env_key

PROVIDERS = ("anthropic", "openai", "openai-compat")
KEY_VAR = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY", "openai-compat": "CUCO_OPENAI_COMPAT_KEY"}
_MODEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/+\-]*$")
FIELD = "--llm"


@dataclass(frozen=True)
class ModelSpec:
    provider: str  # anthropic | openai | openai-compat
    model: str  # the provider's model id
    base_url: str | None  # openai-compat only (anthropic/openai: the SDK's default or *_BASE_URL)

    @property
    def name(self) -> str:
        """The model string, as the user wrote it (no key is ever part of it)."""
        if self.provider == "openai-compat":
            return f"{self.provider}:{self.model}@{self.base_url}"
        return f"{self.provider}:{self.model}"

    @property
    def key_var(self) -> str:
        return KEY_VAR[self.provider]

    @property
    def local(self) -> bool:
        return self.provider == "openai-compat"

    def __str__(self) -> str:
        return self.name


def _bad(text: str, message: str) -> InputError:
    return InputError(FIELD, FIELD, f"{text!r}: {message}")


def parse_model(text: str) -> ModelSpec:
    """Parse a model string; an `InputError` (file and field `--llm`) says what is wrong."""
    text = (text or "").strip()
    if ":" not in text:
        raise _bad(
            text,
            "expected PROVIDER:MODEL with PROVIDER one of "
            + ", ".join(PROVIDERS)
            + " (e.g. anthropic:claude-sonnet-4-6, openai:gpt-5, openai-compat:MODEL@http://127.0.0.1:8000/v1)",
        )
    provider, rest = text.split(":", 1)
    provider = provider.strip().lower()
    if provider not in PROVIDERS:
        raise _bad(text, f"unknown provider {provider!r} (known: {', '.join(PROVIDERS)})")
    base_url = None
    if provider == "openai-compat":
        m = re.search(r"@(https?://)", rest)
        if not m:
            raise _bad(text, "openai-compat needs a base URL: openai-compat:MODEL@http://HOST:PORT/v1")
        rest, base_url = rest[: m.start()], rest[m.start() + 1 :]
        parts = urlsplit(base_url)
        if not parts.hostname:
            raise _bad(text, f"base URL {base_url!r} has no host")
        if parts.username or parts.password or "@" in parts.netloc:
            raise _bad(text, "the base URL must not carry credentials; put a key in CUCO_OPENAI_COMPAT_KEY")
        if parts.query or parts.fragment:
            raise _bad(text, "the base URL must not have a query string or fragment")
        base_url = base_url.rstrip("/")
    elif "@" in rest:
        raise _bad(
            text,
            f"{provider} takes no base URL in the model string; set "
            f"{provider.upper()}_BASE_URL in the environment instead",
        )
    model = rest.strip()
    if not model or not _MODEL_RE.match(model):
        raise _bad(text, "missing or malformed model name")
    return ModelSpec(provider, model, base_url)


def parse_models(texts: list[str], *, require_keys: bool = True) -> list[ModelSpec]:
    """Parse several `--llm` values (duplicates are dropped); with `require_keys`, a provider whose key
    variable is not set is an `InputError` naming the variable (never its value)."""
    if not texts:
        raise InputError(FIELD, FIELD, "no model given (e.g. --llm anthropic:claude-sonnet-4-6)")
    specs: list[ModelSpec] = []
    for text in texts:
        spec = parse_model(text)
        if spec in specs:
            continue
        if require_keys and not spec.local and env_key(spec.key_var) is None:
            raise _bad(
                text,
                f"{spec.key_var} is not set; export it in the environment that runs cuco "
                "(keys are read from the environment only)",
            )
        specs.append(spec)
    return specs
