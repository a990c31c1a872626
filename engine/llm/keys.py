"""API keys: read from the environment only, and scrubbed from every text cuco keeps or shows.

A key is never stored, logged, put in a prompt, an exception message or a job's environment.
`redact` replaces the value of every key variable present in the environment with a placeholder;
the audit log, llm_calls errors and the exceptions this package raises all pass through it.
"""

from __future__ import annotations

import os
import re
from typing import Mapping

KEY_VARS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CUCO_OPENAI_COMPAT_KEY", "CUCO_EMBEDDING_KEY")
REDACTED = "[REDACTED]"
_KEYLIKE = re.compile(r"\b(sk-(?:ant-)?[A-Za-z0-9_\-]{8,})")
MIN_SECRET_LEN = 6   # shorter values would redact ordinary words


def is_secret_var(name: str) -> bool:
    """Variables a job must never inherit: the known key variables and any *_API_KEY / *_TOKEN."""
    upper = name.upper()
    return upper in KEY_VARS or upper.endswith(("_API_KEY", "_SECRET", "_TOKEN", "_SECRET_KEY"))


def env_key(name: str, env: Mapping[str, str] | None = None) -> str | None:
    value = (os.environ if env is None else env).get(name, "").strip()
    return value or None


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    env = os.environ if env is None else env
    values = [v for k, v in env.items() if is_secret_var(k) and len(v.strip()) >= MIN_SECRET_LEN]
    return sorted(set(values), key=len, reverse=True)


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """`text` with every key value from the environment, and anything shaped like an API key, removed."""
    if not text:
        return text
    for value in secret_values(env):
        text = text.replace(value, REDACTED)
    return _KEYLIKE.sub(REDACTED, text)


def scrub_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of an environment without key variables (for anything that starts a process)."""
    return {k: v for k, v in env.items() if not is_secret_var(k)}
