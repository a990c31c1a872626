"""Dataflow of the repeated region in program order, and the overlap opportunities it offers:
producer -> collective -> consumer chains, ranked by the bytes the collective moves, each with what the
design space offers for it."""

from __future__ import annotations

from . import api
from .evaluate import evaluate_text

OPTIONS_MOVE = [
    {
        "design": "lsa_push",
        "what": "the producer kernel stores finished tiles straight into the peers' NCCL windows "
        "(ncclGetPeerPointer) and raises a per-chunk flag; the consumer waits on flags",
    },
    {
        "design": "copy_engine",
        "what": "a copy-engine copy per finished chunk on a second stream, started when the "
        "producer has counted the chunk's tiles",
    },
    {
        "design": "fused",
        "what": "one persistent kernel computes and pushes; communication overlaps the rest of the computation",
    },
]
OPTIONS_REDUCE = [
    {
        "design": "chunked_stream",
        "what": "split the reduction into chunks on a second stream so chunk i is "
        "reduced while the producer computes chunk i+1",
    },
    {
        "design": "lsa_reduce",
        "what": "the producer writes into its NCCL window; a reduce kernel pulls the peers' "
        "chunks over LSA as their flags arrive",
    },
    {
        "design": "fused",
        "what": "the consumer kernel reads the peers' partial results over LSA and reduces them "
        "on the fly, with no separate collective",
    },
]


def comm_steps(prog) -> list[dict]:
    """The region's communication steps: one per collective, or one per ncclGroupStart/End bracket."""
    steps: list[dict] = []
    by_group: dict[str, dict] = {}
    for op in prog.ops:
        if not op.in_region or op.kind not in ("collective", "p2p"):
            continue
        g = op.detail.get("group")
        if g is not None and g in by_group:
            by_group[g]["ops"].append(op)
            continue
        step = {"id": g or op.id, "ops": [op]}
        steps.append(step)
        if g is not None:
            by_group[g] = step
    return steps


def _step_name(step) -> str:
    names = sorted({o.name for o in step["ops"]})
    return "+".join(names) if len(step["ops"]) == 1 else f"group({'+'.join(names)})"


def step_bytes(prog, step) -> tuple[str, int | None]:
    env = {p["name"]: p["default"] for p in prog.params}
    terms: list[str] = []
    total: int | None = 0
    for op in step["ops"]:
        if op.name == "ncclRecv":
            continue  # bytes moved are counted once, at the sender
        count, size = op.detail.get("count"), api.NCCL_DTYPE_BYTES.get(op.detail.get("dtype") or "")
        terms.append(f"({count}) * {size}" if size else f"({count}) * sizeof({op.detail.get('dtype')})")
        v = evaluate_text(count, env) if count else None
        if v is None or size is None or _inside_inner_loop(prog, op):
            total = None
        elif total is not None:
            total += v * size
    return " + ".join(terms), total


def _inside_inner_loop(prog, op) -> bool:
    n = op.node.parent
    while n is not None and n != prog.region_node:
        if n.type in ("for_statement", "while_statement", "do_statement"):
            return True
        n = n.parent
    return False


def dataflow(prog) -> list[dict]:
    out = []
    for op in prog.ops:
        if op.in_region and op.kind in ("kernel", "collective", "p2p", "memcpy", "memset"):
            out.append(
                {
                    "op": op.id,
                    "kind": op.kind,
                    "name": op.name,
                    "at": op.at,
                    "reads": sorted(set(op.reads)),
                    "writes": sorted(set(op.writes)),
                }
            )
    return out


def opportunities(prog) -> list[dict]:
    region = [o for o in prog.ops if o.in_region]
    position = {id(o): i for i, o in enumerate(region)}
    found = []
    for step in comm_steps(prog):
        first, last = step["ops"][0], step["ops"][-1]
        reads = {b for o in step["ops"] for b in o.reads}
        writes = {b for o in step["ops"] for b in o.writes}
        i0, i1 = position[id(first)], position[id(last)]
        producer = next((o for o in reversed(region[:i0]) if o.kind == "kernel" and reads & set(o.writes)), None)
        consumer = next((o for o in region[i1 + 1 :] if o.kind == "kernel" and writes & set(o.reads)), None)
        if producer is None and consumer is None:
            continue
        expr, value = step_bytes(prog, step)
        moves = all(api.NCCL_COMM[o.name]["moves"] for o in step["ops"])
        found.append(
            {
                "producer": producer.name if producer else None,
                "producer_at": producer.at if producer else None,
                "collective": _step_name(step),
                "collective_at": first.at,
                "consumer": consumer.name if consumer else None,
                "consumer_at": consumer.at if consumer else None,
                "buffers": {"sent": sorted(reads), "received": sorted(writes)},
                "bytes": expr,
                "bytes_value": value,
                "pattern": "data movement" if moves else "reduction",
                "options": OPTIONS_MOVE if moves else OPTIONS_REDUCE,
            }
        )
    found.sort(key=lambda o: (-(o["bytes_value"] or -1), o["collective_at"]))
    for i, o in enumerate(found, 1):
        o["rank"] = i
    return found
