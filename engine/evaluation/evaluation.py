"""The evaluation cascade: build -> verify (every config, hidden ones too) -> benchmark (A B A B).

Each stage is one job on an executor (local or SSH) with its own timeout. The verdict comes only from
the harness's result.json; a stage that fails stops the cascade with a reason the LLM and the user see.
Every verb that builds or runs a candidate comes here (`cuco run`, `validate`, `profile`, `transform`,
`init --llm`): the job files' names, the harness's spec and the checks on its result are written once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from remote.jobs import Executor, JobResult, JobSpec, JobStatus
from remote.sandbox import WEAKER_NOTICES

from .. import symbol_policy
from ..llm.keys import redact
from ..stages import BENCHMARK, BUILD, CONFIRM, FROZEN, VERIFY
from ..timeline import timeline
from ..workload import Workload
from . import faults, protocol, wall_clock
from .faults import Fault
from .harness_result import HarnessResult, ResultError, parse_result
from .pooled import pooled

BINARY = "cuco_candidate"
CANDIDATE_OBJECT = "cuco_candidate.o"  # the candidate's translation unit alone, for the symbol policy
SPEC = "spec.json"
RESULT = "result.json"
FEEDBACK_CHARS = 2000
BUILT = "built"  # evaluate_source(upto=BUILD): compiled and admitted, not run
VERIFIED = "verified"  # evaluate_source(upto=VERIFY): correct on every config, not measured

# Resolve the NCCL wheel on the node itself: its path differs from the engine's machine.
NCCL_PRELUDE = (
    'if [ -z "${NCCL_HOME:-}" ]; then '
    'NCCL_HOME=$(${CUCO_PYTHON:-python3} -c "import nvidia.nccl as m; print(list(m.__path__)[0])" 2>/dev/null) '
    '|| { echo "cuco: NCCL not found on this node: pip install nvidia-nccl-cu13==2.28.9 or set NCCL_HOME" >&2; exit 97; }; '
    "fi; export NCCL_HOME; "
)


# After a job that failed, the job's own shell (never the candidate's code) tries to write 64 KiB in the
# job's directory: where it cannot, the disk is full, and the job exits faults.NO_SPACE_EXIT, which
# faults.py takes for the environment's fault. Nothing the job printed is read for that.
SPACE_PROBE = (
    'rc=$?; if [ "$rc" -ne 0 ]; then '
    "if ! (printf '%65536s' '' >.cuco-space) 2>/dev/null; then rm -f .cuco-space; "
    f'echo "cuco: no space left in the job directory" >&2; exit {faults.NO_SPACE_EXIT}; fi; '
    'rm -f .cuco-space; fi; exit "$rc"'
)


@dataclass
class StageRecord:
    stage: str
    status: str  # ok | failed | timeout | incorrect | cancelled | lost | error
    rc: int | None = None
    duration_s: float = 0.0
    node: str = ""
    attempt: int = 1
    log: str = ""
    result: dict[str, Any] | None = None


@dataclass
class EvalOutcome:
    status: str  # done | incorrect | failed | refused (by the symbol policy, before anything ran)
    reason: str = ""
    feedback: str = ""  # what an LLM (and the user) is told about a failure
    speedup: float | None = None
    time_ms: float | None = None
    baseline_ms: float | None = None
    metrics: dict[str, Any] | None = None
    stages: list[StageRecord] = field(default_factory=list)
    timelines: dict[str, dict[str, Any]] = field(default_factory=dict)  # raw records per config (timeline.py)
    fault: Fault | None = None  # whose failure it was (faults.py); None when nothing failed

    @property
    def correct(self) -> bool | None:
        if self.status == "done":
            return True
        if self.status == "incorrect":
            return False
        return None


def trim(text: str, limit: int = FEEDBACK_CHARS) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    half = limit // 2
    return text[:half] + "\n...[trimmed]...\n" + text[-half:]


def source_files(workload: Workload, source: str) -> dict[str, bytes]:
    files = dict(workload.harness_files)
    files[workload.candidate_name] = source.encode("utf-8")
    return files


def _object_name(source_name: str) -> str:
    return source_name.rsplit(".", 1)[0] + ".frozen.o"


def build_job(workload: Workload, source: str, job_id: str, frozen_objects: dict[str, bytes] | None = None) -> JobSpec:
    """Compile the candidate alone to an object (the symbol policy inspects it: it comes back with the
    binary), then link the frozen sources or their cached objects first and it last: where both define
    the same inline or template code, the harness's copy is the one kept."""
    files = source_files(workload, source)
    frozen = list(workload.harness_sources)
    if frozen_objects:
        for name in frozen:
            files.pop(name, None)
        files.update(frozen_objects)
        frozen = [_object_name(n) for n in frozen]
    compile_ = workload.build_command.replace("{sources}", "-c " + shlex.quote(workload.candidate_name)).replace(
        "{binary}", CANDIDATE_OBJECT
    )
    link = workload.build_command.replace(
        "{sources}", " ".join(shlex.quote(s) for s in [*frozen, CANDIDATE_OBJECT])
    ).replace("{binary}", BINARY)
    script = (
        "( set -e; " + (NCCL_PRELUDE if workload.build_nccl else "") + compile_ + "; " + link + " ); " + SPACE_PROBE
    )
    return JobSpec(
        job_id=job_id,
        argv=["sh", "-c", script],
        files=files,
        outputs=[BINARY, CANDIDATE_OBJECT],
        timeout_s=workload.timeouts[BUILD],
        kind="build",
        cpus=1,
    )


