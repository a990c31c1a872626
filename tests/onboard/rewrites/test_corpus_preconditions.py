"""The rewrites on the corpus's real programs: offered where the program shows their preconditions,
refused with the reason read from the program where it does not (checked against READING.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuco_tui.verbs import rewrite
from engine.onboard.analyze import analyze_files
from engine.onboard.rewrites import Offer, Refusal

CORPUS = Path(__file__).resolve().parents[3] / ".." / "shared" / "corpus"


def verdicts(*rel: str) -> dict:
    files = [CORPUS / r for r in rel]
    if not files[0].is_file():
        pytest.skip(f"the corpus is not at {CORPUS}")
    return {v.rewrite: v for v in rewrite.verdicts(analyze_files([str(f) for f in files]))}


def test_jacobi_is_offered_every_rewrite_but_a_bare_comm_stream_and_lsa_collective():
    v = verdicts("nvidia_jacobi_nccl/jacobi.cpp", "nvidia_jacobi_nccl/jacobi_kernels.cu")
    assert all(
        isinstance(x, Offer) for n, x in v.items() if n not in ("comm_stream", "lsa_collective", "keep_scratch")
    ), v
    # its halo exchange is a group of sends and receives, which lsa_collective does not rewrite
    assert (
        isinstance(v["lsa_collective"], Refusal)
        and "hold no ncclAlltoAll or ncclAllGather" in v["lsa_collective"].reason
    )
    # the norm's synchronisation follows the exchange: on its own stream it would overlap nothing
    assert isinstance(v["comm_stream"], Refusal) and "jacobi.cpp:359) synchronises the host" in v["comm_stream"].reason
    assert "launch_jacobi_kernel" in v["boundary_first"].what and "iy_start and iy_end-1" in v["boundary_first"].what
    assert v["graph_replay"].what.endswith("a, a_new, bottom, calculate_norm, top")
    assert (
        v["nccl_register"].what == "a_new, a by ncclMemAlloc, registered with nccl_comm"
    )  # a_new's ping-pong half too
    # its halo exchange, a group of two sends and two receives, becomes one LSA kernel; the receives land in
    # a_new, and after the swap in a: both become windows
    assert v["lsa_sendrecv"].what.endswith("jacobi.cpp:351-356 (2 sends, 2 receives) as LSA stores into a_new, a")


def test_the_hand_overlapped_jacobi_is_not_split_or_captured_again():
    v = verdicts("nvidia_jacobi_nccl_overlap/jacobi.cpp", "nvidia_jacobi_nccl_overlap/jacobi_kernels.cu")
    assert (
        isinstance(v["boundary_first"], Refusal) and "does not take the region's stream" in v["boundary_first"].reason
    )
    assert isinstance(v["graph_replay"], Refusal) and "does not fork" in v["graph_replay"].reason
    assert isinstance(v["comm_stream"], Refusal) and "already runs on several streams" in v["comm_stream"].reason
    # its exchange is on the region's stream (push_stream, the one the analysis times): made device-initiated there
    assert isinstance(v["lsa_sendrecv"], Offer) and "jacobi.cpp:369-374 (2 sends, 2 receives)" in v["lsa_sendrecv"].what


def test_the_graph_replaying_jacobi_is_refused_for_what_it_is():
    v = verdicts("nvidia_jacobi_nccl_graphs/jacobi.cpp", "nvidia_jacobi_nccl_graphs/jacobi_kernels.cu")
    assert all(isinstance(x, Refusal) and "replays CUDA graphs captured at" in x.reason for x in v.values()), v


def test_the_ring_allreduce_allocating_in_its_helper_is_not_captured():
    v = verdicts("async_ring_allreduce_single/ring_allreduce.cu")
    assert isinstance(v["graph_replay"], Refusal)
    assert "cudaFree, cudaMalloc, inside the call" in v["graph_replay"].reason
    assert isinstance(v["boundary_first"], Refusal) and "inside a called function" in v["boundary_first"].reason
    assert isinstance(v["comm_config"], Offer)
    assert isinstance(v["nccl_register"], Refusal) and "inside a called function" in v["nccl_register"].reason
    assert (
        isinstance(v["lsa_sendrecv"], Refusal)
        and "hold no group of ncclSend / ncclRecv (one inside a called function" in v["lsa_sendrecv"].reason
    )
    # the helper's scratch buffer, allocated and freed on every call, is kept across calls instead
    assert isinstance(v["keep_scratch"], Offer) and v["keep_scratch"].what.startswith(
        "scratch_buff of ringAllReduce() ("
    )


def test_the_moe_seed_timed_section_is_read_and_not_captured():
    v = verdicts("cuco_moe_seed/ds_v3_moe.cu")
    # a section that runs once: a graph would be captured for a single replay
    assert isinstance(v["graph_replay"], Refusal) and "section that runs once" in v["graph_replay"].reason
    assert isinstance(v["comm_stream"], Refusal) and "more than one collective" in v["comm_stream"].reason
    assert (
        isinstance(v["nccl_register"], Refusal)
        and "outside the function that holds the region" in v["nccl_register"].reason
    )
    assert isinstance(v["comm_config"], Offer) and "ds_v3_moe.cu:369" in v["comm_config"].what
    assert isinstance(v["lsa_collective"], Offer) and "into d_quant_recv, d_final_output" in v["lsa_collective"].what
    assert isinstance(v["lsa_sendrecv"], Refusal) and "hold no group of ncclSend / ncclRecv" in v["lsa_sendrecv"].reason
    assert (
        isinstance(v["keep_scratch"], Refusal) and "no function the region calls allocates" in v["keep_scratch"].reason
    )
