"""What `cuco analyze` records of each call it follows (`Op.detail`)."""

from __future__ import annotations

from . import api
from .model import Op
from .node_text import node_text, nth_arg, text_or_none
from .source import call_args, kernel_config


def describe(op: Op) -> None:
    """The call's details, by kind: a launch's grid, block, stream and arguments, a collective's buffers, count,
    type, communicator and stream, a copy's ends and size."""
    n, t = op.node, text_or_none
    if op.kind == "kernel" and op.via is not None:
        args = [node_text(a) for a in call_args(n)]
        launches = op.via.config_for(args)
        first = launches[0]
        op.detail = {
            "grid": first["grid"],
            "block": first["block"],
            "shared_bytes": first["shared_bytes"],
            "stream": first["stream"],
            "args": args,
            "via": {"wrapper": op.via.name, "at": op.via.at, "launches": launches},
        }
    elif op.kind == "kernel":
        cfg = [c for c in kernel_config(n).named_children if c.type != "comment"]
        args = call_args(n)
        op.detail = {
            "grid": t(cfg[0]) if cfg else None,
            "block": t(cfg[1]) if len(cfg) > 1 else None,
            "shared_bytes": t(cfg[2]) if len(cfg) > 2 else None,
            "stream": t(cfg[3]) if len(cfg) > 3 else None,
            "args": [t(a) for a in args],
        }
    elif op.kind in ("collective", "p2p"):
        spec = api.NCCL_COMM[op.name]
        d = {k: t(nth_arg(n, spec[k])) for k in ("send", "recv", "count", "dtype", "redop", "comm", "stream")}
        if spec["peer"] is not None:
            d["peer" if op.kind == "p2p" else "root"] = t(nth_arg(n, spec["peer"]))
        if op.name == "ncclBcast":
            d["send"] = d["recv"]
        d["group"] = None
        op.detail = {k: v for k, v in d.items() if v is not None or k == "group"}
    elif op.kind == "memcpy":
        a = call_args(n)
        op.detail = {
            "dst": t(a[0]) if a else None,
            "src": t(a[api.MEMCPY[op.name][1]]) if len(a) > 1 else None,
            "bytes": t(a[2]) if len(a) > 2 else None,
            "direction": next((t(x) for x in a if node_text(x).startswith("cudaMemcpy")), None),
        }
    elif op.kind == "memset":
        a = call_args(n)
        op.detail = {
            "dst": t(a[0]) if a else None,
            "value": t(a[1]) if len(a) > 1 else None,
            "bytes": t(a[2]) if len(a) > 2 else None,
        }
    elif op.kind in (
        "event",
        "sync",
        "stream",
        "device",
        "mpi",
        "comm_init",
        "free",
        "group",
        "alloc",
        "graph_launch",
    ):
        op.detail = {"args": [t(a) for a in call_args(n)]}