def frozen_objects_job(workload: Workload, job_id: str) -> JobSpec:
    """Compile each frozen source once (`-c`), with the workload's own compiler and flags, all at once: every
    candidate's build waits for these objects, so the first GPU job of a run waits for the slowest of them
    rather than for their sum. It fails if any compile fails, after all have ended. It asks for one CPU slot
    (a batch system would hold a larger request for a node that has the cores; a node's own slot table caps
    it anyway): while it runs, every other build of the run waits for it, so the cores it borrows are idle."""
    names = workload.harness_sources
    compiles = [
        "( "
        + workload.build_command.replace("{sources}", "-c " + shlex.quote(name)).replace(
            "{binary}", shlex.quote(_object_name(name))
        )
        + f" ) & p{i}=$!"
        for i, name in enumerate(names)
    ]
    waits = "s=0; " + "".join(f"wait $p{i} || s=1; " for i in range(len(names))) + "exit $s"
    script = (
        "( set -e; "
        + (NCCL_PRELUDE if workload.build_nccl else "")
        + "; ".join([*compiles, waits])
        + " ); "
        + SPACE_PROBE
    )
    return JobSpec(
        job_id=job_id,
        argv=["sh", "-c", script],
        files=dict(workload.harness_files),
        outputs=[_object_name(n) for n in names],
        timeout_s=workload.timeouts[BUILD],
        kind="build",
        cpus=1,
    )


class FrozenObjectCache:
    """The frozen harness compiled once per engine (per content), shared by every candidate's build.
    If it cannot be built, builds fall back to compiling everything."""

    def __init__(self) -> None:
        self._objects: dict[str, dict[str, bytes] | None] = {}
        self._lock = asyncio.Lock()
        self._last_key: tuple[Workload, str] | None = None  # a workload does not change: hash it once

    def _key(self, workload: Workload) -> str:
        if self._last_key is None or self._last_key[0] is not workload:
            key = hashlib.sha256(
                json.dumps(
                    [
                        workload.build_command,
                        sorted((n, hashlib.sha256(d).hexdigest()) for n, d in workload.harness_files.items()),
                    ]
                ).encode()
            ).hexdigest()
            self._last_key = (workload, key)
        return self._last_key[1]

    async def get(self, workload: Workload, executor: Executor, job_id: str) -> dict[str, bytes] | None:
        if not workload.cache_frozen:
            return None
        key = self._key(workload)
        async with self._lock:
            if key not in self._objects:
                res = await executor.run(frozen_objects_job(workload, job_id))
                wanted = [_object_name(n) for n in workload.harness_sources]
                ok = res.ok and all(n in res.outputs for n in wanted)
                self._objects[key] = {n: res.outputs[n] for n in wanted} if ok else None
            return self._objects[key]


