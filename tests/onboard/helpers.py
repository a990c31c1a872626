"""What the onboarding tests share: the GPU count of this machine, and the project's test LLM server."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "llm"))
from fake_llm import FakeLLMServer, Reply  # noqa: E402,F401  (re-exported)


def gpus() -> int:
    """NVIDIA GPUs nvidia-smi lists here (0 without nvidia-smi)."""
    if shutil.which("nvidia-smi") is None:
        return 0
    r = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(1 for line in r.stdout.splitlines() if line.startswith("GPU "))


def fenced(src: str) -> str:
    return f"Here is the program.\n```cpp\n{src}```\n"
