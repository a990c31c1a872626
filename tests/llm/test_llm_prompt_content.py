"""What a model is told: the demo's prompts speak of a CPU, a CUDA workload's carry the declarations of the
frozen headers and of NCCL's device API and the harness's rules, speedups come with their spread, and a
shipped implementation's code is shown while the run has nothing better."""

from __future__ import annotations

import re
import time

import pytest
from llm_helpers import add_candidate, open_store, view

from engine.llm import declarations
from engine.llm.meta import summary_prompt
from engine.llm.prompts import mutate_prompt, system_prompt
from engine.workload import load_workload


def test_the_demo_is_a_cpu_program_and_its_abi_is_declared():
    demo = load_workload("demo")
    text = system_prompt(demo)
    assert "GPU performance engineer" not in text and "there is no GPU" in text
    assert "int (*put)(void* link, int rank, int dst_rank, int row, int col, int rows, int cols" in text
    assert "CUCO_FLAGS = 4096" in text


def test_a_cuda_prompt_carries_signatures_rules_and_the_nccl_device_api():
    gemm = load_workload("gemm_allgather")
    text = system_prompt(gemm)
    assert "GPU performance engineer" in text and "Compiled for sm_90 (Hopper)" in text
    # the frozen headers' fields and signatures, not just names
    assert "cudaStream_t stream;  // the timed stream" in text
    assert "bool cuco_wait_geq(const unsigned int* flag, unsigned int value, unsigned long long timeout_ns" in text
    assert "inline cudaError_t launch(const __nv_bfloat16* A, const __nv_bfloat16* B, int N, int K" in text
    assert "{ unsigned long long t;" not in text  # bodies are left out
    # NCCL's device API of the version the workload names
    assert "from NCCL 2.28.9's headers" in text
    assert "NCCL_DEVICE_INLINE void* ncclGetPeerPointer(ncclWindow_t w, size_t offset, int peer);" in text
    assert "ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win" in text
    assert not re.search(r"[Mm]ultimem", text.split("from NCCL 2.28.9's headers", 1)[1].split("## Rules")[0])
    # the harness's rules
    assert "joined back to `ctx->stream`" in text and "poisoned (every byte 0xFF" in text
    assert "nothing computed from the inputs may be cached across calls" in text
    assert "What may persist across calls" in text


def test_attention_declares_its_own_frozen_kernel():
    text = system_prompt(load_workload("attention_allgather"))
    assert "// attn_flash.cuh (frozen)" in text
    assert "__global__ void __launch_bounds__(THREADS) flash_fwd(Args a, KvList kv);" in text


def test_the_shipped_nccl_snapshot_is_what_the_installed_headers_give():
    include = declarations.installed_nccl_include()
    if include is None or declarations.header_version(include) != "2.28.9":
        pytest.skip("NCCL 2.28.9's headers are not installed here (pip install nvidia-nccl-cu13==2.28.9)")
    snapshot = declarations.snapshot_path("2.28.9").read_text()
    assert snapshot == declarations.nccl_declarations(include) + "\n", (
        "refresh it: python -m engine.llm.declarations --snapshot"
    )


def test_speedups_carry_their_interval_when_measured_and_a_known_implementation_is_shown():
    demo = load_workload("demo")
    seed = view(
        demo.seed_source,
        descriptor=demo.design_space.descriptor(demo.seed_source),
        speedup=0.82,
        speedup_interval=[0.74, 0.95],
        public_metrics={
            "tall": {"baseline_ms": 2.0, "candidate_ms": 2.4, "speedup": 0.83, "speedup_interval": [0.7, 1.0]}
        },
    )
    text = mutate_prompt("diff", seed, demo)
    assert "speedup 0.82x [0.74-0.95] over the baseline" in text
    assert "- tall: baseline 2 ms, candidate 2.4 ms, 0.83x [0.70-1.00]" in text
    # nothing better than the parent yet: the nearest shipped implementation's blocks are shown
    assert "# A known implementation near the parent: chunked_push (placement=chunked" in text
    better = view(demo.seed_source, cid=5, speedup=1.5)
    assert "# A known implementation" not in mutate_prompt("diff", seed, demo, inspirations=[better])
    # results from before intervals existed show the bare number
    old = view(demo.seed_source, speedup=1.1)
    assert "speedup 1.10x over the baseline" in mutate_prompt("diff", old, demo)


async def test_the_meta_prompt_leaves_out_results_held_for_review_or_rejected(tmp_path):
    demo = load_workload("demo")
    store = await open_store(tmp_path)
    try:
        kept = await add_candidate(store, "run1", 0, "a", speedup=1.2)
        held = await add_candidate(store, "run1", 1, "b", speedup=9.1)
        rejected = await add_candidate(store, "run1", 2, "c", speedup=7.3)
        async with store.transaction() as tx:
            await tx.execute("UPDATE candidates SET fitness=speedup WHERE run_id='run1'")
            await tx.execute("UPDATE candidates SET review='needs_review' WHERE id=?", (held,))
            await tx.execute(
                "INSERT INTO marks (run_id, candidate_id, verdict, text, at) VALUES (?,?,?,?,?)",
                ("run1", rejected, "reject", "reads out of bounds", time.time()),
            )
        text = await summary_prompt(store, "run1", demo, [])
    finally:
        await store.close()
    assert f"#{kept} " in text and "1.200x" in text
    assert f"#{held} " not in text and "9.100x" not in text
    assert f"#{rejected} " not in text and "7.300x" not in text
