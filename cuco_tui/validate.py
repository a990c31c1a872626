"""`cuco validate WORKLOAD`: the spec, the blocks and the variants; then a real compile of the seed first
(where the compiler is present) and a verify run of it where it can run here; then every variant, built in
parallel, unless the seed already failed in a way every variant shares. Each distinct compiler error is one
line; the full log of every build or verify that fails is written to a folder of its own
(cuco-validate-NAME-* in the system's temporary folder), named in the output."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from engine import blocks
from engine.evaluation.evaluation import VERIFIED, FrozenObjectCache, evaluate_source, fresh_seed
from engine.evaluation.executors import close_executor, open_executor
from engine.stages import BUILD, VERIFY
from engine.store.schema import REFUSED
from engine.workload import load_workload

MAX_ERROR_LINES = 6  # distinct compiler errors printed per build; the rest are in the log
# a compiler or linker error line: nvcc/g++ `file(12): error: ...`, `file:12:3: error: ...`, ld's
# `undefined reference to ...`, and cuco's own build-job messages
ERROR_LINE = re.compile(r"(\berror\b[:\s]|undefined reference|cannot find -l|^cuco: )", re.IGNORECASE)
SUMMARY_LINE = re.compile(r"errors? detected in the compilation")  # nvcc's count, not an error of its own
JOB_DIR_PATH = re.compile(r"(/[^\s:'\"]*)?/(?=[^/\s:'\"]+\.(cu|cuh|h|hpp|cpp|o)\b)")


def validate_workload(spec: str, compile_: bool = True, seed_only: bool = False) -> int:
    console = Console()
    w = load_workload(spec)  # InputError (exit 2) names the file and the field
    space = w.design_space
    console.print(f"[bold]{w.name}[/] ({w.language}, {w.ranks} ranks) at {w.root}")
    console.print(f"  configs: {', '.join(c.name + ('' if c.public else ' (hidden)') for c in w.configs)}")
    console.print(
        f"  design space: {', '.join(f'{d.name}[{len(d.values)}]' for d in space.dimensions.values())}; "
        f"archive cell: {', '.join(space.archive_dims)}"
    )
    console.print(f"  seed point: {space.descriptor(w.seed_source)}")
    for todo in todo_markers(w.root):
        console.print(f"  [yellow]TODO[/] {escape(todo)}")
    sources = {"seed": w.seed_source}
    for v in space.variants:
        sources[v.name] = blocks.replace_blocks(w.seed_source, v.bodies)
    if space.variants:
        console.print(f"  variants: {len(space.variants)} ({escape(', '.join(v.name for v in space.variants))})")
    if not compile_:
        console.print("[green]spec OK[/] (not compiled: --no-compile)")
        return 0
    compiler = w.build_command.split()[0]
    if shutil.which(compiler) is None:
        console.print(f"[yellow]spec OK; {compiler} is not on PATH here, so nothing was compiled[/]")
        return 0
    if w.build_nccl:
        problem = nccl_problem()
        if problem:
            console.print(f"[yellow]spec OK; {escape(problem)}; so nothing was compiled[/]")
            return 0
    if seed_only:
        sources = {"seed": sources["seed"]}
    return asyncio.run(_compile_all(console, w, sources, LogFolder(w.name)))


def todo_markers(root) -> list[str]:
    """`CUCO-TODO` markers (left by `cuco init` where it could not place something) as file:line: text."""
    found = []
    for path in sorted(root.iterdir()):
        if path.is_file() and path.suffix in (".cu", ".cpp", ".cuh", ".h", ".yaml"):
            for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if "CUCO-TODO" in line:
                    found.append(f"{path}:{i}: {line.split('CUCO-TODO', 1)[1].lstrip(':) ').strip()}")
    return found


def nccl_problem() -> str | None:
    """Why a build job here would not find NCCL (None when it would): the jobs look in $NCCL_HOME, else
    in the NCCL wheel of this interpreter; they run with a private /tmp, so a wheel under /tmp is not
    theirs to see."""
    home = os.environ.get("NCCL_HOME")
    if home:
        where = Path(home)
        looked = f"NCCL_HOME={home}"
    else:
        try:
            spec = importlib.util.find_spec("nvidia.nccl")
        except ModuleNotFoundError:  # no `nvidia` package at all
            spec = None
        if spec is None or not spec.submodule_search_locations:
            return (
                "the NCCL headers are not found here (looked for $NCCL_HOME, unset, and the nvidia-nccl-cu13 "
                "wheel of this Python): pip install 'cuco[cuda]' (nvidia-nccl-cu13==2.28.9) or set NCCL_HOME"
            )
        where = Path(list(spec.submodule_search_locations)[0])
        looked = f"the nvidia-nccl-cu13 wheel at {where}"
    if not (where / "include" / "nccl.h").is_file():
        return f"no include/nccl.h in {looked}: set NCCL_HOME to an NCCL install (its include/ and lib/)"
    if where.resolve().is_relative_to("/tmp"):
        return (
            f"NCCL is {looked}, under /tmp, and build jobs run with a private /tmp that does not show the "
            "host's: install cuco (or NCCL) outside /tmp, or set NCCL_HOME to a copy outside /tmp"
        )
    return None


def distinct_errors(log: str) -> list[str]:
    """The compiler's and linker's error lines of a build log, each once (the job folder's path taken off,
    so the same error from two files or two builds reads the same), in order."""
    seen: dict[str, None] = {}
    for line in log.splitlines():
        if ERROR_LINE.search(line) and not SUMMARY_LINE.search(line):
            seen.setdefault(JOB_DIR_PATH.sub("", line.strip()), None)
    return list(seen)


class LogFolder:
    """Where the full logs of failed builds and verifies go: made when the first one is written (a
    validate that passes leaves nothing), outside the workload and the project home."""

    def __init__(self, workload_name: str) -> None:
        self.prefix = f"cuco-validate-{workload_name}-"
        self.path: Path | None = None

    def write(self, name: str, text: str) -> Path:
        if self.path is None:
            self.path = Path(tempfile.mkdtemp(prefix=self.prefix))
        return _write_log(self.path, name, text)


def _write_log(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.log"
    path.write_text(text)
    return path


def _stage_logs(out) -> str:
    return "\n".join(f"===== {s.stage}: {s.status}\n{s.log}" for s in out.stages)


async def _compile_all(console: Console, w, sources: dict[str, str], logs: LogFolder) -> int:
    """The seed through the engine's own cascade first (built, checked by the symbol policy, verified where
    this machine has the GPUs), then the variants in parallel, each built against the frozen harness
    compiled once. A seed that does not build stops here: its error is in code every variant shares."""
    failures = 0
    frozen = FrozenObjectCache()
    with tempfile.TemporaryDirectory(prefix="cuco-validate-") as scratch:  # job directories, nothing kept
        executor = await open_executor(Path(scratch), None, workload_name=w.name)
        try:
            have = executor.max_gpus_per_job
            runs_here = w.launch_gpus == 0 or have >= w.launch_gpus

            async def one(name: str, upto: str):
                t0 = time.monotonic()
                out = await evaluate_source(
                    w,
                    sources[name],
                    executor,
                    job_prefix=f"validate-{name}",
                    seed=fresh_seed(),
                    upto=upto,
                    frozen=frozen,
                )
                return out, time.monotonic() - t0

            seed, took = await one("seed", VERIFY if runs_here else BUILD)
            seed_built = _report(console, logs, "seed", seed, took)
            failures += not seed_built
            if seed_built:
                failures += _report_seed_run(console, w, logs, seed, runs_here, have)
            rest = [n for n in sources if n != "seed"]
            if rest and not seed_built:
                console.print(f"  {len(rest)} variants not built: they share the seed's code and would fail alike")
            elif rest:
                outs = await asyncio.gather(*(one(n, BUILD) for n in rest))
                failures += sum(not _report(console, logs, n, out, t) for n, (out, t) in zip(rest, outs))
        finally:
            await close_executor(executor)
    if failures:
        console.print(f"[red]{failures} problem(s)[/] (full logs: {logs.path}/)")
        return 1
    console.print("[green]workload OK[/]")
    return 0


def _report(console: Console, logs: LogFolder, name: str, out, took: float) -> bool:
    """One line for a build that passed; for one that did not, its distinct errors, one line each, and
    where its full log is. Whether it built and passed the symbol policy."""
    build = out.stages[0] if out.stages else None
    if out.status != REFUSED and build is not None and build.status == "ok":
        console.print(f"  [green]compiled[/] {escape(name)} ({took:.1f} s), passes the symbol policy")
        return True
    log = logs.write(name, _stage_logs(out) or out.reason)
    if out.status == REFUSED:  # the engine would refuse it before running it
        console.print(f"  [red]{escape(name)}[/]: {escape(out.reason)}")
        return False
    errors = distinct_errors(build.log if build is not None else "") or [out.reason]
    console.print(f"  [red]compile failed[/] {escape(name)} ({took:.1f} s): {len(errors)} distinct error(s)")
    for e in errors[:MAX_ERROR_LINES]:
        console.print(f"    {escape(e[:200])}", soft_wrap=True)
    more = f"{len(errors) - MAX_ERROR_LINES} more, " if len(errors) > MAX_ERROR_LINES else ""
    console.print(f"    ({more}full log: {log})", soft_wrap=True)
    return False


def _report_seed_run(console: Console, w, logs: LogFolder, seed, runs_here: bool, have: int) -> int:
    if not runs_here:
        console.print(f"  (seed not run: it needs {w.launch_gpus} GPUs, this machine has {have})")
        return 0
    if seed.status == VERIFIED:
        console.print("  [green]seed verified[/] on every config")
        return 0
    verify = seed.stages[-1]
    detail = (
        seed.reason
        if seed.status == "incorrect"
        else f"{seed.reason}; "
        + " | ".join(distinct_errors(verify.log)[:MAX_ERROR_LINES] or verify.log.strip().splitlines()[-3:])
    )
    console.print(f"  [red]seed does not verify[/]: {escape(detail[:600])}", soft_wrap=True)
    console.print(f"    (full log: {logs.write('seed', _stage_logs(seed))})", soft_wrap=True)
    return 1
