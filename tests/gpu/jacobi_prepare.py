"""The design points the Jacobi end-to-end run times on the program itself when the harness search cannot
run: each set of schedule rewrites (and communicator knobs) applied to NVIDIA's unmodified Jacobi
(nvidia_jacobi_nccl/) as a unified diff, with the notes (what `cuco rewrite --apply` prints).

    python tests/gpu/jacobi_prepare.py CORPUS_DIR OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine.onboard.analyze import analyze_files
from engine.onboard.patch import unified_diff
from engine.onboard.rewrites import Offer, check_all, facts_from_analysis, rewrite_program

POINTS = [
    (["boundary_first"], {}),
    (["graph_replay"], {}),
    (["boundary_first", "graph_replay"], {}),
    (["boundary_first", "nccl_register", "graph_replay"], {}),
]
POINTS += [
    (["boundary_first", "nccl_register", "comm_config", "graph_replay"], {"comm_ctas": c, "nccl_proto": p})
    for c, p in (("4", "default"), ("16", "LL"))
]
# the halo exchange as one device-initiated kernel (LSA stores into the peers' windows), alone and with the split
# and the graphs (appended: the points above keep their names)
POINTS += [
    (["lsa_sendrecv"], {"comm_ctas": "8"}),
    (["boundary_first", "nccl_register", "lsa_sendrecv", "graph_replay"], {"comm_ctas": "8"}),
]


def main(corpus: str, out: str) -> int:
    folder = Path(corpus) / "nvidia_jacobi_nccl"
    facts = facts_from_analysis(analyze_files([str(folder / "jacobi.cpp"), str(folder / "jacobi_kernels.cu")]))
    offered = {v.rewrite for v in check_all(facts) if isinstance(v, Offer)}
    Path(out).mkdir(parents=True, exist_ok=True)
    index = []
    for i, (names, knobs) in enumerate(POINTS):
        if not set(names) <= offered:
            continue
        texts, notes = rewrite_program(facts, names, knobs)
        name = f"p{i:02d}"
        (Path(out) / f"{name}.patch").write_text(unified_diff(facts.texts, texts))
        index.append({"point": name, "rewrites": names, "knobs": knobs, "notes": notes})
    (Path(out) / "points.json").write_text(json.dumps(index, indent=1))
    print(f"{len(index)} design points written to {out}")
    return 0 if index else 2


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
