"""Per-config overlap efficiency of every candidate of a cuco run, read from its store (cuco.db).

    python tests/gpu/efficiency_table.py RUN.db [RUN2.db ...]

For each candidate that verified (its verify evaluation passed on every config and rank), and for each
bench config, prints the baseline and candidate ms, the speedup, the bound and the overlap efficiency
(T_base - T_cand) / (T_base - max(T_comp, T_comm)), with T_base, T_comp and T_comm taken from the same
benchmark job as T_cand. A candidate that beat that bound by more than its noise margin changed the compute
itself (split-K, a faster GEMM): its cell says "compute changed" with its own compute time (from its
profiled call's timeline, where it has one) instead of an efficiency above 1, as `cuco report` and the TUI
do (engine/evaluation/efficiency.py); for the worst-config column it counts as 1. Where the engine measured a
candidate more than once, each number is the mean over its benchmark evaluations. Ends with the best candidate per config and the candidate whose worst config is
best (the one to name when a single design point must hold everywhere). Candidates are named by their
store id, as `cuco report` names them (the seed is id 1).
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from statistics import mean

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from the tree, not installed
from engine.evaluation.efficiency import judge  # noqa: E402

KEYS = ("baseline_ms", "candidate_ms", "comp_ms", "comm_ms")


def short(desc: dict) -> str:
    """The design point, every dimension and knob as the store has it."""
    return " ".join(f"{k}={v}" for k, v in sorted(desc.items()))


def load(db: str) -> tuple[str, list[dict]]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    run = con.execute("select id from runs limit 1").fetchone()[0]
    out = []
    for cid, number, op, desc in con.execute(
        "select id, number, operator, descriptor_json from candidates where correct = 1 order by id"
    ):
        evals = con.execute(
            "select stage, result_json from evaluations where candidate_id = ? and status = 'ok' "
            "and stage in ('verify', 'benchmark') order by id",
            (cid,),
        ).fetchall()
        verify = [json.loads(r) for s, r in evals if s == "verify" and r]
        bench = [json.loads(r) for s, r in evals if s == "benchmark" and r]
        try:
            figs = {
                config: json.loads(f)
                for config, f in con.execute(
                    "select config, figures_json from timelines where candidate_id = ?", (cid,)
                )
            }
        except sqlite3.OperationalError:  # a store from before timelines were kept
            figs = {}
        verified = bool(verify) and all(v["correct"] and all(c["correct"] for c in v["configs"]) for v in verify)
        per_config: dict[str, dict] = {}
        for b in bench:
            for c in b["configs"]:
                if c.get("baseline_ms") is None:
                    continue
                per_config.setdefault(c["name"], {k: [] for k in KEYS})
                for k in KEYS:
                    per_config[c["name"]][k].append(c[k])
        configs = {}
        for name, lists in per_config.items():
            c = {k: mean(v) for k, v in lists.items()}
            c["n"] = len(lists["baseline_ms"])
            c["speedup"] = c["baseline_ms"] / c["candidate_ms"]
            c["bound"] = (c["comp_ms"] + c["comm_ms"]) / max(c["comp_ms"], c["comm_ms"])
            verdict = judge(c, figs.get(name))  # the report's own reading
            c["eff"], c["kind"], c["own_comp_ms"] = verdict.meets, verdict.kind, verdict.own_compute_ms
            c["label"] = verdict.label()
            configs[name] = c
        out.append(
            {
                "id": cid,
                "seed": number == 0,
                "operator": op,
                "descriptor": json.loads(desc),
                "verified": verified,
                "configs": configs,
            }
        )
    con.close()
    return run, out


def main(paths: list[str]) -> int:
    for db in paths:
        run, cands = load(db)
        names = sorted(
            {n for c in cands for n in c["configs"]},
            key=lambda n: min((c["configs"][n]["baseline_ms"] for c in cands if n in c["configs"]), default=0),
            reverse=True,
        )
        print(f"## run {run} ({db}): {len(cands)} correct candidates")
        print(
            "| id | operator | verified | design point | "
            + " | ".join(f"{n} ms (eff)" for n in names)
            + " | worst eff |"
        )
        print("| --- " * (5 + len(names)) + "|")
        for c in cands:
            cells = []
            for n in names:
                x = c["configs"].get(n)
                cells.append("-" if x is None else f"{x['candidate_ms']:.4f} ({x['label']})")
            effs = [c["configs"][n]["eff"] for n in names if n in c["configs"] and c["configs"][n]["eff"] is not None]
            c["worst"] = min(effs) if len(effs) == len(names) else None
            worst = "-" if c["worst"] is None else f"{c['worst']:.2f}"
            print(
                f"| {c['id']} | {c['operator']} | {'yes' if c['verified'] else 'NO'} | {short(c['descriptor'])} | "
                + " | ".join(cells)
                + f" | {worst} |"
            )
        print()
        print("best per config (verified candidates; means over the engine's benchmark evaluations):")
        print("| config | T_base | best id | T_best | speedup | T_comp | T_comm | bound | efficiency | design point |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for n in names:
            ok = [c for c in cands if c["verified"] and n in c["configs"] and not c["seed"]]
            if not ok:
                continue
            b = min(ok, key=lambda c: c["configs"][n]["candidate_ms"] / c["configs"][n]["baseline_ms"])
            x = b["configs"][n]
            eff = x["label"]
            print(
                f"| {n} | {x['baseline_ms']:.4f} | {b['id']} | {x['candidate_ms']:.4f} | {x['speedup']:.3f} | "
                f"{x['comp_ms']:.4f} | {x['comm_ms']:.4f} | {x['bound']:.3f} | {eff} | {short(b['descriptor'])} |"
            )
        whole = [c for c in cands if c["verified"] and c.get("worst") is not None and not c["seed"]]
        if whole:
            b = max(whole, key=lambda c: c["worst"])
            print(
                f"\none candidate for every config: id {b['id']} ({short(b['descriptor'])}), worst efficiency "
                f"{b['worst']:.2f}"
            )
        print()
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
