"""LLM clients and everything around a call: model strings, keys, pricing, budget, retries, the audit
log, prompts, answer parsing, novelty, the UCB bandit over models and the meta-summarizer.

Never imports textual or cuco_tui. See docs/llm.md. The names below load on first use: `engine.llm.keys`
is imported first thing by every cuco process, and must not pull the HTTP clients in with it.
"""

from __future__ import annotations

import importlib

_WHERE = {"Budget": "budget", "ChatRequest": "clients", "ChatResult": "clients", "LLMError": "errors",
          "LLMService": "service", "ModelSpec": "models", "Pricing": "pricing", "RetryPolicy": "retry",
          "parse_model": "models", "parse_models": "models"}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
