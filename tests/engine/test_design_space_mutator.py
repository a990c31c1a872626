"""The built-in design-space mutator on the real demo workload (engine/search/mutators/design_space.py)."""

from __future__ import annotations

import random

import pytest

from engine import blocks
from engine.candidate_view import CandidateView
from engine.search.mutators.base import ProposalContext
from engine.search.mutators.design_space import DesignSpaceMutator
from engine.workload import Workload, load_workload


@pytest.fixture(scope="module")
def demo() -> Workload:
    return load_workload("demo")


def view(w: Workload, source: str, cid: int = 1) -> CandidateView:
    return CandidateView(
        id=cid,
        source=source,
        descriptor=w.design_space.descriptor(source),
        status="done",
        island=0,
        generation=0,
        operator="seed",
        speedup=1.0,
        time_ms=1.0,
    )


def ctx(
    w: Workload, parent: CandidateView, rng: random.Random, phase: str = "explore", second: CandidateView | None = None
) -> ProposalContext:
    return ProposalContext(
        run_id="r",
        workload=w,
        parent=parent,
        inspirations=[],
        second_parent=second,
        rejected=[],
        island_sources=[],
        phase=phase,
        rng=rng,
        evaluation_number=1,
        store=None,
    )


def structural(w: Workload, desc: dict) -> dict:
    return {d.name: desc[d.name] for d in w.design_space.structural}


def knobs(w: Workload, desc: dict) -> dict:
    return {d.name: desc[d.name] for d in w.design_space.knobs}


async def proposals(
    w: Workload,
    parent: CandidateView,
    n: int,
    phase: str = "explore",
    second: CandidateView | None = None,
    seed0: int = 0,
):
    m = DesignSpaceMutator(w.design_space, w.seed_source)
    out = []
    for i in range(n):
        p = await m.propose(ctx(w, parent, random.Random(seed0 + i), phase, second))
        assert p is not None, "the mutator had nothing to offer from a point with moves left"
        assert p.mutator == "design-space"
        out.append(p)
    return out


def test_seed_descriptor(demo: Workload):
    assert demo.design_space.descriptor(demo.seed_source) == {
        "placement": "sequential",
        "sync": "barrier",
        "issuer": "compute_thread",
        "chunk_rows": "32",
        "stagger": "0",
    }


async def test_structural_moves_change_structure_and_keep_knobs(demo: Workload):
    # A parent with non-default knobs, so keeping them is visible (the variants ship 32 / 0).
    src = blocks.set_knob(blocks.set_knob(demo.seed_source, "chunk_rows", "8"), "stagger", "1")
    parent = view(demo, src)
    props = [p for p in await proposals(demo, parent, 80) if p.operator == "variant"]
    assert len(props) >= 10
    for p in props:
        desc = demo.design_space.descriptor(p.source)
        assert structural(demo, desc) != structural(demo, parent.descriptor)
        assert knobs(demo, desc) == {"chunk_rows": "8", "stagger": "1"}
        assert blocks.knob_values(p.source) == {"chunk_rows": "8", "stagger": "1"}
        # The child is a shipped variant's block with the parent's knobs.
        v = demo.design_space.variant_at(structural(demo, desc))
        assert v is not None
        expect = blocks.replace_blocks(demo.seed_source, v.bodies)
        expect = blocks.set_knob(blocks.set_knob(expect, "chunk_rows", "8"), "stagger", "1")
        assert p.source == expect


async def test_knob_moves_change_exactly_one_knob(demo: Workload):
    parent = view(demo, demo.seed_source)
    for phase in ("explore", "exploit"):
        props = [p for p in await proposals(demo, parent, 60, phase=phase) if p.operator == "knob"]
        assert len(props) >= 10, phase
        changed_names = set()
        for p in props:
            desc = demo.design_space.descriptor(p.source)
            assert structural(demo, desc) == structural(demo, parent.descriptor)
            diff = {k for k in knobs(demo, desc) if desc[k] != parent.descriptor[k]}
            assert len(diff) == 1, (phase, diff)
            (k,) = diff
            assert desc[k] in demo.design_space.dimensions[k].values
            changed_names |= diff
            # Only the knob's line changed.
            changed = [(a, b) for a, b in zip(parent.source.splitlines(), p.source.splitlines()) if a != b]
            assert len(changed) == 1 and f"cuco:knob {k}" in changed[0][1]
        assert changed_names == {"chunk_rows", "stagger"}, phase


