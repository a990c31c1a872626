"""API keys: read from the environment only, and scrubbed from every text cuco keeps or shows.

A key is never stored, logged, put in a prompt, an exception message or a job's environment.
`hold_keys` (called first thing by the `cuco` command and the engine daemon) moves every key variable
out of the process's environment into this module's memory, and blanks it in the environment block
the kernel shows as /proc/PID/environ: no child (a job, an editor, ssh) inherits it, and no process
that can read ours finds it there. `redact` replaces the value of every key (held, or still in the
environment) with a placeholder; stored stage logs, LLM feedback, the audit log, llm_calls errors and the
exceptions this package raises all pass through it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

KEY_VARS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CUCO_OPENAI_COMPAT_KEY", "CUCO_EMBEDDING_KEY")
REDACTED = "[REDACTED]"
_KEYLIKE = re.compile(r"\b(sk-(?:ant-)?[A-Za-z0-9_\-]{8,})")
MIN_SECRET_LEN = 6  # shorter values would redact ordinary words


def is_secret_var(name: str) -> bool:
    """Variables a job must never inherit: the known key variables and any *_API_KEY / *_TOKEN."""
    upper = name.upper()
    return upper in KEY_VARS or upper.endswith(("_API_KEY", "_SECRET", "_TOKEN", "_SECRET_KEY"))


# The keys this process holds, out of its environment. Process-wide on purpose: the environment it
# replaces is process-wide too, and every reader of a key goes through env_key.
_held: dict[str, str] = {}


def hold_keys(environ: dict | None = None) -> list[str]:
    """Move every key variable out of `environ` (os.environ) into this process's memory only, and blank
    its value in the kernel's copy of our initial environment. Returns the names held."""
    env = os.environ if environ is None else environ
    names = [k for k in list(env) if is_secret_var(k)]
    for name in names:
        _held[name] = env.pop(name)
    if environ is None and names:
        _blank_initial_environment(names)
    return names


def held_keys() -> dict[str, str]:
    """The keys held (for the engine daemon this process starts, which holds them in turn)."""
    return dict(_held)


def _blank_initial_environment(names: list[str]) -> None:
    """/proc/PID/environ shows the environment block the process started with, not os.environ: overwrite
    the values of `names` there (best effort; Linux only)."""
    try:
        stat = open("/proc/self/stat").read()
        fields = stat[stat.rindex(")") + 2 :].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50 and 51)
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            block = mem.read(end - start)
            for name in names:
                at = block.find(b"\0" + name.encode() + b"=")
                at = 0 if block.startswith(name.encode() + b"=") else (at + 1 if at >= 0 else -1)
                if at < 0:
                    continue
                value_at = at + len(name) + 1
                value_end = block.index(b"\0", value_at)
                mem.seek(start + value_at)
                mem.write(b"x" * (value_end - value_at))
    except (OSError, ValueError, IndexError):
        pass


def env_key(name: str, env: Mapping[str, str] | None = None) -> str | None:
    value = (_held.get(name) or os.environ.get(name, "") if env is None else env.get(name, "")).strip()
    return value or None


def secret_values(env: Mapping[str, str] | None = None) -> list[str]:
    env = {**os.environ, **_held} if env is None else env
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
