"""`cuco validate WORKLOAD`: the spec, the blocks and the variants; then a real compile of the seed and of
every variant (where the compiler is present), and a verify run of the seed where it can run here."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import sys

from rich.console import Console
from rich.markup import escape

from engine import blocks
from engine.evaluation import CANDIDATE_OBJECT, build_job, policy_refusal, run_job
from engine.harness_result import ResultError, parse_result
from engine.workload import load_workload
from remote.local import LocalExecutor


def validate_workload(spec: str, compile_: bool = True) -> int:
    console = Console()
    w = load_workload(spec)   # InputError (exit 2) names the file and the field
    space = w.design_space
    console.print(f"[bold]{w.name}[/] ({w.language}, {w.ranks} ranks) at {w.root}")
    console.print(f"  configs: {', '.join(c.name + ('' if c.public else ' (hidden)') for c in w.configs)}")
    console.print(f"  design space: {', '.join(f'{d.name}[{len(d.values)}]' for d in space.dimensions.values())}; "
                  f"archive cell: {', '.join(space.archive_dims)}")
    console.print(f"  seed point: {space.descriptor(w.seed_source)}")
    for todo in todo_markers(w.root):
        console.print(f"  [yellow]TODO[/] {escape(todo)}")
    sources = {"seed": w.seed_source}
    for v in space.variants:
        sources[v.name] = blocks.replace_blocks(w.seed_source, v.bodies)
        console.print(f"  variant {v.name}: {v.point}")
    if not compile_:
        console.print("[green]spec OK[/] (not compiled: --no-compile)")
        return 0
    compiler = w.build_command.split()[0]
    if shutil.which(compiler) is None:
        console.print(f"[yellow]spec OK; {compiler} is not on PATH here, so nothing was compiled[/]")
        return 0
    if w.build_nccl and not _nccl_headers_here():
        console.print("[yellow]spec OK; the NCCL headers are not found here (pip install 'cuco\\[cuda]', i.e. "
                      "nvidia-nccl-cu13==2.28.9, or set NCCL_HOME), so nothing was compiled[/]")
        return 0
    return asyncio.run(_compile_all(console, w, sources))


def todo_markers(root) -> list[str]:
    """`CUCO-TODO` markers (left by `cuco init` where it could not place something) as file:line: text."""
    found = []
    for path in sorted(root.iterdir()):
        if path.is_file() and path.suffix in (".cu", ".cpp", ".cuh", ".h", ".yaml"):
            for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if "CUCO-TODO" in line:
                    found.append(f"{path}:{i}: {line.split('CUCO-TODO', 1)[1].lstrip(':) ').strip()}")
    return found


def _nccl_headers_here() -> bool:
    """Whether a local build finds NCCL as the build jobs look for it: $NCCL_HOME, else the wheel."""
    if os.environ.get("NCCL_HOME"):
        return True
    try:
        return importlib.util.find_spec("nvidia.nccl") is not None
    except ModuleNotFoundError:   # no `nvidia` package at all
        return False


async def _compile_all(console: Console, w, sources: dict[str, str]) -> int:
    executor = LocalExecutor(extra_env={"CUCO_PYTHON": sys.executable})
    failures = 0
    try:
        jobs = {name: asyncio.create_task(executor.run(build_job(w, src, f"validate-{name}")))
                for name, src in sources.items()}
        for name, task in jobs.items():
            res = await task
            if res.ok and "cuco_candidate" in res.outputs:
                refusal = policy_refusal(w, sources[name], res.outputs.get(CANDIDATE_OBJECT))
                if refusal:   # the engine would refuse it before running it
                    failures += 1
                    console.print(f"  [red]{name}[/]: {refusal}")
                else:
                    console.print(f"  [green]compiled[/] {name} ({res.duration_s:.1f} s), passes the symbol policy")
            else:
                failures += 1
                console.print(f"  [red]compile failed[/] {name}: {res.error or 'exit ' + str(res.rc)}\n{res.log[-3000:]}")
        seed_bin = (await jobs["seed"]).outputs.get("cuco_candidate")
        if seed_bin and (w.launch_gpus == 0 or executor.max_gpus_per_job >= w.launch_gpus):
            res = await executor.run(run_job(w, seed_bin, "verify", 12345, "validate-verify"))
            try:
                result = parse_result(res.outputs.get("result.json"), "verify", [c.name for c in w.configs])
                ok = result.correct
                detail = "" if ok else result.mismatch_summary()
            except ResultError as exc:
                ok, detail = False, f"{exc}\n{res.log[-2000:]}"
            if ok:
                console.print("  [green]seed verified[/] on every config")
            else:
                failures += 1
                console.print(f"  [red]seed does not verify[/]: {detail}")
        elif seed_bin:
            console.print(f"  (seed not run: it needs {w.launch_gpus} GPUs, this machine has {executor.max_gpus_per_job})")
    finally:
        await executor.close()
    if failures:
        console.print(f"[red]{failures} problem(s)[/]")
        return 1
    console.print("[green]workload OK[/]")
    return 0