async def test_exploit_knob_steps_stay_near(demo: Workload):
    parent = view(demo, demo.seed_source)
    values = demo.design_space.dimensions["chunk_rows"].values
    here = values.index("32")
    for p in await proposals(demo, parent, 60, phase="exploit"):
        if p.operator != "knob":
            continue
        v = blocks.knob_values(p.source)["chunk_rows"]
        if v != "32":
            assert 1 <= abs(values.index(v) - here) <= 2, v


async def test_crossover_combines_structure_of_one_with_knobs_of_other(demo: Workload):
    fused = next(v for v in demo.design_space.variants if v.name == "fused")
    a_src = blocks.set_knob(blocks.replace_blocks(demo.seed_source, fused.bodies), "chunk_rows", "128")
    b_src = blocks.set_knob(demo.seed_source, "stagger", "1")
    b_src = blocks.set_knob(b_src, "chunk_rows", "4")
    a, b = view(demo, a_src, 1), view(demo, b_src, 2)
    crosses = [p for p in await proposals(demo, a, 150, second=b) if p.operator == "cross"]
    assert len(crosses) >= 5
    sources = {p.source for p in crosses}
    a_with_b_knobs = blocks.set_knob(blocks.set_knob(a_src, "chunk_rows", "4"), "stagger", "1")
    b_with_a_knobs = blocks.set_knob(blocks.set_knob(b_src, "chunk_rows", "128"), "stagger", "0")
    assert sources <= {a_with_b_knobs, b_with_a_knobs}
    assert sources == {a_with_b_knobs, b_with_a_knobs}  # both directions happen over 150 tries
    d = demo.design_space.descriptor(a_with_b_knobs)
    assert d == {
        "placement": "fused",
        "sync": "chunk_flags",
        "issuer": "compute_thread",
        "chunk_rows": "4",
        "stagger": "1",
    }


async def test_every_child_is_a_valid_edit_of_the_seed(demo: Workload):
    parent = view(demo, demo.seed_source)
    second = view(demo, blocks.set_knob(demo.seed_source, "chunk_rows", "64"), 2)
    for phase in ("explore", "exploit"):
        for p in await proposals(demo, parent, 60, phase=phase, second=second, seed0=1000):
            assert p.source != parent.source
            blocks.validate_child(demo.seed_source, p.source)


async def test_children_cover_every_shipped_variant(demo: Workload):
    parent = view(demo, demo.seed_source)
    props = await proposals(demo, parent, 200, seed0=50_000)
    distinct = {p.source for p in props}
    assert len(distinct) >= 10
    seed_knobs = blocks.knob_values(demo.seed_source)
    reached = set()
    for src in distinct:
        blocks.validate_child(demo.seed_source, src)
        normal = src
        for k, v in seed_knobs.items():
            normal = blocks.set_knob(normal, k, v)
        for v in demo.design_space.variants:
            if normal == blocks.replace_blocks(demo.seed_source, v.bodies):
                reached.add(v.name)
    assert reached == {v.name for v in demo.design_space.variants}
    # Every archive cell of a shipped variant is reached.
    cells = {demo.design_space.cell(demo.design_space.descriptor(s)) for s in distinct}
    for v in demo.design_space.variants:
        assert demo.design_space.cell(dict(demo.design_space.descriptor(demo.seed_source), **v.point)) in cells


async def test_from_a_variant_a_structural_move_can_go_back_to_the_seed(demo: Workload):
    fused = next(v for v in demo.design_space.variants if v.name == "fused")
    parent = view(demo, blocks.set_knob(blocks.replace_blocks(demo.seed_source, fused.bodies), "chunk_rows", "16"))
    back = blocks.set_knob(demo.seed_source, "chunk_rows", "16")
    props = [p for p in await proposals(demo, parent, 120) if p.operator == "variant"]
    assert back in {p.source for p in props}


@pytest.mark.parametrize("name", ["gemm_allgather", "kv_transfer", "moe_dispatch_combine", "attention_allgather"])
async def test_the_seed_s_children_reach_every_shipped_variant_of_the_cuda_workloads(name: str):
    w = load_workload(name)
    points = [tuple(sorted(v.point.items())) for v in w.design_space.variants]
    # a structural step never goes to a variant at the parent's own point: two variants at one point
    # would hide each other from a search standing on either
    assert len(set(points)) == len(points), f"{name}: two shipped variants share a design point"
    variants = {v.name: blocks.replace_blocks(w.seed_source, v.bodies) for v in w.design_space.variants}
    children = {
        p.source for p in await proposals(w, view(w, w.seed_source), 120, seed0=7_000) if p.operator == "variant"
    }
    for child in children:
        blocks.validate_child(w.seed_source, child)
    assert {n for n, src in variants.items() if src in children} == set(variants)