def fresh_seed() -> int:
    """The inputs' seed: 52 random bits per evaluation (exact in the spec's JSON number), never derived
    from anything a candidate knows, so it cannot make a peer's inputs instead of receiving them."""
    return secrets.randbits(52) | 1


def mode_configs(workload: Workload, mode: str) -> list:
    """The configs a harness run in `mode` covers: every one to verify, the benchmarked ones to measure."""
    return list(workload.configs if mode == VERIFY else workload.bench_configs)


def spec_json(
    workload: Workload, mode: str, seed: int, *, configs: list | None = None, timeline: bool | None = None
) -> bytes:
    """The harness's spec (the one builder of it). `configs`: a subset (default: the mode's);
    `timeline`: turn the harness's profiled call on or off (default: the harness's)."""
    configs = mode_configs(workload, mode) if configs is None else configs
    spec: dict[str, Any] = {
        "mode": mode,
        "seed": seed,
        "ranks": workload.ranks,
        "configs": [{"name": c.name, "params": c.params} for c in configs],
        "tolerances": workload.tolerances,
        "warmup": workload.warmup,
        "iters": workload.iters,
        **protocol.rounds_spec(workload.iters),
    }
    if timeline is not None:
        spec["timeline"] = timeline
    return json.dumps(spec, sort_keys=True).encode()


# The nonce reaches the harness as its stdin: a subshell opens the file, removes its name and execs the
# harness in its own place, so no process ever holds the nonce but the harness (which is not dumpable and
# closes the descriptor once read); no shell reads it into its memory, none keeps the file open. The
# harness echoes it in result.json: a result written by anyone else lacks it.
NONCE_FILE = ".nonce"
NONCE_WRAPPER = '( exec <.nonce && rm -f .nonce && exec "$@" )'


def launch_argv(workload: Workload) -> list[str]:
    """The workload's launch command with the job's file names filled in."""
    return [
        a.replace("{binary}", BINARY)
        .replace("{ranks}", str(workload.ranks))
        .replace("{spec}", SPEC)
        .replace("{result}", RESULT)
        for a in workload.launch_command
    ]


def run_job(
    workload: Workload,
    binary: bytes,
    mode: str,
    seed: int,
    job_id: str,
    nonce: str | None = None,
    *,
    configs: list | None = None,
    timeline: bool | None = None,
    wrapper: str | None = None,
    outputs: tuple[str, ...] = (),
    timeout_s: float | None = None,
) -> JobSpec:
    """A harness run in `mode` (verify or benchmark). `wrapper`: an sh script that runs the launch command
    as "$@" (a profiler around it); `outputs`: files it brings back beside result.json."""
    argv = launch_argv(workload)
    stage = VERIFY if mode == VERIFY else BENCHMARK
    files = {BINARY: binary, SPEC: spec_json(workload, mode, seed, configs=configs, timeline=timeline)}
    if nonce is not None:  # innermost: a profiler around the harness never holds it either
        argv = ["sh", "-c", NONCE_WRAPPER, "sh", *argv, "--nonce-stdin"]
        files[NONCE_FILE] = nonce.encode()
    if wrapper is not None:
        argv = ["sh", "-c", wrapper, "sh", *argv]
    argv = ["sh", "-c", '"$@"; ' + SPACE_PROBE, "sh", *argv]
    return JobSpec(
        job_id=job_id,
        argv=argv,
        files=files,
        executable=[BINARY],
        outputs=[RESULT, *outputs],
        timeout_s=timeout_s or workload.timeouts[stage],
        gpus=workload.launch_gpus,
        cpus=max(1, workload.ranks) if mode == BENCHMARK else 1,
        env=dict(workload.launch_env),
        kind="run",
    )


StageHook = Callable[[str, StageRecord | None], Awaitable[None]]


