"""Whether this machine can compile what `cuco init` writes: nvcc on PATH and NCCL's headers installed."""

from __future__ import annotations

import importlib.util
import shutil

import pytest


def nccl_headers() -> bool:
    try:
        return importlib.util.find_spec("nvidia.nccl") is not None
    except ModuleNotFoundError:
        return False


def compiles_with_nccl(without_nvcc: str):
    """Skip the test, with the reason printed, unless nvcc and the NCCL headers are both here."""

    def marked(test):
        test = pytest.mark.skipif(not nccl_headers(), reason="the NCCL headers (nvidia-nccl-cu13) are not installed")(
            test
        )
        return pytest.mark.skipif(shutil.which("nvcc") is None, reason=f"nvcc is not on PATH: {without_nvcc}")(test)

    return marked
