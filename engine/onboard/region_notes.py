"""What the region `cuco analyze` picked cannot take over as it is, each with its place and what to do: macros it
does not expand, template kernels, launches through a pointer, the loop variable used inside, work off the timed
stream, allocation or MPI in the region, carried buffers, element types and sizes the harness cannot fill."""

from __future__ import annotations

from . import api
from .model import Op, Program, Unresolved, Var
from .source import SourceFile, identifiers, names_in


def region_notes(
    prog: Program, macros: dict, kernels: dict, ops: list[Op], vars_: dict[str, Var], region_src: SourceFile
) -> list[Unresolved]:
    """What the workload's region cannot take over as it is, each with its place."""
    unresolved: list[Unresolved] = []
    region, region_node = prog.region, prog.region_node
    if region is None or region_node is None:
        return unresolved
    body = region_node.child_by_field_name("body")
    user_macros = {n: sn for n, sn in macros.items() if n not in prog.check_macros}
    uses = [(names_in(b.size), b.at) for b in prog.buffers.values() if b.role != "unused"]
    uses.append(([i.text.decode() for i in region_src.nodes("identifier", body)], region["at"]))
    seen_macros: set[str] = set()
    for names, at in uses:
        for name in sorted(set(names) & set(user_macros) - seen_macros):
            seen_macros.add(name)
            msrc, mnode = user_macros[name]
            unresolved.append(
                Unresolved(
                    at,
                    f"macro {name} (defined at {msrc.at(mnode)}) is used here",
                    "the analysis does not expand macros: values that depend on it are not evaluated",
                )
            )
    for op in ops:
        if not op.in_region:
            continue
        if (
            op.kind == "kernel"
            and op.name in kernels
            and kernels[op.name][1].parent is not None
            and kernels[op.name][1].parent.type == "template_declaration"
        ):
            unresolved.append(
                Unresolved(
                    op.at,
                    f"kernel {op.name} is a template",
                    "its element types come from the launch's arguments; what it "
                    "reads and writes is taken from its parameters",
                )
            )
        if op.kind == "launch_api":
            unresolved.append(
                Unresolved(
                    op.at,
                    f"a kernel launched through {op.name}",
                    "the analysis does not follow the kernel behind the pointer; launch it with <<<...>>>",
                )
            )
    var = region.get("loop_variable")
    body = region_node.child_by_field_name("body")
    if var and body is not None and any(i.text.decode() == var for i in identifiers(body)):
        unresolved.append(
            Unresolved(
                region["at"],
                f"the loop variable {var} is used inside the region",
                "each call of the workload takes the harness's call index (ctx->iteration: 0, 1, 2, ...; "
                "the check's reference run the same) as its value, within the loop's range",
            )
        )
    for op in ops:
        if not op.in_region:
            continue
        if op.kind == "kernel" and not op.detail.get("stream"):
            unresolved.append(
                Unresolved(
                    op.at,
                    f"kernel {op.name} is launched on the default stream",
                    "the workload launches it on the timed stream",
                )
            )
        if (
            op.kind in ("collective", "p2p", "kernel")
            and op.detail.get("stream")
            and op.detail.get("stream") != prog.timed_stream
        ):
            unresolved.append(
                Unresolved(
                    op.at,
                    f"{op.name} runs on stream {op.detail['stream']}, not on {prog.timed_stream}",
                    "join that stream to the timed stream (an event) before run() returns",
                )
            )
        if op.kind == "alloc" or op.name in ("cudaFree", "ncclMemFree"):
            unresolved.append(
                Unresolved(
                    op.at,
                    f"{op.name} inside the repeated region: every iteration allocates or frees",
                    "an overlap opportunity of its own: allocate once, outside the region",
                )
            )
        if op.kind == "mpi":
            unresolved.append(
                Unresolved(
                    op.at,
                    f"{op.name} inside the repeated region",
                    "the harness owns MPI: a host collective (MPI_Allreduce, MPI_Reduce, "
                    "MPI_Bcast, MPI_Barrier) runs as the harness's host collective in the "
                    "workload, other MPI calls are dropped",
                )
            )
    for b in prog.buffers.values():
        if b.role == "carried":
            unresolved.append(
                Unresolved(
                    b.at,
                    f"buffer {b.name} is read before it is written in the region "
                    "(its value is carried from one iteration to the next)",
                    "the workload treats it as an output and gives every call the same "
                    "starting value; check that this is what one iteration means",
                )
            )
        if b.elem_type == "unknown" or b.elem_type not in api.ELEM_BYTES and b.role != "unused":
            unresolved.append(
                Unresolved(
                    b.at,
                    f"element type of buffer {b.name} ({b.elem_type}) is not one the harness fills and compares",
                    "declare it as a float, half, bf16 or integer pointer",
                )
            )
    param_names = {p["name"] for p in prog.params}
    for b in prog.buffers.values():
        if b.role == "unused":
            continue
        deps = set(names_in(b.size))
        if evaluate_size_possible(deps, vars_, param_names, prog.ranks) is False:
            unresolved.append(
                Unresolved(
                    b.at,
                    f"the size of buffer {b.name} ({b.size}) is known only at run time",
                    "give it a size the program computes from constants",
                )
            )
    return unresolved


def evaluate_size_possible(deps, vars_, params, ranks) -> bool:
    rank_vars = {ranks.get("rank"), ranks.get("nranks")}
    for d in deps:
        if d in params or d in rank_vars or d in vars_ and vars_[d].init is not None:
            continue
        if d not in vars_:
            continue  # a type name (sizeof(float)) or a file-scope constant
        return False
    return True