def held_beyond_bound(benches: list[HarnessResult], pooled_result: HarnessResult) -> list[dict[str, Any]]:
    """The configs beyond the overlap bound in the pooled rounds and in every job on its own: one measurement
    never holds a candidate (the seed included). A bound part one job read high (a burst during its
    compute-only or communication-only samples) flags that job alone; a candidate really beyond the bound,
    or gaming it, is beyond in each."""
    flags = pooled_result.beyond_bound()
    for result in benches if len(benches) > 1 else []:
        each = {f["config"] for f in result.beyond_bound()}
        flags = [f for f in flags if f["config"] in each]
    return flags


def _interfered(job: JobResult) -> bool:
    """The node was oversubscribed or had its cores stolen while the job ran (remote/interference.py)."""
    return bool(job.interference and job.interference.get("interfered"))


def _measure_again(result: HarnessResult, confirm_if: Callable[[float], bool] | None) -> bool:
    """A second benchmark job before the result counts: a would-be new best (when the caller asks), and any
    result beyond the overlap bound, which a person would otherwise be asked to judge on one measurement."""
    if result.beyond_bound():
        return True
    return confirm_if is not None and bool(result.speedup) and confirm_if(result.speedup or 0.0)


async def _run(executor: Executor, spec: JobSpec) -> JobResult:
    """Run a job; its log and error come back with every known secret value blanked, before anything
    (the store, a reason, the LLM's feedback) reads them."""
    job = await executor.run(spec)
    job.log, job.error = redact(job.log), redact(job.error)
    return job


def _record(stage: str, job: JobResult) -> StageRecord:
    status = {
        JobStatus.OK: "ok" if job.rc == 0 else "failed",
        JobStatus.TIMEOUT: "timeout",
        JobStatus.CANCELLED: "cancelled",
        JobStatus.LOST: "lost",
        JobStatus.ERROR: "error",
    }[job.status]
    return StageRecord(stage, status, job.rc, job.duration_s, job.node, job.attempts, job.log)


def _first_error(log: str) -> str:
    """': ' + the log's first line that reports an error (a compiler's `file:line: error: ...`), or ''."""
    for line in (log or "").splitlines():
        if "error" in line.lower() and line.strip():
            return ": " + line.strip()[:200]
    return ""


def policy_refusal(workload: Workload, source: str, obj: bytes | None) -> str | None:
    """The symbol policy's reason for refusing the candidate (its blocks' inline assembly, its object), or
    None. Checked between build and verify: nothing the candidate wrote has run yet."""
    asm = symbol_policy.check_source(source, workload.language)
    if asm:
        return "refused by the block rules: " + "; ".join(asm)
    if obj is None:
        return "refused by the symbol policy: the build returned no candidate object to inspect"
    verdict = symbol_policy.check(obj, workload)
    return None if verdict.ok else "refused by the symbol policy: " + verdict.reason


def _failure(stage: str, rec: StageRecord, job: JobResult) -> EvalOutcome:
    fault = faults.of_job(stage, job)
    if fault is not None and fault.environment:
        return EvalOutcome("failed", reason=fault.reason, feedback=f"{fault.reason}\n{trim(job.log)}", fault=fault)
    if rec.status == "timeout":
        reason = f"{stage} timed out ({job.error or 'killed at its timeout'})"
    elif rec.status == "failed":
        reason = f"{stage} failed with exit code {job.rc}" + _first_error(job.log)
    else:
        reason = f"{stage}: {rec.status}: {job.error}".rstrip(": ")
    return EvalOutcome("failed", reason=reason, feedback=f"{reason}\n{trim(job.log)}", stages=[])


@dataclass
class Built:
    """The build stage's end: the binary when the candidate compiled and the symbol policy admits it,
    else the outcome that says why not (failed or refused)."""

    binary: bytes | None
    stages: list[StageRecord]
    outcome: EvalOutcome | None = None


