"""The analysis as JSON (`cuco analyze --json`, schema `cuco-analysis/1`, documented in
docs/bring-your-own-program.md) and as a rich tree for the terminal."""

from __future__ import annotations

SCHEMA = "cuco-analysis/1"


def to_json(prog) -> dict:
    ops = prog.ops
    data = {
        "schema": SCHEMA,
        "files": list(prog.files),
        "preprocessing": prog.preprocessing,
        "ranks": prog.ranks,
        "communicators": prog.communicators,
        "nccl_calls": [_op(o) for o in ops if o.kind in ("collective", "p2p", "group")],
        "kernel_launches": [_op(o) for o in ops if o.kind == "kernel"],
        "graph_launches": [_op(o) for o in ops if o.kind == "graph_launch"],
        "memory_ops": [_op(o) for o in ops if o.kind in ("memcpy", "memset")],
        "events": [_op(o) for o in ops if o.kind == "event"],
        "synchronizations": [_op(o) for o in ops if o.kind == "sync"],
        "mpi_calls": [_op(o) for o in ops if o.kind == "mpi"],
        "buffers": [
            {
                "name": b.name,
                "at": b.at,
                "alloc": b.alloc,
                "elem_type": b.elem_type,
                "bytes": b.size,
                "count": b.count,
                "role": b.role,
                "written_by": b.writers,
                "read_by": b.readers,
            }
            for b in prog.buffers.values()
        ],
        "calls_followed": prog.helper_calls,
        "region": prog.region,
        "timed_stream": prog.timed_stream,
        "params": prog.params,
        "check_macros": [m for m in prog.check_macros if m not in prog.check_functions],
        "dataflow": prog.dataflow,
        "opportunities": prog.opportunities,
        "unresolved": [u.as_json() for u in prog.unresolved],
        "init_blockers": prog.init_blockers,
    }
    if prog.check_functions:  # keys only where they apply: the analysis of other programs is unchanged
        data["check_functions"] = prog.check_functions
    if prog.dispatches:
        data["dispatches"] = [d.as_json() for d in prog.dispatches]
    return data


def _op(o) -> dict:
    d = {"id": o.id, "name": o.name, "at": o.at, "in_region": o.in_region}
    if len(o.chain) > 1:  # reached through helper functions: the calls that lead here, from main()
        d["called_from"] = [src.at(n) for src, n in o.chain[:-1]]
    d.update(o.detail)
    return d


def render_tree(data: dict):
    """A rich Tree of the JSON analysis (the terminal view of the same facts)."""
    # rich only for this terminal view: the analysis itself is plain data
    from rich.markup import escape
    from rich.tree import Tree

    data = _escaped(data, escape)
    root = Tree(f"[bold]{', '.join(data['files'])}[/]")
    r = data["ranks"]
    comms = root.add(f"[bold]communicators[/] (ranks from {r['source']}, {r['ranks_per_process']} per process)")
    for c in data["communicators"]:
        comms.add(
            f"{c['name']}: {c['init']}(nranks={c.get('nranks')}, rank={c.get('rank')}) "
            f"id exchange: {c.get('id_exchange')}  [dim]{c['at']}[/]"
        )
    region = data["region"]
    if region:
        reg = root.add(
            f"[bold]repeated region[/]: {region['kind']} loop {region['at']}-{region['end'].rsplit(':', 1)[1]}"
            f"{' (timed with events)' if region['timed'] else ''}, {region['iterations']} iterations, "
            f"stream {data['timed_stream']}"
        )
        for step in data["dataflow"]:
            reads = ", ".join(step["reads"]) or "-"
            writes = ", ".join(step["writes"]) or "-"
            reg.add(f"{step['name']}  reads {reads} -> writes {writes}  [dim]{step['at']}[/]")
    bufs = root.add("[bold]buffers[/]")
    for b in data["buffers"]:
        bufs.add(
            f"{b['name']}: {b['elem_type']}[{b['count'] or b['bytes']}] ({b['role']}) {b['alloc']} [dim]{b['at']}[/]"
        )
    calls = root.add("[bold]NCCL calls[/]")
    for c in data["nccl_calls"]:
        if c["name"] in ("ncclGroupStart", "ncclGroupEnd"):
            calls.add(f"[dim]{c['name']} {c['at']}[/]")
            continue
        args = ", ".join(
            f"{k}={c[k]}" for k in ("send", "recv", "count", "dtype", "redop", "peer", "root") if c.get(k) is not None
        )
        calls.add(
            f"{c['name']}({args}) comm={c.get('comm')} stream={c.get('stream')}"
            f"{' (in region)' if c['in_region'] else ''}  [dim]{c['at']}[/]"
        )
    kern = root.add("[bold]kernel launches[/]")
    for k in data["kernel_launches"]:
        kern.add(
            f"{k['name']}<<<{k['grid']}, {k['block']}>>> stream={k['stream']} reads {k.get('reads')} "
            f"writes {k.get('writes')}{' (in region)' if k['in_region'] else ''}  [dim]{k['at']}[/]"
        )
    if data["params"]:
        params = root.add("[bold]size parameters[/] (become the workload's problem configs)")
        for p in data["params"]:
            params.add(f"{p['name']} = {p['default']}  [dim]{p['at']}[/]")
    opp = root.add("[bold]overlap opportunities[/] (ranked by bytes moved)")
    for o in data["opportunities"]:
        size = f"{o['bytes_value']:,} B" if o["bytes_value"] is not None else o["bytes"]
        node = opp.add(
            f"#{o['rank']} {o['producer'] or '-'} -> {o['collective']} -> {o['consumer'] or '-'}: "
            f"{size} ({o['pattern']})"
        )
        for option in o["options"]:
            node.add(f"{option['design']}: [dim]{option['what']}[/]")
    if data["unresolved"]:
        un = root.add("[bold yellow]not resolved[/] (the workload marks these; nothing is guessed)")
        for u in data["unresolved"]:
            un.add(f"{u['at']}: {u['what']} [dim]({u['hint']})[/]")
    return root


def _escaped(value, escape):
    """Source text may hold `[...]` (subscripts), which rich would read as markup."""
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, list):
        return [_escaped(v, escape) for v in value]
    if isinstance(value, dict):
        return {k: _escaped(v, escape) for k, v in value.items()}
    return value
