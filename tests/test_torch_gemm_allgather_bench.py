"""The PyTorch comparison of gemm_allgather (tests/bench/torch_gemm_allgather.py), CPU side.

Its shape table must stay the workload's benchmark configs (a changed config would otherwise compare different
problems), and its output check must pass a right result and name a wrong one. The timed run needs two GPUs
(tests/gpu/two_gpu_round.sh); the check logic runs here on CPU tensors with a gloo group of one rank where
PyTorch is importable, and is skipped with the reason where it is not (CI has no PyTorch).
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "tests" / "bench" / "torch_gemm_allgather.py"
WORKLOAD_YAML = ROOT / "workloads" / "gemm_allgather" / "workload.yaml"


def script_constant(name: str):
    tree = ast.parse(BENCH.read_text(), filename=str(BENCH))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{BENCH.name} has no {name}")


def yaml_bench_configs(path: Path) -> tuple:
    spec = yaml.safe_load(path.read_text())
    return tuple(
        (c["name"], c["params"]["M"], c["params"]["N"], c["params"]["K"], c["params"].get("ranks", spec["ranks"]))
        for c in spec["configs"]
        if c.get("bench")
    )


def load_bench():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here (CI has none): check logic not run")
    spec = importlib.util.spec_from_file_location("torch_gemm_allgather", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses resolve their annotations through it
    spec.loader.exec_module(mod)
    return mod, torch


def test_the_script_parses():
    compile(BENCH.read_text(), str(BENCH), "exec")


def test_its_shapes_are_the_workloads_bench_configs():
    assert script_constant("CONFIGS") == yaml_bench_configs(WORKLOAD_YAML)
    assert script_constant("BF16_TOL") == yaml.safe_load(WORKLOAD_YAML.read_text())["tolerances"]["bf16"]


def test_a_changed_config_stops_the_run_naming_the_file(tmp_path):
    mod, _ = load_bench()
    assert mod.table_mismatch(WORKLOAD_YAML) is None
    changed = tmp_path / "workload.yaml"
    changed.write_text(
        WORKLOAD_YAML.read_text().replace(
            "{M: 1024, N: 1024, K: 4096, ranks: 2}", "{M: 2048, N: 1024, K: 4096, ranks: 2}"
        )
    )
    msg = mod.table_mismatch(changed)
    assert msg is not None and str(changed) in msg and "CONFIGS" in msg


def test_median_and_iqr_follow_the_harness():
    mod, _ = load_bench()
    # harness.cu: sorted v, median v[n/2], IQR v[min(3n/4, n-1)] - v[n/4]
    assert mod.median_iqr([5.0, 1.0, 4.0, 2.0, 3.0]) == (3.0, 2.0)
    assert mod.median_iqr([2.0]) == (2.0, 0.0)


@pytest.fixture
def gloo_world_of_one():
    mod, torch = load_bench()
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield mod, torch
    finally:
        dist.destroy_process_group()


def test_the_user_version_passes_its_check_and_a_wrong_block_fails(gloo_world_of_one):
    mod, torch = gloo_world_of_one
    shape = mod.Shape("tiny", 128, 64, 96, 1)
    a, b = mod.make_inputs(shape, 0, torch.device("cpu"))
    ref = mod.reference_block(a, b)
    user = mod.MatmulAllgather(a, b, 1, 0)
    user.run()
    assert mod.check_output(user.c, mod.gather_own_blocks(user.c, 0, 1), ref, 0, mod.BF16_TOL) is None

    wrong = user.c.clone()
    wrong[0, 5, 7] += 4.0  # far outside bf16 tolerance
    msg = mod.check_output(wrong, mod.gather_own_blocks(wrong, 0, 1), ref, 0, mod.BF16_TOL)
    assert msg is not None and msg.startswith("compute") and f"index {5 * 64 + 7}" in msg

    poisoned = user.c.clone()
    poisoned.view(torch.int16)[0, 0, 0] = -1  # 0xFFFF: a NaN, as a call that never wrote its output leaves it
    assert mod.check_output(poisoned, mod.gather_own_blocks(poisoned, 0, 1), ref, 0, mod.BF16_TOL).startswith("compute")


def test_a_gathered_block_must_be_its_owners_bits(gloo_world_of_one):
    mod, torch = gloo_world_of_one
    shape = mod.Shape("tiny", 128, 64, 96, 2)
    blocks, refs = [], []
    for r in range(2):
        a, b = mod.make_inputs(shape, r, torch.device("cpu"))
        blocks.append(torch.matmul(a, b.t()))
        refs.append(mod.reference_block(a, b))
    own = torch.stack(blocks)  # every rank's own block, as the plain all-gather returns them
    for rank in range(2):
        assert mod.check_output(own.clone(), own, refs[rank], rank, mod.BF16_TOL) is None
        c = own.clone()
        other = 1 - rank
        c.view(torch.int16)[other, 3, 2] ^= 1  # one bit of the peer's block: within tolerance, not its bits
        assert mod.check_output(c, own, refs[rank], rank, mod.BF16_TOL) == (
            f"gather: block {other} index {3 * 64 + 2} differs from rank {other}'s own block"
        )


class HostTimer:
    """The harness protocol's poisoning, timed on the host: the CPU stand-in for CUDA events."""

    def __init__(self, torch):
        self.torch = torch

    def call(self, method) -> float:
        method.c.view(self.torch.int16).fill_(-1)
        t0 = time.perf_counter()
        method.run()
        return (time.perf_counter() - t0) * 1e3


def test_a_wrong_or_broken_method_is_reported_failed_and_the_others_timed(gloo_world_of_one):
    mod, torch = gloo_world_of_one
    shape = mod.Shape("tiny", 128, 64, 96, 1)
    a, b = mod.make_inputs(shape, 0, torch.device("cpu"))

    class SkipsOneRow(mod.MatmulAllgather):  # a wrong answer: one row never written (left poisoned)
        def run(self):
            super().run()
            self.c[0, 7].view(torch.int16).fill_(-1)

    def missing_api():
        raise AttributeError("module has no attribute 'rendezvous'")

    methods = [
        ("matmul_allgather", 1, lambda: mod.MatmulAllgather(a, b, 1, 0)),
        ("skips_a_row", 1, lambda: SkipsOneRow(a, b, 1, 0)),
        ("no_symm_mem", 2, missing_api),
        ("part_gemm", 1, lambda: mod.GemmOnly(a, b, 1, 0)),
    ]
    logged: list[str] = []
    opts = {"warmup": 2, "iters": 9}
    got = mod.measure(
        methods, HostTimer(torch), mod.reference_block(a, b), 0, 1, torch.device("cpu"), opts, logged.append
    )

    by = {t.method: t for t in got}
    assert [t.method for t in got] == [m[0] for m in methods]
    assert by["matmul_allgather"].error is None and by["matmul_allgather"].iterations == 9
    assert by["part_gemm"].iterations == 9  # a part is timed unchecked: its output is not an answer
    assert by["skips_a_row"].median_ms is None and by["skips_a_row"].error.startswith(
        f"compute: block 0 index {7 * 64}"
    )
    assert by["no_symm_mem"].median_ms is None and "rendezvous" in by["no_symm_mem"].error
    assert logged == [f"skips_a_row: FAILED at call 0: {by['skips_a_row'].error}"]
