"""A program whose main() only sets up (MPI, the communicator) and calls one helper that holds everything
else, the timed section included (CUCo's MoE seed: `run_moe_alltoall(rank, nranks, comm)`). `cuco init`
reads that helper as the program's main(): its parameters are what main() passes it (the rank, the rank
count, the communicator), which the harness gives; its own statements before the region are the set-up.

The helper is read only when main() calls it once, at its top level (not in a loop), and the region is in
the helper's own body: anything else keeps the refusal."""

from __future__ import annotations

from .analyze import analyze_sources
from .model import Unresolved, Var
from .source import call_args, call_name, find_function, function_declarator


def analyze_helper_as_main(prog, region: str | None = None, entry: str | None = None, assume: dict | None = None):
    """The program as `cuco init` writes it when its region is in a helper main() calls once; the
    program itself otherwise."""
    if not prog.init_blockers or prog.region_node is None:
        return prog
    helper = _the_helper(prog)
    if helper is None:
        return prog
    name, call, fn = helper
    one = analyze_sources(prog.sources, region, entry, assume, main_name=name)
    if one.region_node is None or one.init_blockers:
        return prog
    bound = _bind(prog, call, fn)
    params = _parameters(prog, fn)
    ranks = dict(one.ranks)  # what the helper finds itself, else the parameters main() binds
    for role in ("rank", "nranks"):
        caller = prog.ranks.get(role)
        passed = next((p for p, a in bound.items() if a == caller), None) if caller else None
        if passed is not None:
            ranks[role], ranks["source"] = passed, prog.ranks.get("source")
    comm = next(({**c, "name": p} for c in prog.communicators for p, a in bound.items() if a == c["name"]), None)
    comms = one.communicators or ([comm] if comm else [])
    if None in (ranks.get("rank"), ranks.get("nranks")) or not comms:
        return prog
    one.ranks, one.communicators = ranks, comms
    for v in params:
        one.vars.setdefault(v.name, v)
    one.preprocessing = prog.preprocessing
    one.unresolved.append(
        Unresolved(
            prog.main_src.at(call),
            f"main() calls {name}(), which holds the timed section",
            f"the workload reads {name}() as the program's main(): "
            f"{', '.join(f'{p} = {a}' for p, a in bound.items())} from the harness",
        )
    )
    return one


def _the_helper(prog):
    """(name, the call in main(), the definition) of the one helper main() calls at its top level that
    holds the region."""
    src, body = prog.main_src, prog.main.child_by_field_name("body")
    for st in body.named_children:
        if st.type != "expression_statement":  # called once, at main()'s top level
            continue
        for call in src.nodes("call_expression", st):
            name = call_name(call, src)
            fn = find_function(prog.sources, name)
            if (
                fn is not None
                and fn[0] is prog.main_src
                and fn[1].start_byte <= prog.region_node.start_byte < fn[1].end_byte
            ):
                return name, call, fn[1]
    return None


def _parameter_nodes(fn):
    d = function_declarator(fn)
    plist = d.child_by_field_name("parameters") if d is not None else None
    return [p for p in (plist.named_children if plist is not None else []) if p.type == "parameter_declaration"]


def _param_name(src, p) -> tuple[str, bool]:
    d = p.child_by_field_name("declarator")
    pointer = False
    while d is not None and d.type not in ("identifier",):
        pointer = pointer or d.type == "pointer_declarator"
        d = d.child_by_field_name("declarator")
    return (src.text(d) if d is not None else ""), pointer


def _bind(prog, call, fn) -> dict[str, str]:
    src = prog.main_src
    names = [_param_name(src, p)[0] for p in _parameter_nodes(fn)]
    return {n: src.text(a) for n, a in zip(names, call_args(call)) if n}


def _parameters(prog, fn) -> list[Var]:
    """The helper's parameters as main()'s locals: members of the workload's Program, set in setup()."""
    src, out = prog.main_src, []
    for p in _parameter_nodes(fn):
        name, pointer = _param_name(src, p)
        base = src.text(p.child_by_field_name("type"))
        if name:
            out.append(
                Var(
                    name,
                    base + ("*" if pointer else ""),
                    base,
                    pointer,
                    None,
                    None,
                    p,
                    p.start_point[0] + 1,
                    True,
                    pos=p.start_byte,
                )
            )
    return out
