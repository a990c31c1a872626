"""Every timed call is verified (CPU harness): cheats that work only on the calls nobody used to check.

Before per-call checks, only the call after the timed loop (and the profiled one) was verified: a
candidate that skipped its work on the timed calls, by counting calls or by recomputing two elements of
the harness's stored reference to tell a checked call from a timed one, was believed. Each candidate
here computes honestly on every call the old harness checked, and is caught on a timed call now.
Real g++, the real cascade, a real local executor.
"""

from __future__ import annotations

import dataclasses
import shutil

import pytest

from engine import blocks
from engine.evaluation.evaluation import EvalOutcome
from engine.workload import load_workload
from tests.integrity.evaluate_all import evaluate_all

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the cheats are compiled")

RUN_HEAD = 'extern "C" int cuco_run(const cuco_problem* p) {\n'

CHEATS = {
    # Verification runs 2 calls per config; a benchmark's first calls are warm-ups, then the timed ones,
    # then the checked ones: skip the 3rd to 5th call in a row on the same config.
    "counting": (
        "static int g_same[64], g_last_m[64];\n",
        "  if (p->M != g_last_m[p->rank]) { g_last_m[p->rank] = p->M; g_same[p->rank] = 0; }\n"
        "  else ++g_same[p->rank];\n"
        "  if (g_same[p->rank] >= 2 && g_same[p->rank] <= 4) return 0;   // a timed call: skip it all\n",
    ),
    # Half the work on the calls it believes unchecked: the first half of its rows only.
    "half_the_rows": (
        "static int g_same[64], g_last_m[64];\n",
        "  if (p->M != g_last_m[p->rank]) { g_last_m[p->rank] = p->M; g_same[p->rank] = 0; }\n"
        "  else ++g_same[p->rank];\n"
        "  if (g_same[p->rank] >= 2 && g_same[p->rank] <= 4) {\n"
        "    const int N = p->N, ld = p->ranks * N;\n"
        "    gemm_rows(p, 0, p->M / 2, p->scratch, N);\n"
        "    for (int i = 0; i < p->M; ++i)\n"
        "      memcpy(p->out + (size_t)i * ld + (size_t)p->rank * N, p->scratch + (size_t)i * N, sizeof(float) * N);\n"
        "    p->barrier(p->barrier_ctx);\n"
        "    for (int q = 0; q < p->ranks; ++q)\n"
        "      if (q != p->rank) p->put(p->link, p->rank, q, 0, p->rank * N, p->M, N, p->scratch, N, 0);\n"
        "    return p->wait(p->link, p->rank, 0, p->ranks - 1, 20000) == 0 ? 0 : 6;\n"
        "  }\n",
    ),
    # The oracle: find the harness's fp64 reference through the pointers the ABI hands out (the link port
    # holds a pointer into the harness's buffers; a vector of R*M*N doubles lies near it), recompute two of
    # its elements from this call's inputs, and do the work only when they match (a checked call).
    "reference_oracle": (
        "static bool cuco_candidate_checked(const cuco_problem* p) {\n"
        "  const unsigned long want = (unsigned long)p->ranks * p->M * p->N * sizeof(double);\n"
        "  unsigned long* port = (unsigned long*)p->link;\n"
        "  unsigned long* near = (unsigned long*)port[2];   // the port's pointer into the harness's buffers\n"
        "  for (int w = -160; w < 8; ++w) {\n"
        "    unsigned long b = near[w], e = near[w + 1];\n"
        "    if (!b || e - b != want) continue;\n"
        "    const double* ref = (const double*)b;   // ref[r][i][j]: rank-major\n"
        "    double r0 = 0, r1 = 0;\n"
        "    for (int k = 0; k < p->K; ++k) {\n"
        "      r0 += (double)p->A[k] * p->B[k];\n"
        "      r1 += (double)p->A[k] * p->B[(size_t)k * p->N + 1];\n"
        "    }\n"
        "    const double* mine = ref + (size_t)p->rank * p->M * p->N;\n"
        "    return mine[0] == r0 && mine[1] == r1;\n"
        "  }\n"
        "  return false;\n"
        "}\n",
        "  if (!cuco_candidate_checked(p)) return 0;   // nobody checks this call: skip it\n",
    ),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, EvalOutcome]:
    workload = dataclasses.replace(load_workload("demo"), warmup=1, iters=3)
    seed = workload.seed_source
    sources = {}
    for name, (decls, head) in CHEATS.items():
        sources[name] = seed.replace(RUN_HEAD, decls + RUN_HEAD + head)
        blocks.validate_child(seed, sources[name])
    work = tmp_path_factory.mktemp("timed")

    return evaluate_all(workload, sources, work, seed=91)


def caught_on_a_timed_call(out: EvalOutcome, what: str) -> None:
    assert out.status == "incorrect", (out.status, out.reason)
    assert [s.stage for s in out.stages] == ["build", "verify", "benchmark"], "verification alone passed it"
    assert f"wrong {what}" in out.reason and "on rank" in out.reason, out.reason


def test_skipping_every_timed_call_by_counting_is_incorrect(outcomes):
    caught_on_a_timed_call(outcomes["counting"], "compute")


def test_skipping_half_the_rows_on_timed_calls_is_incorrect(outcomes):
    caught_on_a_timed_call(outcomes["half_the_rows"], "compute")


def test_an_oracle_on_the_reference_finds_none_and_is_incorrect(outcomes):
    """No reference of a call's inputs exists during the call: the oracle never sees a checked call, skips
    every one, and the first (a warm-up) is caught. Passes verification neither."""
    out = outcomes["reference_oracle"]
    assert out.status == "incorrect", (out.status, out.reason)
    assert "wrong compute" in out.reason and "on rank" in out.reason, out.reason
