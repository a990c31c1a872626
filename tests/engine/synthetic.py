"""A synthetic executor: jobs take fixed (simulated) time and return harness-shaped results.

For tests of the engine's own logic (control operations, scheduling) and for the engine benchmark,
where what is measured is the engine, not the harness. The real harness is tested elsewhere.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from engine.evaluation.evaluation import BINARY, CANDIDATE_OBJECT, NONCE_FILE, RESULT, SPEC
from engine.stages import BENCHMARK, BUILD
from remote.jobs import Executor, JobResult, JobSpec, JobStatus, NodeState


@functools.lru_cache(maxsize=2)
def abi_object(interposing: bool = False) -> bytes:
    """An object file that defines the CPU ABI and nothing else, or also `clock_gettime` (compiled once)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "abi.cpp"
        src.write_text(
            'extern "C" int cuco_setup(const void*) { return 0; }\n'
            'extern "C" int cuco_run(const void*) { return 0; }\n'
            'extern "C" void cuco_teardown(void) {}\n'
            + ('extern "C" int clock_gettime(int, void*) { return 0; }\n' if interposing else "")
        )
        subprocess.run(["g++", "-O2", "-c", str(src), "-o", str(src.with_suffix(".o"))], check=True, timeout=60)
        return src.with_suffix(".o").read_bytes()


class SyntheticExecutor(Executor):
    def __init__(
        self,
        slots: int = 4,
        durations: dict[str, float] | None = None,
        fail_every: int = 0,
        refuse_every: int = 0,
        judge: Callable[[str], tuple[bool, float]] | None = None,
    ):
        self.slots = slots
        self.durations = durations or {"build": 0.01, "verify": 0.01, "benchmark": 0.01}
        self.fail_every = fail_every
        self.refuse_every = refuse_every  # every n-th source (by hash) builds an object that defines clock_gettime
        self.judge = judge  # source -> (correct, speedup), instead of the hash's verdict
        self._built: dict[str, str] = {}  # digest -> the candidate's source, for the judge
        self._sem = asyncio.Semaphore(slots)
        self.busy_s = 0.0  # slot-seconds spent running jobs
        self.jobs = 0
        self.running = 0
        self.max_running = 0
        self.job_ids: list[str] = []
        self.own_cpu_s = 0.0  # CPU the executor itself spends making results (not the engine's)
        self.timeline: list[tuple[float, int]] = []  # (time, jobs running) at every change

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    @property
    def max_gpus_per_job(self) -> int:
        return 0

    def nodes(self) -> list[NodeState]:
        return [NodeState(name="synthetic", cpu_slots=self.slots, cpu_busy=self.running, running_jobs=self.running)]

    async def run(self, spec: JobSpec) -> JobResult:
        async with self._sem:
            self.running += 1
            self.max_running = max(self.max_running, self.running)
            start = time.monotonic()
            self.timeline.append((start, self.running))
            try:
                stage = BUILD if spec.kind == "build" else json.loads(spec.files[SPEC])["mode"]
                await asyncio.sleep(self.durations.get(stage, 0.01))
                cpu0 = time.process_time()
                outputs = self._outputs(spec, stage)
                self.own_cpu_s += time.process_time() - cpu0
            finally:
                self.running -= 1
                self.timeline.append((time.monotonic(), self.running))
                took = time.monotonic() - start
                self.busy_s += took
                self.jobs += 1
                self.job_ids.append(spec.job_id)
            return JobResult(spec.job_id, JobStatus.OK, rc=0, outputs=outputs, node="synthetic", duration_s=took)

    def _outputs(self, spec: JobSpec, stage: str) -> dict[str, bytes]:
        if stage == BUILD:
            if BINARY not in spec.outputs:  # the frozen harness's objects
                return {o: b"obj" for o in spec.outputs}
            source = b"".join(v for k, v in sorted(spec.files.items()) if k.startswith("candidate"))
            digest = hashlib.sha256(source).hexdigest()
            self._built[digest] = source.decode(errors="replace")
            # the candidate's object, for the symbol policy: a real one that defines only the ABI (or, for the
            # sources refuse_every picks, the ABI and clock_gettime)
            refuse = self.refuse_every and int(digest[6:12], 16) % self.refuse_every == 1
            return {BINARY: digest.encode(), CANDIDATE_OBJECT: abi_object(interposing=bool(refuse))}
        digest = spec.files[BINARY].decode()
        request = json.loads(spec.files[SPEC])
        wrong = self.fail_every and int(digest[:6], 16) % self.fail_every == 0
        judged = self.judge(self._built[digest]) if self.judge is not None else None
        if judged is not None:
            wrong = not judged[0]
        configs = []
        for c in request["configs"]:
            entry = {"name": c["name"], "correct": not wrong, "error": None, "mismatch": None}
            if stage == BENCHMARK:
                # per config, so the best design point can differ from config to config
                mix = hashlib.sha256(f"{digest}:{c['name']}".encode()).hexdigest()
                speedup = 0.8 + (int(mix[:4], 16) % 1000) / 1000.0 if judged is None else judged[1]
                # the baseline's parts: compute 0.7 ms, communication 0.3 ms (bound 0.7 ms, speedup 1.43)
                entry.update(baseline_ms=1.0, candidate_ms=1.0 / speedup, speedup=speedup, comp_ms=0.7, comm_ms=0.3)
            if wrong:
                entry["mismatch"] = {"rank": 1, "index": 7, "expected": 1.0, "got": 0.0, "what": "gather"}
            configs.append(entry)
        result = {
            "harness": "synthetic",
            "mode": stage,
            "correct": not wrong,
            "error": None,
            "configs": configs,
            "nonce": spec.files.get(NONCE_FILE, b"").decode() or None,
        }
        return {RESULT: json.dumps(result).encode()}
