"""GPU discovery with nvidia-smi (local); the SSH executor runs the same query on a node."""

from __future__ import annotations

import shutil
import subprocess

NVIDIA_SMI_QUERY = ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"]


def parse_gpu_indices(text: str) -> list[int]:
    ids = []
    for line in text.splitlines():
        line = line.strip()
        if line.isdigit():
            ids.append(int(line))
    return ids


def detect_local_gpus() -> list[int]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(NVIDIA_SMI_QUERY, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return parse_gpu_indices(out.stdout) if out.returncode == 0 else []
