"""The design space `cuco init` derives from the analysis: a backend per communication step of the
repeated region (what the step may become: host NCCL, LSA stores, copy-engine copies, ...), placement,
sync and issuer as the shipped CUDA workloads name them, and the chunk / CTA / priority knobs."""

from __future__ import annotations

from . import api
from .opportunities import comm_steps

BACKENDS_MOVE = ["host_nccl", "lsa", "copy_engine", "hybrid"]
BACKENDS_REDUCE = ["host_nccl", "lsa", "chunked_host"]
COMMON = {
    "placement": {"values": ["sequential", "stream_overlap", "split_kernels", "fused"], "default": "sequential"},
    "sync": {"values": ["stream", "barrier", "chunk_flags", "tile_counters"], "default": "stream"},
    "issuer": {"values": ["host", "thread", "warp", "cta"], "default": "host"},
}
KNOBS = {
    "chunks": {"values": [1, 2, 4, 8, 16, 32], "default": 1, "knob": True, "line": "kChunks"},
    "comm_ctas": {"values": [4, 8, 16, 32, 64], "default": 16, "knob": True, "line": "kCommCtas"},
    "comm_priority": {"values": [0, 1], "default": 1, "knob": True, "line": "kCommPriority"},
}


def backend_dims(prog) -> dict[str, dict]:
    steps = comm_steps(prog)
    dims = {}
    for i, step in enumerate(steps, 1):
        moves = all(api.NCCL_COMM[o.name]["moves"] for o in step["ops"])
        name = "backend" if len(steps) == 1 else f"backend_{i}"
        dims[name] = {"values": list(BACKENDS_MOVE if moves else BACKENDS_REDUCE), "default": "host_nccl"}
    return dims or {"backend": {"values": list(BACKENDS_MOVE), "default": "host_nccl"}}


def design_space(prog) -> dict:
    backends = backend_dims(prog)
    dims = dict(backends)
    dims.update({k: dict(v) for k, v in COMMON.items()})
    dims.update({k: {kk: vv for kk, vv in v.items() if kk != "line"} for k, v in KNOBS.items()})
    return {"dimensions": dims, "archive": [next(iter(backends)), "placement", "sync"]}


def seed_annotation(prog) -> str:
    point = {k: v["default"] for k, v in backend_dims(prog).items()}
    point.update({k: v["default"] for k, v in COMMON.items()})
    return "// cuco:design " + " ".join(f"{k}={v}" for k, v in point.items())


def seed_knob_lines() -> list[str]:
    return [f"constexpr int {v['line']} = {v['default']};   // cuco:knob {k}" for k, v in KNOBS.items()]
