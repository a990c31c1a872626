"""The communicators of a host-driven program: how each is made (ncclCommInitRank, InitAll, a split), how its
unique id reaches the other ranks, where the rank comes from, and the stream the region communicates on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import api
from .model import Op, Unresolved, Var
from .node_text import plain_name, text_or_none
from .source import SourceFile, call_args, call_name, identifiers, walk


@dataclass(frozen=True)
class MainScope:
    """What the readers of main() look at: its file and body, every source, its variables and the functions."""

    src: SourceFile
    body: Any
    sources: list[SourceFile]
    vars: dict[str, Var]
    functions: dict


def communicators(ops: list[Op], unresolved: list[Unresolved], main: MainScope) -> tuple[list, dict]:
    """The program's communicators (how each is made, from which unique id) and where its ranks come from."""
    comms, ranks = [], {"source": "unknown", "rank": None, "nranks": None, "ranks_per_process": 1}
    exchange = id_exchange(main)
    for op in ops:
        if op.kind != "comm_init" or op.name == "ncclGetUniqueId":
            continue
        a = call_args(op.node)
        t = text_or_none
        entry: dict[str, Any] = {"name": plain_name(a[0]) if a else None, "init": op.name, "at": op.at}
        if op.name in ("ncclCommInitRank", "ncclCommInitRankConfig"):
            entry.update(
                nranks=t(a[1]) if len(a) > 1 else None,
                unique_id=plain_name(a[2]) if len(a) > 2 else None,
                rank=t(a[3]) if len(a) > 3 else None,
                id_exchange=exchange,
                ranks_per_process=1,
            )
            ranks.update(rank=entry["rank"], nranks=entry["nranks"], source=rank_source(main, entry["rank"]))
        elif op.name == "ncclCommInitAll":
            entry.update(
                nranks=t(a[1]) if len(a) > 1 else None,
                id_exchange="none (one process)",
                ranks_per_process=t(a[1]) if len(a) > 1 else None,
            )
            ranks.update(source="single process", nranks=entry["nranks"], ranks_per_process=entry["ranks_per_process"])
            unresolved.append(
                Unresolved(
                    op.at,
                    "ncclCommInitAll: several GPUs driven by one process",
                    "the harness runs one process per GPU; restructure to one rank per process (ncclCommInitRank)",
                )
            )
        else:
            entry.update(id_exchange=exchange)
            unresolved.append(
                Unresolved(
                    op.at,
                    f"{op.name}: a communicator derived at run time",
                    "the workload uses the harness's communicator of all ranks",
                )
            )
        comms.append(entry)
    return comms, ranks


def id_exchange(main: MainScope) -> str:
    """How the NCCL unique id reaches the other ranks: mpi_bcast, file, mpi, environment or unknown."""
    ids = [v.name for v in main.vars.values() if v.base_type == "ncclUniqueId"]
    if not ids:
        return "unknown"
    kinds = []
    for n in main.src.nodes("call_expression", main.body):
        name = call_name(n, main.src)
        if name in ("ncclGetUniqueId", "ncclCommInitRank", "ncclCommInitRankConfig") or name is None:
            continue
        if not any(main.src.text(i) in ids for a in call_args(n) for i in identifiers(a)):
            continue
        if name == "MPI_Bcast":
            kinds.append("mpi_bcast")
        elif name in api.FILE_IO or calls_any(main.functions, name, api.FILE_IO):
            kinds.append("file")
        elif name.startswith("MPI_"):
            kinds.append("mpi")
    if any("NCCL_COMM_ID" in s.text(n) for s in main.sources for n in s.nodes("string_literal")):
        kinds.append("environment")
    return kinds[0] if kinds else "unknown"


def calls_any(functions: dict, fn_name: str | None, callees: set) -> bool:
    """Whether the program's function `fn_name` calls one of `callees` directly."""
    f = functions.get(fn_name)
    if f is None:
        return False
    src, fn = f
    return any(call_name(n, src) in callees for n in src.nodes("call_expression", fn))


def rank_source(main: MainScope, rank_expr: str | None) -> str:
    """Where the rank comes from: mpi (MPI_Comm_rank), environment (getenv) or unknown."""
    if not rank_expr:
        return "unknown"
    for n in main.src.nodes("call_expression", main.body):
        if call_name(n, main.src) == "MPI_Comm_rank" and any(
            main.src.text(i) == rank_expr for a in call_args(n) for i in identifiers(a)
        ):
            return "mpi"
    var = main.vars.get(rank_expr)
    values = [var.init] if var is not None and var.init is not None else []
    for a in main.src.nodes("assignment_expression", main.body):  # `rank = atoi(getenv(...))`
        if text_or_none(a.child_by_field_name("left")) == rank_expr:
            values.append(a.child_by_field_name("right"))
    for value in values:
        for n in walk(value):
            if n.type == "call_expression":
                name = call_name(n, main.src)
                if name == "getenv" or calls_any(main.functions, name, {"getenv"}):
                    return "environment"
    return "unknown"


def timed_stream_of(ops: list[Op]) -> str | None:
    """The stream the region's communication runs on (the most used)."""
    streams = [op.detail.get("stream") for op in ops if op.in_region and op.kind in ("collective", "p2p")]
    if not any(streams):  # a region that replays graphs: the stream it launches them on
        streams = [
            (op.detail.get("args") or [None, None])[1:2][0] if len(op.detail.get("args") or []) > 1 else None
            for op in ops
            if op.in_region and op.kind == "graph_launch"
        ]
    streams = [s for s in streams if s]
    return max(set(streams), key=streams.count) if streams else None
