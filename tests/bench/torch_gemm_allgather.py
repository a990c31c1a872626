"""gemm_allgather against what a user would write instead in PyTorch: same GPUs, shapes and dtype, one job.

The problem (workloads/gemm_allgather/problem.cu): every rank r holds A (M x K, bf16, the same on every rank)
and B_r (N x K, bf16), computes C_r = A @ B_r^T (bf16 out) and all-gathers, so that every rank ends with
C = [C_0, ..., C_{W-1}], W blocks of M x N in rank order. Timed here, on one machine, in this order:

  cuco         cuco's shipped best variant (split_tail, or --cuco-source FILE: a candidate exported from a
               search) through the frozen harness, exactly as a search benchmarks it
               (workloads/_harness/cuda/run_local.py --mode verify, then --mode benchmark); the harness's
               own baseline (its GEMM, then ncclAllGather) comes with it
  torch, one process per GPU (NCCL process group), every method interleaved per iteration:
    part_gemm, part_allgather   the two halves alone (torch.matmul of this rank's block; all_gather_into_tensor
                         of one block), unchecked: torch's T_comp and T_comm, so max of the two is its bound
    matmul_allgather     torch.matmul, then dist.all_gather_into_tensor: what a user writes first
    nccl_ag_chunks{k}    the rows in k chunks: each chunk's GEMM straight into its rows of C, then its
                         all_gather_into_tensor (async: NCCL's own stream) while the next chunk's GEMM runs;
                         a side stream copies each gathered chunk into place once it lands
    nccl_p2p_chunks{k}   the same, but each chunk sent / received with batch_isend_irecv straight into the
                         peers' rows of C (no staging, no copy)
    symm_push_chunks{k}  C in symmetric memory (torch.distributed._symmetric_memory: empty + rendezvous);
                         each chunk, once its GEMM is done, copied by a side stream into every peer's C
                         (tensor copy_ into the peer's buffer: a cudaMemcpyAsync, the copy engines), one
                         symmetric-memory barrier at the end
    symm_pull_chunks{k}  the same memory, pulled: per chunk a barrier on the side stream (every rank's chunk is
                         done), then copies from every peer's C; a last barrier before the call ends

Each call is timed as the harness times one (workloads/_harness/cuda/harness.cu): outputs poisoned (0xFF), a
256 MiB L2 flush, the ranks aligned by two all-reduces around a host synchronise, CUDA events around the call,
a device synchronise after it; per iteration the slowest rank's time; medians and interquartile ranges over
the iterations with the harness's index rule. Every call's output is checked, untimed: this rank's block
against an fp32 reference within the workload's bf16 tolerance, every other block bit-exact against that
rank's own block (fetched by a plain all-gather). A method that fails a check is reported failed, not timed.

    python3 tests/bench/torch_gemm_allgather.py --out DIR [--ranks 2] [--chunks 2,4,8] [--iters 41]
            [--warmup 5] [--configs a,b] [--cuco-source FILE | --no-cuco]

Writes DIR/torch_gemm_allgather.json (medians and IQRs per config per method, the cuco result, the ratios)
and prints the ratios table (method time / cuco's time: above 1, cuco is faster). NVLink multicast stays off
in every process (NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed._symmetric_memory as symm_mem
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "workloads" / "gemm_allgather"
RUN_LOCAL = ROOT / "workloads" / "_harness" / "cuda" / "run_local.py"
DEFAULT_CUCO_SOURCE = WORKLOAD / "variants" / "split_tail.cu"  # the shipped best (docs/gpu-runs.md)
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

# The benchmark configs of workloads/gemm_allgather/workload.yaml (bench: true), as (name, M, N, K, ranks).
# tests/test_torch_gemm_allgather_bench.py fails when they differ, and main() refuses to run on a difference.
CONFIGS = (
    ("m8k_k4096", 8192, 4096, 4096, 2),
    ("m8k_k8192", 8192, 4096, 8192, 2),
    ("small_m1k", 1024, 1024, 4096, 2),
    ("r4_m8k_k4096", 8192, 4096, 4096, 4),
    ("r4_m4k_k8192", 4096, 4096, 8192, 4),
    ("r4_small_m1k", 1024, 1024, 4096, 4),
)
BF16_TOL = 1.6e-2  # workload.yaml tolerances.bf16: relative to |ref| + 10 % of C's rms
FLUSH_BYTES = 256 << 20  # the harness's L2 flush
BARRIER_TIMEOUT_MS = 10_000  # a symmetric-memory barrier that waits longer traps (0 would spin for ever)
CALL_TIMEOUT = datetime.timedelta(seconds=120)  # a hung collective ends the job rather than the device call


@dataclass(frozen=True)
class Shape:
    name: str
    M: int
    N: int
    K: int
    ranks: int


@dataclass
class Timing:
    """One method on one config: medians and IQRs (ms) of the slowest rank's time per iteration."""

    method: str
    chunks: int
    median_ms: float | None
    iqr_ms: float | None
    iterations: int
    error: str | None = None