async def build_stage(
    workload: Workload,
    source: str,
    executor: Executor,
    *,
    job_prefix: str,
    on_stage: StageHook | None = None,
    frozen: FrozenObjectCache | None = None,
) -> Built:
    """Compile the candidate (with the frozen harness's cached objects where there are) and check its
    object against the symbol policy, before anything it wrote runs."""

    async def hook(stage: str, rec: StageRecord | None) -> None:
        if on_stage is not None:
            await on_stage(stage, rec)

    stages: list[StageRecord] = []
    await hook(BUILD, None)
    objects = await frozen.get(workload, executor, f"{job_prefix}-{FROZEN}") if frozen else None
    job = await _run(executor, build_job(workload, source, f"{job_prefix}-{BUILD}", objects))
    rec = _record(BUILD, job)
    stages.append(rec)
    await hook(BUILD, rec)
    if rec.status != "ok" or BINARY not in job.outputs:
        out = _failure(BUILD, rec, job)
        if rec.status == "ok":
            out.reason = "build produced no binary"
        out.stages = stages
        return Built(None, stages, out)
    # off the event loop: reading a CUDA object takes a few hundred ms
    refusal = await asyncio.to_thread(policy_refusal, workload, source, job.outputs.get(CANDIDATE_OBJECT))
    if refusal is not None:
        rec.status = "refused"
        await hook(BUILD, rec)
        return Built(None, stages, EvalOutcome("refused", reason=refusal, feedback=f"build: {refusal}", stages=stages))
    return Built(job.outputs[BINARY], stages)


def weaker_sandbox(stages: list[StageRecord]) -> str | None:
    """The weaker sandbox a node's user chose (CUCO_SANDBOX=unshare or none) where a stage's job ran in one,
    from the notice its launcher printed before anything of the job's ran; None under bwrap."""
    for name, notice in WEAKER_NOTICES.items():
        if any(notice in (st.log or "") for st in stages):
            return name
    return None


def _with_sandbox(metrics: dict[str, Any], stages: list[StageRecord]) -> dict[str, Any]:
    weaker = weaker_sandbox(stages)
    if weaker is not None:
        metrics["sandbox"] = f"{weaker} (weaker than bwrap: chosen by the node's CUCO_SANDBOX)"
    return metrics


def read_result(job: JobResult, mode: str, expected: list[str], nonce: str | None) -> HarnessResult:
    """The harness's result.json, believed only if it carries the job's nonce and its timings fit in the
    job's wall time as measured from outside; raises ResultError otherwise."""
    result = parse_result(job.outputs.get(RESULT), mode, expected, nonce)
    misfit = wall_clock.timings_misfit(result.raw, job.duration_s)  # timed from outside, by us
    if misfit:
        raise ResultError(misfit)
    return result


