"""`cuco validate WORKLOAD`: the spec, the blocks and the variants; then a real compile of the seed and of
every variant (where the compiler is present), and a verify run of the seed where it can run here."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from engine import blocks
from engine.evaluation.evaluation import VERIFIED, evaluate_source, fresh_seed
from engine.evaluation.executors import close_executor, open_executor
from engine.evaluation.stages import BUILD, VERIFY
from engine.store.schema import REFUSED
from engine.workload import load_workload


def validate_workload(spec: str, compile_: bool = True) -> int:
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
        console.print(f"  variant {v.name}: {v.point}")
    if not compile_:
        console.print("[green]spec OK[/] (not compiled: --no-compile)")
        return 0
    compiler = w.build_command.split()[0]
    if shutil.which(compiler) is None:
        console.print(f"[yellow]spec OK; {compiler} is not on PATH here, so nothing was compiled[/]")
        return 0
    if w.build_nccl and not _nccl_headers_here():
        console.print(
            "[yellow]spec OK; the NCCL headers are not found here (pip install 'cuco\\[cuda]', i.e. "
            "nvidia-nccl-cu13==2.28.9, or set NCCL_HOME), so nothing was compiled[/]"
        )
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
    except ModuleNotFoundError:  # no `nvidia` package at all
        return False


async def _compile_all(console: Console, w, sources: dict[str, str]) -> int:
    """Each source through the engine's own cascade: built and checked by the symbol policy; the seed also
    verified (fresh inputs, the nonce and the wall-clock check) where this machine has the GPUs it needs."""
    failures = 0
    with tempfile.TemporaryDirectory(prefix="cuco-validate-") as scratch:  # job directories, nothing kept
        executor = await open_executor(Path(scratch), None, workload_name=w.name)
        try:
            have = executor.max_gpus_per_job
            runs_here = w.launch_gpus == 0 or have >= w.launch_gpus
            jobs = {
                name: asyncio.create_task(
                    evaluate_source(
                        w,
                        src,
                        executor,
                        job_prefix=f"validate-{name}",
                        seed=fresh_seed(),
                        upto=VERIFY if name == "seed" and runs_here else BUILD,
                    )
                )
                for name, src in sources.items()
            }
            for name, task in jobs.items():
                out = await task
                build = out.stages[0] if out.stages else None
                if out.status == REFUSED:  # the engine would refuse it before running it
                    failures += 1
                    console.print(f"  [red]{escape(name)}[/]: {escape(out.reason)}")
                elif build is None or build.status != "ok":
                    failures += 1
                    log = build.log[-3000:] if build is not None else ""
                    console.print(f"  [red]compile failed[/] {escape(name)}: {escape(out.reason)}\n{escape(log)}")
                else:
                    console.print(
                        f"  [green]compiled[/] {escape(name)} ({build.duration_s:.1f} s), passes the symbol policy"
                    )
            seed = jobs["seed"].result()
            if seed.stages and seed.stages[0].status == "ok":
                if not runs_here:
                    console.print(f"  (seed not run: it needs {w.launch_gpus} GPUs, this machine has {have})")
                elif seed.status == VERIFIED:
                    console.print("  [green]seed verified[/] on every config")
                else:
                    failures += 1
                    verify = seed.stages[-1]
                    detail = seed.reason if seed.status == "incorrect" else f"{seed.reason}\n{verify.log[-2000:]}"
                    console.print(f"  [red]seed does not verify[/]: {escape(detail)}")
        finally:
            await close_executor(executor)
    if failures:
        console.print(f"[red]{failures} problem(s)[/]")
        return 1
    console.print("[green]workload OK[/]")
    return 0