def shapes_for(ranks: int, names: list[str] | None) -> list[Shape]:
    out = [Shape(*c) for c in CONFIGS if c[4] == ranks and (not names or c[0] in names)]
    if names:
        unknown = sorted(set(names) - {s.name for s in out})
        if unknown:
            raise SystemExit(f"--configs: {', '.join(unknown)} not among the {ranks}-rank configs of CONFIGS")
    return out


def table_mismatch(workload_yaml: Path) -> str | None:
    """None when CONFIGS is exactly workload.yaml's bench configs; otherwise what differs."""
    import yaml  # the device image has it; only this check needs it

    spec = yaml.safe_load(workload_yaml.read_text())
    want = []
    for c in spec.get("configs") or []:
        if not c.get("bench"):
            continue
        p = c.get("params") or {}
        want.append((c["name"], int(p["M"]), int(p["N"]), int(p["K"]), int(p.get("ranks", spec["ranks"]))))
    if tuple(want) != CONFIGS:
        return f"{workload_yaml}: bench configs {want} differ from CONFIGS in {Path(__file__).name}: update CONFIGS"
    return None


# ---- statistics, as the harness computes them -----------------------------------------------------------------


def median_iqr(samples: list[float]) -> tuple[float, float]:
    v = sorted(samples)
    n = len(v)
    iqr = 0.0 if n < 2 else v[min((3 * n) // 4, n - 1)] - v[n // 4]
    return v[n // 2], iqr


# ---- inputs, reference and check ------------------------------------------------------------------------------


def make_inputs(shape: Shape, rank: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A the same on every rank, B_r its own; uniform in [-1, 1) as problem.cu fills them."""
    g = torch.Generator(device=device)
    g.manual_seed(1)
    a = (torch.rand(shape.M, shape.K, generator=g, device=device) * 2 - 1).to(torch.bfloat16)
    g.manual_seed(100 + rank)
    b = (torch.rand(shape.N, shape.K, generator=g, device=device) * 2 - 1).to(torch.bfloat16)
    return a, b


def reference_block(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """This rank's block in fp32 (no TF32): what its bf16 block is checked against."""
    return a.float() @ b.float().t()


def gather_own_blocks(c: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Every rank's own block of C as that rank computed it, by a plain all-gather (W, M, N)."""
    parts = [torch.empty_like(c[rank]) for _ in range(world)]
    dist.all_gather(parts, c[rank].contiguous())
    return torch.stack(parts)


def check_output(c: torch.Tensor, own_blocks: torch.Tensor, ref: torch.Tensor, rank: int, tol: float) -> str | None:
    """None when C (W, M, N) is right on this rank: block `rank` within tol * (|ref| + 10 % of ref's rms) of the
    fp32 reference (NaN / Inf fail), every other block q bit-exact against rank q's own block."""
    got = c[rank].float()
    scale = 0.1 * float(ref.pow(2).mean().sqrt())
    bad = ~((got - ref).abs() <= tol * (ref.abs() + scale))  # NaN compares false: counted bad
    if bool(bad.any()):
        i = int(bad.flatten().nonzero()[0])
        return f"compute: block {rank} index {i}: got {float(got.flatten()[i])}, reference {float(ref.flatten()[i])}"
    for q in range(c.shape[0]):
        if q == rank:
            continue
        diff = c[q].view(torch.int16) != own_blocks[q].view(torch.int16)
        if bool(diff.any()):
            i = int(diff.flatten().nonzero()[0])
            return f"gather: block {q} index {i} differs from rank {q}'s own block"
    return None


# ---- the methods ----------------------------------------------------------------------------------------------


def row_chunks(m: int, k: int) -> list[slice]:
    step = m // k
    return [slice(i * step, (i + 1) * step) for i in range(k)]


class GemmOnly:
    """A part, not an answer (unchecked): this rank's GEMM alone, torch's T_comp."""

    checked = False

    def __init__(self, a, b, world, rank):
        self.a, self.b, self.rank = a, b, rank
        self.c = torch.empty(world, a.shape[0], b.shape[0], dtype=torch.bfloat16, device=a.device)

    def run(self) -> None:
        torch.matmul(self.a, self.b.t(), out=self.c[self.rank])


class AllgatherOnly:
    """A part, not an answer (unchecked): the all-gather of one block alone, torch's T_comm."""

    checked = False

    def __init__(self, a, b, world, rank):
        self.own = torch.zeros(a.shape[0], b.shape[0], dtype=torch.bfloat16, device=a.device)
        self.c = torch.empty(world, a.shape[0], b.shape[0], dtype=torch.bfloat16, device=a.device)

    def run(self) -> None:
        dist.all_gather_into_tensor(self.c.view(-1, self.c.shape[2]), self.own)


class MatmulAllgather:
    """What a user writes first: the GEMM, then the all-gather of its result."""

    checked = True

    def __init__(self, a, b, world, rank):
        self.a, self.b, self.world, self.rank = a, b, world, rank
        self.c = torch.empty(world, a.shape[0], b.shape[0], dtype=torch.bfloat16, device=a.device)

    def run(self) -> None:
        local = torch.matmul(self.a, self.b.t())
        dist.all_gather_into_tensor(self.c.view(-1, self.c.shape[2]), local)


class NcclAllgatherChunks:
    """Row chunks: each chunk's GEMM into C, its all-gather on NCCL's stream (async), a side stream copying the
    gathered chunk into place; the next chunk's GEMM runs meanwhile."""

    checked = True

    def __init__(self, a, b, world, rank, k):
        self.a, self.b, self.world, self.rank = a, b, world, rank
        m, n = a.shape[0], b.shape[0]
        self.c = torch.empty(world, m, n, dtype=torch.bfloat16, device=a.device)
        self.rows = row_chunks(m, k)
        self.stage = [torch.empty(world, r.stop - r.start, n, dtype=torch.bfloat16, device=a.device) for r in self.rows]
        self.side = torch.cuda.Stream(device=a.device)

    def run(self) -> None:
        main = torch.cuda.current_stream()
        own = self.c[self.rank]
        works = []
        for rows, stage in zip(self.rows, self.stage):
            torch.matmul(self.a[rows], self.b.t(), out=own[rows])
            works.append(dist.all_gather_into_tensor(stage.view(-1, stage.shape[2]), own[rows], async_op=True))
        with torch.cuda.stream(self.side):
            for rows, stage, work in zip(self.rows, self.stage, works):
                work.wait()  # the side stream waits for this chunk's gather only
                for q in range(self.world):
                    if q != self.rank:
                        self.c[q, rows].copy_(stage[q], non_blocking=True)
        main.wait_stream(self.side)


class NcclP2pChunks:
    """Row chunks sent and received with batch_isend_irecv straight into the peers' rows of C."""

    checked = True

    def __init__(self, a, b, world, rank, k):
        self.a, self.b, self.world, self.rank = a, b, world, rank
        m, n = a.shape[0], b.shape[0]
        self.c = torch.empty(world, m, n, dtype=torch.bfloat16, device=a.device)
        self.rows = row_chunks(m, k)

    def run(self) -> None:
        own = self.c[self.rank]
        works = []
        for rows in self.rows:
            torch.matmul(self.a[rows], self.b.t(), out=own[rows])
            ops = []
            for q in range(self.world):
                if q != self.rank:
                    ops.append(dist.P2POp(dist.isend, own[rows], q))
                    ops.append(dist.P2POp(dist.irecv, self.c[q, rows], q))
            works.extend(dist.batch_isend_irecv(ops))
        for w in works:
            w.wait()


class SymmCopyChunks:
    """C in symmetric memory; chunks moved by tensor copies between this GPU and the peers' buffers (the copy
    engines), on a side stream that waits for each chunk's GEMM. push: into every peer's C, one barrier at the
    end; pull: a barrier per chunk (every rank's chunk done), then copies from every peer's C."""

    checked = True

    def __init__(self, a, b, world, rank, k, pull: bool):
        self.a, self.b, self.world, self.rank, self.pull = a, b, world, rank, pull
        m, n = a.shape[0], b.shape[0]
        self.c = symm_mem.empty((world, m, n), dtype=torch.bfloat16, device=a.device)
        self.handle = symm_mem.rendezvous(self.c, dist.group.WORLD.group_name)
        self.peers = {q: self.handle.get_buffer(q, (world, m, n), torch.bfloat16) for q in range(world) if q != rank}
        self.rows = row_chunks(m, k)
        self.side = torch.cuda.Stream(device=a.device)
        self.done = [torch.cuda.Event() for _ in self.rows]

    def run(self) -> None:
        main = torch.cuda.current_stream()
        own = self.c[self.rank]
        for rows, ev in zip(self.rows, self.done):
            torch.matmul(self.a[rows], self.b.t(), out=own[rows])
            ev.record(main)
        with torch.cuda.stream(self.side):
            for i, (rows, ev) in enumerate(zip(self.rows, self.done)):
                self.side.wait_event(ev)
                if self.pull:
                    self.handle.barrier(channel=i, timeout_ms=BARRIER_TIMEOUT_MS)
                for q, peer in self.peers.items():
                    if self.pull:
                        self.c[q, rows].copy_(peer[q, rows], non_blocking=True)
                    else:
                        peer[self.rank, rows].copy_(own[rows], non_blocking=True)
            # push: every rank's copies into this C are done; pull: no rank reads this C any more
            self.handle.barrier(channel=len(self.rows), timeout_ms=BARRIER_TIMEOUT_MS)
        main.wait_stream(self.side)


def make_methods(a, b, world, rank, chunks: list[int]) -> list[tuple[str, int, Callable[[], object]]]:
    """(name, chunks, factory): the factories run collectively, in this order on every rank."""
    m = a.shape[0]
    out: list[tuple[str, int, Callable[[], object]]] = [
        ("part_gemm", 1, lambda: GemmOnly(a, b, world, rank)),
        ("part_allgather", 1, lambda: AllgatherOnly(a, b, world, rank)),
        ("matmul_allgather", 1, lambda: MatmulAllgather(a, b, world, rank)),
    ]
    for k in chunks:
        if m % k:
            continue
        out.append((f"nccl_ag_chunks{k}", k, lambda k=k: NcclAllgatherChunks(a, b, world, rank, k)))
        out.append((f"nccl_p2p_chunks{k}", k, lambda k=k: NcclP2pChunks(a, b, world, rank, k)))
        out.append((f"symm_push_chunks{k}", k, lambda k=k: SymmCopyChunks(a, b, world, rank, k, pull=False)))
        out.append((f"symm_pull_chunks{k}", k, lambda k=k: SymmCopyChunks(a, b, world, rank, k, pull=True)))
    return out


# ---- one process per GPU --------------------------------------------------------------------------------------


def agree(ok: bool, device: torch.device) -> bool:
    """True when every rank says ok (keeps the ranks' method lists identical)."""
    t = torch.tensor([1 if ok else 0], dtype=torch.int32, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


class Timer:
    """The harness's per-call protocol around one call."""

    def __init__(self, device: torch.device):
        self.flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device)
        self.align = torch.zeros(1, dtype=torch.int32, device=device)
        self.e0, self.e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def call(self, method) -> float:
        method.c.view(torch.int16).fill_(-1)  # 0xFF bytes, as the harness poisons outputs
        self.flush.zero_()
        dist.all_reduce(self.align)
        torch.cuda.synchronize()
        dist.all_reduce(self.align)
        self.e0.record()
        method.run()
        self.e1.record()
        torch.cuda.synchronize()
        return self.e0.elapsed_time(self.e1)


def bench_config(shape: Shape, rank: int, world: int, device: torch.device, opts: dict, log) -> list[Timing]:
    a, b = make_inputs(shape, rank, device)
    ref = reference_block(a, b)
    timings = measure(
        make_methods(a, b, world, rank, opts["chunks"]), Timer(device), ref, rank, world, device, opts, log
    )
    torch.cuda.empty_cache()  # the methods' buffers went with them: the next config's have the room
    return timings


def measure(methods, timer, ref, rank: int, world: int, device: torch.device, opts: dict, log) -> list[Timing]:
    """Set every method up (collectively), time them interleaved, check every checked call; a method whose
    setup, call or check fails on any rank is reported failed with the reason and timed no further."""
    live: list[tuple[str, int, object]] = []
    results: dict[str, Timing] = {}
    for name, k, factory in methods:
        err = None
        try:
            inst = factory()
        except Exception as exc:  # an API this torch lacks: reported, the other methods still run
            err = f"setup: {type(exc).__name__}: {exc}"
        if agree(err is None, device):
            live.append((name, k, inst))
        else:
            results[name] = Timing(name, k, None, None, 0, err or "setup failed on another rank")
    samples: dict[str, list[float]] = {name: [] for name, _, _ in live}
    failed: dict[str, str] = {}
    for it in range(opts["warmup"] + opts["iters"]):
        order = live[it % len(live) :] + live[: it % len(live)]  # every method first in turn
        for name, _, inst in order:
            if name in failed:
                continue
            ms, problem = 0.0, None
            try:  # every rank issues the same calls, so an API error raises on all of them alike
                ms = timer.call(inst)
                if inst.checked:
                    problem = check_output(inst.c, gather_own_blocks(inst.c, rank, world), ref, rank, BF16_TOL)
            except Exception as exc:
                problem = f"run: {type(exc).__name__}: {exc}"
            if not agree(problem is None, device):
                failed[name] = problem or "failed on another rank"
                log(f"{name}: FAILED at call {it}: {failed[name]}")
            elif it >= opts["warmup"]:
                samples[name].append(ms)
    for name, k, _ in live:
        if name in failed:
            results[name] = Timing(name, k, None, None, 0, failed[name])
            continue
        per_rank: list[list[float] | None] = [None] * world
        dist.all_gather_object(per_rank, samples[name])
        slowest = [max(v) for v in zip(*per_rank)]  # the slowest rank's time per iteration
        med, iqr = median_iqr(slowest)
        results[name] = Timing(name, k, med, iqr, len(slowest))
    return [results[name] for name, _, _ in methods]


def symm_backend(device: torch.device) -> str | None:
    try:
        return symm_mem.get_backend(device)
    except (AttributeError, RuntimeError) as exc:  # an older torch
        return f"unknown ({exc})"


def worker(rank: int, world: int, port: int, opts: dict) -> None:
    os.environ.update(SAFE_ENV)
    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group(
        "nccl",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=CALL_TIMEOUT,
        device_id=device,
    )
    out = Path(opts["partial"])
    try:  # peer-mapped memory moved by copies (the CUDA backend, also the default), not NVSHMEM; no multicast
        symm_mem.set_backend("CUDA")
    except (AttributeError, RuntimeError) as exc:  # an older torch: its default backend, named in the result
        print(f"[torch] rank {rank}: symmetric-memory backend left as it is: {exc}", flush=True)

    def log(msg: str) -> None:
        if rank == 0:
            print(f"[torch] {msg}", flush=True)

    try:
        for shape in shapes_for(world, opts["configs"]):
            t0 = time.monotonic()
            timings = bench_config(shape, rank, world, device, opts, lambda msg, n=shape.name: log(f"{n} {msg}"))
            if rank == 0:  # one line per config: what finished survives a later hang
                with out.open("a") as f:
                    row = {"config": asdict(shape), "methods": [asdict(t) for t in timings]}
                    row["symm_mem_backend"] = symm_backend(device)
                    f.write(json.dumps(row) + "\n")
                log(f"{shape.name}: {len(timings)} methods in {time.monotonic() - t0:.1f} s")
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_torch(opts: dict, world: int, limit_s: float) -> list[dict]:
    Path(opts["partial"]).unlink(missing_ok=True)
    ctx = mp.start_processes(worker, args=(world, free_port(), opts), nprocs=world, join=False, start_method="spawn")
    deadline = time.monotonic() + limit_s
    try:
        while not ctx.join(timeout=5):
            if time.monotonic() > deadline:
                print(f"[torch] still running after {limit_s:.0f} s: stopped", flush=True)
                for p in ctx.processes:
                    p.kill()
                break
    except Exception as exc:  # a worker's exception: what it wrote before stays
        print(f"[torch] a worker failed: {exc}", flush=True)
    lines = Path(opts["partial"]).read_text().splitlines() if Path(opts["partial"]).exists() else []
    return [json.loads(x) for x in lines]


# ---- cuco's candidate through the frozen harness --------------------------------------------------------------


def run_cuco(source: Path, ranks: int, out: Path, configs: list[str] | None, limit_s: float) -> dict:
    """verify (every config, hidden ones included), then benchmark, as run_local.py runs the engine's jobs."""
    env = {**os.environ, **SAFE_ENV}
    res: dict = {"source": str(source)}
    for mode in ("verify", "benchmark"):
        argv = [sys.executable, str(RUN_LOCAL), str(WORKLOAD), "--source", str(source), "--mode", mode]
        argv += ["--ranks", str(ranks), "--result", str(out / f"cuco.{mode}.json")]
        if configs and mode == "benchmark":
            argv += ["--configs", ",".join(configs)]
        t0 = time.monotonic()
        try:
            p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=limit_s, cwd=ROOT)
            rc, log, tail = p.returncode, p.stdout + p.stderr, p.stderr[-1500:]
        except subprocess.TimeoutExpired:
            rc, log, tail = -9, "", f"timed out after {limit_s:.0f} s"
        (out / f"cuco.{mode}.log").write_text(log or tail)
        print(f"[cuco] {mode}: exit {rc} in {time.monotonic() - t0:.0f} s", flush=True)
        res[mode] = {"exit": rc}
        if rc != 0:
            res[mode]["error"] = tail
            return res
    bench = json.loads((out / "cuco.benchmark.json").read_text())
    res["configs"] = {
        c["name"]: {
            "candidate_ms": c.get("candidate_ms"),
            "candidate_iqr_ms": c.get("candidate_spread"),
            "harness_baseline_ms": c.get("baseline_ms"),
            "harness_baseline_iqr_ms": c.get("baseline_spread"),
            "comp_ms": c.get("comp_ms"),
            "comm_ms": c.get("comm_ms"),
        }
        for c in bench.get("configs") or []
    }
    return res


# ---- the table ------------------------------------------------------------------------------------------------


def ratios(torch_rows: list[dict], cuco: dict) -> list[dict]:
    """Per config: every method's median / cuco's median; per family (its best chunk count) too."""
    out = []
    cc = cuco.get("configs") or {}
    for row in torch_rows:
        name = row["config"]["name"]
        cand = (cc.get(name) or {}).get("candidate_ms")
        entry: dict = {"config": name, "cuco_ms": cand, "methods": {}, "best_per_family": {}}
        for t in row["methods"]:
            r = t["median_ms"] / cand if (cand and t["median_ms"]) else None
            entry["methods"][t["method"]] = {
                "median_ms": t["median_ms"],
                "iqr_ms": t["iqr_ms"],
                "vs_cuco": r,
                "error": t["error"],
            }
            fam = t["method"].rstrip("0123456789")
            best = entry["best_per_family"].get(fam)
            if t["median_ms"] is not None and (best is None or t["median_ms"] < best["median_ms"]):
                entry["best_per_family"][fam] = {"method": t["method"], "median_ms": t["median_ms"], "vs_cuco": r}
        out.append(entry)
    return out


def ms(x: object) -> str:
    return f"{x:.4f}" if isinstance(x, float) and math.isfinite(x) else "-"


def print_table(rows: list[dict], cuco: dict) -> None:
    fams = [
        "part_gemm",
        "part_allgather",
        "matmul_allgather",
        "nccl_ag_chunks",
        "nccl_p2p_chunks",
        "symm_push_chunks",
        "symm_pull_chunks",
    ]
    print("\nms (median of the slowest rank); in brackets: time / cuco's time (above 1: cuco faster)")
    print("| config | cuco | harness baseline | " + " | ".join(fams) + " |")
    print("| --- " * (3 + len(fams)) + "|")
    cc = cuco.get("configs") or {}
    for e in rows:
        c = cc.get(e["config"]) or {}
        cells = []
        for f in fams:
            b = e["best_per_family"].get(f)
            if not b:
                cells.append("failed / not run")
                continue
            r = f"{b['vs_cuco']:.2f}" if b["vs_cuco"] else "-"
            k = b["method"][len(f) :]
            cells.append(f"{b['median_ms']:.4f} ({r}){' k=' + k if k else ''}")
        print(
            f"| {e['config']} | {ms(e['cuco_ms'])} | {ms(c.get('harness_baseline_ms'))} | " + " | ".join(cells) + " |"
        )


def machine() -> dict:
    info = {"torch": torch.__version__, "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")}
    try:
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as exc:  # reported, not fatal: the CPU-side test imports this module
        info["gpus"] = repr(exc)
    return info


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--chunks", default="2,4,8")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=41)
    ap.add_argument("--configs", help="comma-separated config names (default: every bench config of --ranks)")
    ap.add_argument("--cuco-source", type=Path, default=DEFAULT_CUCO_SOURCE)
    ap.add_argument("--no-cuco", action="store_true", help="the PyTorch methods alone")
    ap.add_argument("--cuco-limit", type=float, default=300, help="seconds for each harness stage (build included)")
    ap.add_argument("--torch-limit", type=float, default=240, help="seconds for every PyTorch method together")
    a = ap.parse_args()
    os.environ.update(SAFE_ENV)
    problem = table_mismatch(WORKLOAD / "workload.yaml")
    if problem:
        raise SystemExit(problem)
    if torch.cuda.device_count() < a.ranks:
        raise SystemExit(f"needs {a.ranks} GPUs, sees {torch.cuda.device_count()}")
    names = a.configs.split(",") if a.configs else None
    shapes_for(a.ranks, names)  # unknown names end here, before anything runs
    a.out.mkdir(parents=True, exist_ok=True)
    cuco: dict = {"skipped": True}
    if not a.no_cuco:
        cuco = run_cuco(a.cuco_source.resolve(), a.ranks, a.out, names, a.cuco_limit)
    opts = {
        "chunks": [int(x) for x in a.chunks.split(",")],
        "warmup": a.warmup,
        "iters": a.iters,
        "configs": names,
        "partial": str(a.out / "torch_rows.jsonl"),
    }
    rows = run_torch(opts, a.ranks, a.torch_limit)
    table = ratios(rows, cuco)
    result = {"machine": machine(), "ranks": a.ranks, "opts": opts, "cuco": cuco, "torch": rows, "ratios": table}
    (a.out / "torch_gemm_allgather.json").write_text(json.dumps(result, indent=1))
    print_table(table, cuco)
    return 0 if rows and (a.no_cuco or cuco.get("configs")) else 1


if __name__ == "__main__":
    sys.exit(main())