async def evaluate_source(
    workload: Workload,
    source: str,
    executor: Executor,
    *,
    job_prefix: str,
    seed: int,
    on_stage: StageHook | None = None,
    confirm_if: Callable[[float], bool] | None = None,
    frozen: FrozenObjectCache | None = None,
    upto: str = BENCHMARK,
) -> EvalOutcome:
    """Run the cascade. `job_prefix` makes job ids stable across engine restarts (an executor may
    re-adopt a job it already ran). When `confirm_if(speedup)` says so (a would-be new best), the
    benchmark is repeated on fresh inputs and the lower speedup is kept. `upto` stops the cascade early:
    BUILD after the build and the symbol policy (status `built`: compiled and admissible, never run, so
    never correct), VERIFY after the verify run (status `verified`: correct on every config, not measured)."""

    async def hook(stage: str, rec: StageRecord | None) -> None:
        if on_stage is not None:
            await on_stage(stage, rec)

    built = await build_stage(workload, source, executor, job_prefix=job_prefix, on_stage=on_stage, frozen=frozen)
    if built.binary is None:
        assert built.outcome is not None
        return built.outcome
    binary, stages = built.binary, built.stages
    if upto == BUILD:
        return EvalOutcome(BUILT, reason="built and admitted by the symbol policy; not run", stages=stages)

    results: list[HarnessResult] = []
    seen: list[dict[str, Any] | None] = []  # each benchmark job's interference reading
    repeats = 0
    plan = [(VERIFY, seed, VERIFY)] + ([(BENCHMARK, seed + 1, BENCHMARK)] if upto == BENCHMARK else [])
    n = 0
    while n < len(plan):
        mode, stage_seed, suffix = plan[n]
        n += 1
        await hook(mode, None)
        nonce = secrets.token_hex(16) if workload.harness_nonce else None
        job = await _run(executor, run_job(workload, binary, mode, stage_seed, f"{job_prefix}-{suffix}", nonce))
        rec = _record(mode, job)
        stages.append(rec)
        fault = faults.of_job(mode, job)
        if rec.status != "ok" and (
            not (rec.status == "failed" and RESULT in job.outputs) or (fault is not None and fault.environment)
        ):
            await hook(mode, rec)
            out = _failure(mode, rec, job)
            out.stages = stages
            return out
        expected = [c.name for c in mode_configs(workload, mode)]
        try:
            result = read_result(job, mode, expected, nonce)
        except ResultError as exc:
            rec.status = "failed"
            await hook(mode, rec)
            reason = f"{mode}: {exc}"
            return EvalOutcome("failed", reason=reason, feedback=f"{reason}\n{trim(job.log)}", stages=stages)
        rec.result = result.raw
        judged = faults.of_judge(mode, result.raw)
        if judged is not None:  # the harness's own setup failed before any candidate code ran
            rec.status = "failed"
            await hook(mode, rec)
            return EvalOutcome(
                "failed",
                reason=judged.reason,
                feedback=f"{judged.reason}\n{trim(job.log)}",
                stages=stages,
                fault=judged,
            )
        if job.rc != 0 and result.correct:
            # Whatever the file says: the judge writes a correct verdict and exits 0, or it did not finish.
            rec.status = "failed"
            await hook(mode, rec)
            reason = f"{mode}: the job exited with status {job.rc}: its result.json is not believed"
            return EvalOutcome("failed", reason=reason, feedback=f"{reason}\n{trim(job.log)}", stages=stages)
        if not result.correct:
            rec.status = "incorrect"
            await hook(mode, rec)
            summary = result.mismatch_summary()
            return EvalOutcome(
                "incorrect",
                reason=summary,
                feedback=f"{mode}: {summary}",
                stages=stages,
                metrics=_with_sandbox({VERIFY if mode == VERIFY else BENCHMARK: result.raw}, stages),
            )
        await hook(mode, rec)
        results.append(result)
        if mode == BENCHMARK:
            seen.append(job.interference)
            if len(plan) == 2 and _interfered(job) and not protocol.narrow(result.speedup, result.speedup_interval):
                repeats += 1  # taken again whatever else is asked: the rounds of both are pooled
            if len(plan) == 2 and (repeats or _measure_again(result, confirm_if)):
                plan.append((BENCHMARK, seed + 2, CONFIRM))

    if upto == VERIFY:
        return EvalOutcome(
            VERIFIED,
            reason="correct on every config; not measured",
            stages=stages,
            metrics=_with_sandbox({VERIFY: results[0].raw}, stages),
        )
    benches = results[1:]
    best = pooled(benches)  # a re-measurement's rounds join the first job's
    interval = best.speedup_interval
    metrics: dict[str, Any] = {
        VERIFY: results[0].raw,
        BENCHMARK: best.raw,
        "measurements": [r.speedup for r in benches],
        "speedup_interval": None if interval is None else [round(x, 4) for x in interval],
        "interference": seen,
        "interference_repeats": repeats,
    }
    flags = held_beyond_bound(benches, best)
    if flags:
        metrics["flags"] = flags
    if best.timelines:
        metrics["timeline"] = timeline.summarize(best.timelines)
    _with_sandbox(metrics, stages)
    return EvalOutcome(
        "done",
        speedup=best.speedup,
        time_ms=best.time_ms,
        baseline_ms=best.baseline_ms,
        metrics=metrics,
        stages=stages,
        timelines=best.timelines,
    )
