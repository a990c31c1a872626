#!/usr/bin/env python3
"""Build and run a CUDA workload's harness exactly as the engine does, on this machine.

    python3 workloads/_harness/cuda/run_local.py WORKLOAD_DIR [--source FILE] [--mode verify|benchmark]
            [--ranks N] [--configs a,b] [--seed S] [--warmup W] [--iters I] [--timeout S]
            [--build-dir DIR] [--build-only] [--result FILE] [--no-timeline]

It copies the candidate (FILE, default the workload's candidate; it is installed under the candidate's
name), the harness sources and headers flat into a job directory, runs build.command there with
{sources} / {binary} filled in and NCCL_HOME set to the nvidia-nccl-cu13 wheel, writes spec.json from
workload.yaml (verify: every config; benchmark: the bench configs; only configs whose `ranks` param is
absent or equal to --ranks), runs launch.command with launch.env plus the NVLink-multicast-off variables,
under the stage timeout, and prints result.json. Builds are cached per (workload, sources) hash; a workload
whose build says cache_frozen is built as the engine builds it: the candidate compiled alone and linked
after the frozen sources' objects, each compiled once per content under the build dir (the harness's object
is shared by every workload built there).
Exit status: 0 when result.json says correct, 1 when it does not, 2 on a build or launch problem.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository, for engine.evaluation.wall_clock
from engine.evaluation.wall_clock import timings_misfit  # noqa: E402

SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def nccl_home() -> str:
    if os.environ.get("NCCL_HOME"):
        return os.environ["NCCL_HOME"]
    import nvidia.nccl as m  # the nvidia-nccl-cu13 wheel

    return list(m.__path__)[0]


def harness_path(wdir: Path, rel: str) -> Path:
    """A harness entry: relative to the workload, or `cuco:...` in the cuco this file belongs to."""
    if rel.startswith("cuco:"):
        return Path(__file__).resolve().parent.parent.parent / rel[len("cuco:") :]
    return wdir / rel


def job_files(wdir: Path, spec: dict, source: Path) -> tuple[list[Path], list[Path], str]:
    cand_name = Path(spec["candidate"]).name
    sources = [harness_path(wdir, s) for s in spec["harness"]["sources"]]
    headers = [harness_path(wdir, h) for h in spec["harness"].get("headers", [])]
    return sources, headers, cand_name


def build(wdir: Path, spec: dict, source: Path, build_root: Path, timeout: float) -> Path:
    sources, headers, cand_name = job_files(wdir, spec, source)
    h = hashlib.sha256()
    h.update(spec["build"]["command"].encode())
    for p in [source, *sources, *headers]:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    job = build_root / f"{spec['name']}-{h.hexdigest()[:16]}"
    binary = job / "bench"
    if binary.exists():
        return job
    job.mkdir(parents=True, exist_ok=True)
    shutil.copy(source, job / cand_name)
    for p in [*sources, *headers]:
        shutil.copy(p, job / p.name)
    env = dict(os.environ)
    if spec["build"].get("nccl"):
        env["NCCL_HOME"] = nccl_home()
    t0 = time.time()
    command = spec["build"]["command"]
    log = ""
    if spec["build"].get("cache_frozen"):
        # as the engine builds: the candidate compiled alone, the frozen sources' objects (compiled once per
        # content, shared by every build that has them: the harness by every workload) linked first
        try:
            objects = [frozen_object(p, headers, command, env, build_root, timeout) for p in reversed(sources)]
            for o in objects:
                shutil.copy(o, job / o.name)
            log = _compile(
                command.replace("{sources}", "-c " + cand_name).replace("{binary}", "candidate.o"), job, env, timeout
            )
            names = [o.name for o in reversed(objects)] + ["candidate.o"]
        except BuildError as e:
            (job / "build.log").write_text(str(e))
            sys.stderr.write(f"build failed in {job}:\n{e}\n")
            raise SystemExit(2) from None
    else:
        names = [cand_name] + [p.name for p in sources]
    try:
        log += _compile(
            command.replace("{sources}", " ".join(names)).replace("{binary}", "bench.tmp"), job, env, timeout
        )
    except BuildError as e:
        (job / "build.log").write_text(log + str(e))
        sys.stderr.write(f"build failed in {job}:\n{e}\n")
        raise SystemExit(2) from None
    (job / "build.log").write_text(log)
    os.replace(job / "bench.tmp", binary)
    print(f"built {source} -> {binary} in {time.time() - t0:.0f} s", file=sys.stderr)
    return job


class BuildError(Exception):
    pass


def _compile(cmd: str, cwd: Path, env: dict, timeout: float) -> str:
    r = subprocess.run(cmd, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise BuildError(f"({r.returncode}) {cmd}\n{r.stdout}{r.stderr}")
    return r.stdout + r.stderr


def frozen_object(src: Path, headers: list[Path], command: str, env: dict, build_root: Path, timeout: float) -> Path:
    """SRC compiled alone (`-c`, the workload's own command and flags), cached by the command's and the
    sources' content; a lock file makes parallel builds that need the same object compile it once."""
    import fcntl

    h = hashlib.sha256(command.encode())
    for p in [src, *headers]:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    cache = build_root / "objects" / h.hexdigest()[:16]
    obj = cache / (src.name.rsplit(".", 1)[0] + ".frozen.o")
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if not obj.exists():
            for p in [src, *headers]:
                shutil.copy(p, cache / p.name)
            _compile(
                command.replace("{sources}", "-c " + src.name).replace("{binary}", obj.name + ".tmp"),
                cache,
                env,
                timeout,
            )
            os.replace(cache / (obj.name + ".tmp"), obj)
    return obj


def make_spec(
    spec: dict,
    mode: str,
    ranks: int,
    names: list[str] | None,
    seed: int,
    warmup: int | None,
    iters: int | None,
    timeout_s: float,
    timeline: bool = True,
) -> dict:
    configs = []
    for c in spec["configs"]:
        if names and c["name"] not in names:
            continue
        if mode == "benchmark" and not names and not c.get("bench", False):
            continue
        want = c.get("params", {}).get("ranks")
        if want is not None and int(want) != ranks:
            continue
        configs.append({"name": c["name"], "params": c.get("params", {})})
    b = spec.get("benchmark", {})
    return {
        "mode": mode,
        "seed": seed,
        "ranks": ranks,
        "configs": configs,
        "tolerances": spec.get("tolerances", {}),
        "warmup": warmup if warmup is not None else b.get("warmup", 2),
        "iters": iters if iters is not None else b.get("iters", 9),
        "timeout_s": timeout_s,
        "timeline": timeline,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", type=Path)
    ap.add_argument("--source", type=Path, help="candidate source (default: the workload's candidate)")
    ap.add_argument("--mode", choices=["verify", "benchmark"], default="verify")
    ap.add_argument("--ranks", type=int, help="ranks (GPUs) of the job (default: workload.yaml ranks)")
    ap.add_argument("--configs", help="comma-separated config names (default: all / the bench configs)")
    ap.add_argument("--seed", type=int, default=12345)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--iters", type=int)
    ap.add_argument("--timeout", type=float, help="stage timeout in seconds (default: workload.yaml)")
    ap.add_argument("--build-dir", type=Path, default=Path(os.environ.get("CUCO_BUILD_DIR", "/tmp/cuco-cuda-build")))
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--result", type=Path, help="copy result.json here")
    ap.add_argument("--no-timeline", action="store_true", help="benchmark without the profiled call after timing")
    a = ap.parse_args()

    wdir = a.workload.resolve()
    spec = yaml.safe_load((wdir / "workload.yaml").read_text())
    source = (a.source or (wdir / spec["candidate"])).resolve()
    job = build(wdir, spec, source, a.build_dir.resolve(), float(spec["timeouts"]["build"]))
    if a.build_only:
        print(job)
        return 0
    ranks = a.ranks or int(spec["ranks"])
    stage_timeout = a.timeout or float(spec["timeouts"][a.mode])
    names = a.configs.split(",") if a.configs else None
    # the harness kills its ranks a little before the stage timeout, so that it can still write its verdict
    sj = make_spec(
        spec, a.mode, ranks, names, a.seed, a.warmup, a.iters, max(5.0, stage_timeout - 10), not a.no_timeline
    )
    run_dir = job / f"run-{os.getpid()}"
    run_dir.mkdir()
    (run_dir / "spec.json").write_text(json.dumps(sj, indent=1))
    argv = [
        x.replace("{binary}", "../bench")
        .replace("{spec}", "spec.json")
        .replace("{result}", "result.json")
        .replace("{ranks}", str(ranks))
        for x in spec["launch"]["command"]
    ]
    env = dict(os.environ)
    env.update({k: str(v) for k, v in (spec["launch"].get("env") or {}).items()})
    env.update(SAFE_ENV)
    nonce = None
    if (spec.get("harness") or {}).get("nonce"):  # as the engine does: a per-job nonce on stdin, echoed back
        nonce = secrets.token_hex(16)
        argv = [*argv, "--nonce-stdin"]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, cwd=run_dir, env=env, start_new_session=True, stdin=subprocess.PIPE if nonce else None)
    if nonce:
        try:
            p.stdin.write(nonce.encode())
            p.stdin.close()
        except BrokenPipeError:  # the harness is already gone: its result (if any) is judged below
            pass
    try:
        rc = p.wait(timeout=stage_timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        print(f"stage timeout after {stage_timeout:.0f} s: process group killed", file=sys.stderr)
        rc = -9
    wall = time.monotonic() - t0
    res_path = run_dir / "result.json"
    if not res_path.exists():
        print(json.dumps({"error": f"no result.json (exit {rc}, {wall:.1f} s)"}))
        return 2
    text = res_path.read_text()
    if a.result:
        a.result.write_text(text)
    res = json.loads(text)
    if nonce and res.get("nonce") != nonce:
        res = {
            "correct": False,
            "configs": [],
            "error": "result.json does not carry this job's nonce: it was not "
            f"written by the harness (exit {rc}); not believed",
        }
    misfit = timings_misfit(res, wall)  # this process timed the job from outside, as the engine does
    if misfit:
        res = {**res, "correct": False, "error": misfit}
    print(json.dumps(res, indent=1))
    print(
        f"# {spec['name']} {source.name} mode={a.mode} ranks={ranks} exit={rc} wall={wall:.1f}s correct={res['correct']}",
        file=sys.stderr,
    )
    return 0 if res.get("correct") else 1


if __name__ == "__main__":
    sys.exit(main())
