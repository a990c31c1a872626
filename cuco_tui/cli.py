"""The `cuco` command line (README.md lists the verbs). Exit codes: 0 done, 1 the run failed, 2 bad input."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import signal
import sqlite3
import sys
from pathlib import Path

from engine.llm.keys import hold_keys
from remote.errors import InputError
from remote.jobs import NoUsableNode

from .failures import quiet_closed_pipe, store_failure

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells report it (128 + SIGINT)


def home_from(args: argparse.Namespace) -> Path:
    from cuco_tui.launch import resolve_home  # one rule for every verb: --home, $CUCO_HOME, ./.cuco

    return resolve_home(getattr(args, "home", None))


def _add_run_settings(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--config",
        metavar="FILE",
        help="a run config file (YAML: any setting of `cuco fork --set`, e.g. meta_every: 5); "
        "flags given here win over it",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="any run setting, e.g. --set meta_every=5 (repeatable; wins over --config)",
    )
    p.add_argument(
        "--cluster",
        metavar="FILE",
        help="cluster.yaml: run jobs on GPU nodes over SSH or through Slurm (docs/cluster.md)",
    )
    p.add_argument(
        "--llm",
        action="append",
        default=[],
        metavar="MODEL",
        help="an LLM mutator, e.g. anthropic:claude-sonnet-4-6 (repeatable)",
    )
    p.add_argument("--budget-usd", type=float, help="stop proposing once this much LLM cost is committed")
    p.add_argument("--max-evals", type=int, help="stop after N evaluated candidates (default 40)")
    p.add_argument("--max-minutes", type=float, help="stop after M minutes")
    p.add_argument("--target-speedup", type=float, help="stop once a candidate reaches this speedup")
    p.add_argument("--patience", type=int, help="stop after N evaluations without a new best")
    p.add_argument("--islands", type=int, help="number of islands (default 2)")
    p.add_argument("--concurrency", type=int, help="evaluations in flight at once (default 2)")
    p.add_argument("--seed", type=int, help="random seed of the search (default 0)")
    p.add_argument("--ranks", type=int, help="ranks (GPUs) per job, e.g. 4 (default: the workload's)")


_FLAG_SETTINGS = (
    "max_evals",
    "max_minutes",
    "target_speedup",
    "patience",
    "islands",
    "concurrency",
    "seed",
    "budget_usd",
    "ranks",
)


def config_from_args(args: argparse.Namespace):
    """Defaults, then the --config file, then --set, then the flags: the most specific wins."""
    from cuco_tui.cli_control import parse_sets
    from engine.config import RunConfig, load_config_file

    config = RunConfig()
    if getattr(args, "config", None):
        path = Path(args.config).expanduser()
        config = RunConfig.from_dict(load_config_file(path), str(path))
    if getattr(args, "set", None):
        config = config.with_overrides(parse_sets(args.set, "run"), "--set")
    for name in _FLAG_SETTINGS:
        value = getattr(args, name, None)
        if value is not None:
            setattr(config, name, value)
    if getattr(args, "llm", None):
        config.llm = list(args.llm)
        config.mutator = "llm"
    if getattr(args, "cluster", None):
        cluster = Path(args.cluster).expanduser()
        if not cluster.is_file():
            raise InputError(str(args.cluster), "--cluster", "no such file")
        config.cluster = str(cluster.resolve())
    return config.validate("command line")


# ----- run --------------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    from engine.store.runids import new_run_id
    from engine.workload import load_workload

    workload = load_workload(args.workload)
    config = config_from_args(args)
    home = home_from(args)
    run_id = new_run_id(home, workload.name, args.name)
    if args.headless:
        return asyncio.run(_run_headless(home, run_id, workload=workload, config=config))
    from cuco_tui import cli_control

    return cli_control.run_detached(home, run_id, workload.root, config, config.cluster, attach=True)


async def _run_headless(home: Path, run_id: str, *, workload=None, config=None, resume: bool = False) -> int:
    from engine.daemon.daemon import EngineServer
    from engine.run.engine import Engine

    from .headless import HeadlessDisplay

    if resume:
        engine = await Engine.load(home, run_id)
    else:
        engine = await Engine.create(home, workload, config, run_id=run_id)
    engine.exit_when_paused = True  # nobody is attached to resume it: a run that pauses itself ends, paused
    display = HeadlessDisplay(engine)
    # The engine's socket is served here too, so `cuco stop|pause|accept` and `cuco attach` from another
    # terminal reach this engine instead of writing to the store beside it (two writers).
    server = EngineServer(engine, home, run_id)

    def on_event(event: dict) -> None:
        display.on_event(event)
        server.on_event(event)

    engine.store.on_event = on_event
    loop = asyncio.get_running_loop()
    interrupted: list[int] = []

    def stop(sig: int) -> None:
        interrupted.append(sig)
        asyncio.ensure_future(engine.stop())

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop, sig)
    state = None
    try:
        await server.start()
        with display:
            state = await engine.run()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await server.close(state, engine.stop_reason or "")
        await engine.close()
    display.print_summary(home, run_id)
    if interrupted:  # stopped by Ctrl-C (or a TERM): not a success, as a shell reads it (128 + the signal)
        return 128 + interrupted[0]
    if state == "paused":  # it paused itself (a full disk, no node left): the reason says what to do
        print(f"cuco: {run_id} {engine.stop_reason}", file=sys.stderr)
    return EXIT_FAILED if state in ("failed", "paused") else EXIT_OK


def cmd_resume(args: argparse.Namespace) -> int:
    """Un-pause a live run, or restart a run whose engine died (in the foreground with --headless)."""
    home = home_from(args)
    run_id = _resolve_run(home, args.run)
    if args.headless and args.attach:
        raise InputError(
            "--attach",
            "--headless",
            "choose one: --headless restarts in the foreground, --attach restarts it detached and opens the TUI",
        )
    if args.headless:
        if _engine_alive(home, run_id):
            raise InputError("RUN", run_id, "its engine is alive; `cuco resume` without --headless un-pauses it")
        return asyncio.run(_run_headless(home, run_id, resume=True))
    from cuco_tui import cli_control

    return cli_control.cmd_resume(args)


def _engine_alive(home: Path, run_id: str) -> bool:
    try:
        from cuco_tui.launch import live_engine
    except ImportError:
        return False
    return asyncio.run(live_engine(home, run_id)) is not None


def _resolve_run(home: Path, run: str | None) -> str:
    """The one rule (cuco_tui.launch.resolve_run): the named run, else the only live one, else the newest."""
    from cuco_tui.launch import RunNotFound, resolve_run

    try:
        return resolve_run(home, run)
    except RunNotFound as exc:
        raise InputError("RUN", run or "(omitted)", str(exc)) from None


# ----- ls / report / export / validate -------------------------------------------------------------


def cmd_ls(args: argparse.Namespace) -> int:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from engine.store.store import DB_NAME, ReadStore
    from engine.views.report import build_report

    home = home_from(args)
    if not (home / DB_NAME).exists():
        print(f"no runs in {home}")
        return EXIT_OK
    store = ReadStore(home)
    try:
        reports = [build_report(store, r["id"]) for r in store.runs()]
    finally:
        store.close()
    if args.json:
        print(json.dumps(reports, indent=2, default=str))
        return EXIT_OK
    # Fits 80 columns (a pipe): a fork names its parent on a second line of its run cell, long names fold,
    # the short numbers never shrink.
    table = Table(
        title=f"runs in {home}",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        caption="best: the best candidate (not rejected, not held for review); speedup: its geometric "
        "mean of per-config A B ratios; evals: candidates evaluated, ok: those correct",
    )
    table.add_column("run", overflow="fold", ratio=3)
    table.add_column("workload", overflow="fold", ratio=1, min_width=8)
    for col in ("state", "evals", "ok", "best", "speedup", "LLM $"):
        table.add_column(col, no_wrap=True, justify="left" if col == "state" else "right", min_width=len(col))
    for r in reports:
        best = r["best"] or {}
        run = r["run"] + (f"\n↳ fork of {r['parent_run']}" if r["parent_run"] else "")
        table.add_row(
            run,
            r["workload"],
            r["state"],
            str(r["evaluated"]),
            str(r["correct"]),
            str(best.get("candidate", "")),
            f"{best['speedup']:.3f}x" if best.get("speedup") else "",
            f"${r['llm_cost_usd']:.2f}",
        )
    Console().print(table)
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    if args.timeline:
        from .cli_timeline import report_timeline

        return report_timeline(args)
    from engine.store.store import ReadStore
    from engine.views.report import build_report

    home = home_from(args)
    run_id = _resolve_run(home, args.run)
    store = ReadStore(home)
    try:
        report = build_report(store, run_id)
    finally:
        store.close()
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        from .headless import print_report

        print_report(report, home)
    return EXIT_FAILED if report["state"] == "failed" else EXIT_OK


def cmd_export(args: argparse.Namespace) -> int:
    if getattr(args, "patch", False):
        from .cli_rewrite import export_patch

        return export_patch(args)
    if args.trace is not None:
        from .cli_timeline import export_trace

        return export_trace(args)
    if getattr(args, "html", False):
        raise InputError("--html", "", "goes with --trace CANDIDATE (a timeline as a page); a source has no HTML form")
    from engine.store.store import ReadStore
    from engine.views.report import build_report

    home = home_from(args)
    run_id = _resolve_run(home, args.run)
    store = ReadStore(home)
    try:
        if args.candidate is not None:
            ids = [args.candidate]
        else:
            report = build_report(store, run_id)
            ids = report["accepted"] or ([report["best"]["candidate"]] if report["best"] else [])
            if not ids:
                raise InputError("RUN", run_id, "has no accepted or correct candidate to export; pass --candidate")
        run = store.run(run_id)
        if run is None:  # resolved above: gone only if the store changed meanwhile
            raise InputError("RUN", run_id, f"no such run in {home}")
        workload = run["workload"]
        for cid in ids:
            row = store.candidate(cid)
            if row is None or row["run_id"] != run_id:
                raise InputError("--candidate", str(cid), f"no candidate {cid} in run {run_id}")
            source = store.source(cid)
            if args.output and len(ids) == 1:
                out = Path(args.output)
            else:
                suffix = Path(_candidate_name(run["workload_path"])).suffix or ".cpp"
                out = Path(args.output or ".") / f"{workload}-{run_id}-c{cid}{suffix}"
            if str(out) == "-":
                sys.stdout.write(source)
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(source)
            print(f"candidate {cid} (speedup {row['speedup'] or 0:.3f}x, {row['status']}) -> {out}")
    finally:
        store.close()
    return EXIT_OK


def _candidate_name(workload_path: str) -> str:
    try:
        import yaml

        return str(yaml.safe_load((Path(workload_path) / "workload.yaml").read_text())["candidate"])
    except (OSError, KeyError, TypeError, ValueError):
        return "candidate.cpp"


def cmd_validate(args: argparse.Namespace) -> int:
    from .validate import validate_workload

    return validate_workload(args.workload, compile_=not args.no_compile, seed_only=args.seed_only)


# ----- parser ---------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cuco",
        description="co-design computation and communication of multi-GPU CUDA programs by evolutionary search",
    )
    parser.add_argument("--home", help="project home (default: $CUCO_HOME or ./.cuco)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def add(name: str, func, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--home", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
        p.set_defaults(func=func)
        return p

    p = add("run", cmd_run, "start a run (detached engine + TUI, or --headless in the foreground)")
    p.add_argument("workload", metavar="WORKLOAD", help="a workload folder or the name of a shipped one")
    p.add_argument("--headless", action="store_true", help="run in the foreground with a progress display")
    p.add_argument("--name", help="the run's id (default WORKLOAD-N)")
    _add_run_settings(p)

    p = add("resume", cmd_resume, "un-pause a live run, or restart a run whose engine died")
    p.add_argument("run", nargs="?", metavar="RUN")
    p.add_argument("--headless", action="store_true", help="restart in the foreground")
    p.add_argument("--attach", action="store_true", help="attach the TUI after restarting the engine")

    p = add("ls", cmd_ls, "list the runs of this project home")
    p.add_argument("--json", action="store_true")

    p = add("report", cmd_report, "a run's summary")
    p.add_argument("run", nargs="?", metavar="RUN")
    p.add_argument("--json", action="store_true", help="one JSON object (its fields: docs/contract.md)")
    p.add_argument(
        "--timeline",
        action="store_true",
        help="RUN is a CANDIDATE id: where its time goes, per config and rank (docs/timeline.md)",
    )

    p = add("export", cmd_export, "write accepted (or the best, or one) candidate's source")
    p.add_argument("run", nargs="?", metavar="RUN")
    p.add_argument("--candidate", type=int)
    p.add_argument("-o", "--output", help="a file (one candidate), a folder, or - for stdout")
    p.add_argument(
        "--trace",
        metavar="CANDIDATE",
        help="write that candidate's timeline as Chrome trace-event JSON to -o FILE.json",
    )
    p.add_argument(
        "--html",
        action="store_true",
        help="with --trace: write the trace as one self-contained HTML page that any browser opens "
        "offline (the default for -o FILE.html)",
    )
    p.add_argument(
        "--patch",
        action="store_true",
        help="the candidate's schedule rewrites written back into your program's files, as a unified "
        "diff (patch -p1 in their folder); for workloads made by cuco init",
    )

    p = add("validate", cmd_validate, "check a workload and compile it where the toolchain is present")
    p.add_argument("workload", metavar="WORKLOAD")
    p.add_argument("--no-compile", action="store_true", help="check the spec and blocks only")
    p.add_argument("--seed-only", action="store_true", help="compile (and verify, on GPUs) the seed alone")

    for module in (
        "cuco_tui.cli_control",
        "cuco_tui.cli_nodes",
        "cuco_tui.cli_llm",
        "cuco_tui.cli_onboard",
        "cuco_tui.cli_rewrite",
        "cuco_tui.cli_timeline",
        "cuco_tui.cli_serve",
    ):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue  # a partial install: the verbs of that module are absent
        mod.register(sub)
    for action in sub.choices.values():  # the global --home also works after the verb
        if not any("--home" in a.option_strings for a in action._actions):
            action.add_argument("--home", help=argparse.SUPPRESS, default=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    from .processes import honour_signals

    honour_signals()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
        return code
    except InputError as exc:
        print(f"cuco: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except NoUsableNode as exc:  # every node refused (host key, auth, down), or none has the GPUs a job needs
        print(f"cuco: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `cuco ls | head`: the reader has what it wanted
        return quiet_closed_pipe()
    except (sqlite3.Error, OSError) as exc:  # the store or the disk under the home failed: one line, no traceback
        said = store_failure(exc, home_from(args))
        if said is None:
            raise
        print(said[0], file=sys.stderr)
        return said[1]


def entry() -> int:
    """The `cuco` command: API keys live in this process's memory from here on, and no child inherits them
    (engine/llm/keys.py); then `main`."""
    hold_keys()
    return main()


if __name__ == "__main__":
    sys.exit(entry())
