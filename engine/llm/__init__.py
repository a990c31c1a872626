"""LLM clients and everything around a call: model strings, keys, pricing, budget, retries, the audit
log, prompts, answer parsing, novelty, the UCB bandit over models and the meta-summarizer.

Never imports textual or cuco_tui. See docs/llm.md. The names below load on first use: `engine.llm.keys`
is imported first thing by every cuco process, and must not pull the HTTP clients in with it.
"""

from importlib import import_module
from typing import Any

# Loaded on first use: a search with the design-space mutator needs no LLM SDK, and GPU nodes and
# minimal installs may not have one (importing the engine must not import anthropic or openai).
_HOMES = {
    "Budget": "budget",
    "ChatRequest": "clients",
    "ChatResult": "clients",
    "LLMError": "errors",
    "ModelSpec": "models",
    "parse_model": "models",
    "parse_models": "models",
    "Pricing": "pricing",
    "RetryPolicy": "retry",
    "LLMService": "service",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_HOMES[name]}", __name__), name)
