"""An executor for recorded transcripts: builds and verifications run for real (the real compiler, the real
harness, the hidden sizes included); the benchmark's numbers are the ones recorded with the transcript.

A search's path depends on its measurements (which parent is drawn, which program is best), and timings on
a shared machine vary from run to run, so a replay that measured again would take another path and meet
prompts nobody answered. Recording, each benchmark runs for real and its per-config times are kept in the
transcript's `bench.json` (keyed by the candidate's source); replaying, the same numbers come back.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from engine.evaluation.evaluation import BINARY, NONCE_FILE, RESULT, SPEC
from engine.stages import BENCHMARK
from remote.jobs import Executor, JobResult, JobSpec, JobStatus, NodeState

NUMBERS = ("baseline_ms", "candidate_ms", "comp_ms", "comm_ms")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class RecordedBenchmarks(Executor):
    def __init__(self, inner: Executor, table: Path, record: bool):
        self.inner = inner
        self.table_path = table
        self.table: dict[str, dict[str, dict[str, float]]] = json.loads(table.read_text()) if table.is_file() else {}
        self.record = record
        self.sources: dict[str, str] = {}  # binary digest -> the candidate source's digest
        self.missing: list[str] = []

    async def start(self) -> None:
        await self.inner.start()

    async def close(self) -> None:
        await self.inner.close()

    def nodes(self) -> list[NodeState]:
        return self.inner.nodes()

    @property
    def max_gpus_per_job(self) -> int:
        return self.inner.max_gpus_per_job

    async def reconcile(self, keep: set[str]) -> list[str]:
        return await self.inner.reconcile(keep)

    async def run(self, spec: JobSpec) -> JobResult:
        if spec.kind == "build":
            result = await self.inner.run(spec)
            source = b"".join(v for k, v in sorted(spec.files.items()) if k.startswith("candidate"))
            if BINARY in result.outputs:
                self.sources[_digest(result.outputs[BINARY])] = _digest(source)
            return result
        request = json.loads(spec.files[SPEC])
        if request["mode"] != BENCHMARK:
            return await self.inner.run(spec)
        key = self.sources.get(_digest(spec.files[BINARY]), "")
        if key not in self.table:
            if not self.record:
                self.missing.append(key)
                return JobResult(spec.job_id, JobStatus.ERROR, error="no recorded benchmark for this candidate")
            measured = await self.inner.run(spec)
            if measured.status != JobStatus.OK or RESULT not in measured.outputs:
                return measured
            raw = json.loads(measured.outputs[RESULT])
            self.table[key] = {
                c["name"]: {k: round(float(c[k]), 4) for k in NUMBERS if isinstance(c.get(k), (int, float))}
                for c in raw.get("configs", [])
            }
            self.table_path.write_text(json.dumps(self.table, indent=1, sort_keys=True) + "\n")
        configs = []
        for c in request["configs"]:
            numbers = dict(self.table[key].get(c["name"], {}))
            if numbers.get("baseline_ms") and numbers.get("candidate_ms"):
                numbers["speedup"] = round(numbers["baseline_ms"] / numbers["candidate_ms"], 4)
            configs.append({"name": c["name"], "correct": True, "error": None, "mismatch": None, **numbers})
        result = {
            "harness": "recorded",
            "mode": BENCHMARK,
            "correct": True,
            "error": None,
            "configs": configs,
            "nonce": spec.files.get(NONCE_FILE, b"").decode() or None,
        }
        return JobResult(
            spec.job_id, JobStatus.OK, rc=0, outputs={RESULT: json.dumps(result).encode()}, node="local", duration_s=1.0
        )
