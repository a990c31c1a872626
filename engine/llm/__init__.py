"""LLM clients and everything around a call: model strings, keys, pricing, budget, retries, the audit
log, prompts, answer parsing, novelty, the UCB bandit over models and the meta-summarizer.

Never imports textual or cuco_tui. See docs/llm.md.
"""

from .budget import Budget
from .clients import ChatRequest, ChatResult
from .errors import LLMError
from .models import ModelSpec, parse_model, parse_models
from .pricing import Pricing
from .retry import RetryPolicy
from .service import LLMService

__all__ = ["Budget", "ChatRequest", "ChatResult", "LLMError", "LLMService", "ModelSpec", "Pricing",
           "RetryPolicy", "parse_model", "parse_models"]
