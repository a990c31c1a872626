"""`cuco nodes check CLUSTER` and `cuco nodes trust NODE [--cluster FILE] [--yes]`.

Exit codes: 0 ok, 1 a node is unusable (or the key was not trusted), 2 bad input (the InputError message
on stderr).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from remote.errors import InputError
from remote.hostkeys import fingerprint, write_trusted_key
from remote.nodecheck import NodeReport, check_cluster
from remote.registry import load_config
from remote.slurm_check import SlurmReport, check_slurm
from remote.ssh_connect import NodeUnreachable, SSHContext, fetch_host_key

from .common import home_from


def _user_known_hosts(args: argparse.Namespace) -> list[Path] | None:
    return [] if getattr(args, "no_user_known_hosts", False) else None


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--home", help="project home holding known_hosts (default: $CUCO_HOME or ./.cuco)")
    p.add_argument("--known-hosts", dest="known_hosts", help="application known_hosts file (default: HOME/known_hosts)")
    p.add_argument("--no-user-known-hosts", action="store_true", help=argparse.SUPPRESS)


def register(subparsers: Any) -> None:
    nodes = subparsers.add_parser("nodes", help="check and trust the GPU nodes of a cluster file")
    sub = nodes.add_subparsers(dest="nodes_command", metavar="{check,trust}")
    sub.required = True
    check = sub.add_parser("check", help="can each node run jobs? (exit 1 if one cannot)")
    check.add_argument("cluster", metavar="CLUSTER", help="cluster.yaml")
    _add_common(check)
    check.set_defaults(func=cmd_check)
    trust = sub.add_parser("trust", help="show a node's host key fingerprint and trust it")
    trust.add_argument("node", metavar="NODE", help="node name in the cluster file")
    trust.add_argument("--cluster", default="cluster.yaml", help="cluster file (default: ./cluster.yaml)")
    trust.add_argument("--yes", action="store_true", help="trust without asking")
    _add_common(trust)
    trust.set_defaults(func=cmd_trust)


def load_cluster(args: argparse.Namespace, path: str) -> Any:
    cluster = load_config(Path(path))
    if getattr(args, "known_hosts", None):
        cluster = replace(cluster, known_hosts=Path(args.known_hosts))
    return cluster


def _render(reports: list[NodeReport]) -> None:
    table = Table(title="cuco nodes", show_lines=False)
    for col in ("node", "reachable", "auth", "CPUs", "GPUs", "nvcc", "NCCL", "mpirun", "free disk", "status"):
        table.add_column(col)
    yes, no = "[green]yes[/]", "[red]no[/]"
    for r in reports:
        gpus = f"{len(r.gpus)}" + (f" ({r.gpus[0].split(',')[1].strip()})" if r.gpus and "," in r.gpus[0] else "")
        status = "[green]ok[/]" if r.usable else "[red]unusable[/]"
        if r.usable and r.warnings:
            status = "[yellow]ok, with warnings[/]"
        table.add_row(
            r.name,
            yes if r.reachable else no,
            yes if r.authenticated else no,
            str(r.cpus) if r.cpus is not None else "-",
            gpus if r.authenticated else "-",
            r.nvcc or "-",
            r.nccl or "-",
            "yes" if r.mpirun else "-",
            f"{r.free_disk / 2**30:.1f} GiB" if r.free_disk is not None else "-",
            status,
        )
    console = Console()
    console.print(table)
    for r in reports:
        for p in r.problems:
            console.print(f"[red]{r.name}: unusable: {p}[/]", markup=True, highlight=False)
        for w in r.warnings:
            console.print(f"[yellow]{r.name}: {w}[/]", highlight=False)


def _render_slurm(r: SlurmReport) -> None:
    yes, no = "[green]yes[/]", "[red]no[/]"
    table = Table(title="cuco nodes (Slurm)", show_header=False)
    table.add_column("check")
    table.add_column("result")
    table.add_row(r.name, yes if r.reachable else no)
    table.add_row("work dir", r.work_dir or "-")
    table.add_row("shared with the compute nodes", {True: yes, False: no, None: "not confirmed"}[r.shared])
    table.add_row("GPUs per node", str(r.gpus_per_node))
    for p in r.partitions:
        table.add_row("partition", p)
    for a in r.accepted:
        table.add_row("sbatch --test-only", a)
    for reason, n in sorted(r.pending.items(), key=lambda kv: -kv[1]):
        table.add_row("cuco jobs pending", f"{n}: {reason}")
    table.add_row("status", "[green]ok[/]" if r.usable else "[red]unusable[/]")
    console = Console()
    console.print(table)
    for p in r.problems:
        console.print(f"[red]{r.name}: unusable: {p}[/]", markup=True, highlight=False)
    for w in r.warnings:
        console.print(f"[yellow]{r.name}: {w}[/]", highlight=False)


def cmd_check(args: argparse.Namespace) -> int:
    try:
        cluster = load_cluster(args, args.cluster)
    except InputError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if cluster.kind == "slurm":
        report = asyncio.run(check_slurm(cluster, home_from(args), _user_known_hosts(args)))
        _render_slurm(report)
        return 0 if report.usable else 1
    reports = asyncio.run(check_cluster(cluster, home_from(args), _user_known_hosts(args)))
    _render(reports)
    return 0 if all(r.usable for r in reports) else 1


def cmd_trust(args: argparse.Namespace) -> int:
    try:
        cluster = load_cluster(args, args.cluster)
        node = cluster.node(args.node)
    except InputError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    ctx = SSHContext.from_cluster(cluster, home_from(args), _user_known_hosts(args))
    try:
        presented = asyncio.run(fetch_host_key(node, ctx))
    except NodeUnreachable as exc:
        print(f"cannot fetch the host key: {exc}", file=sys.stderr)
        return 1
    key, name = presented.key, presented.name
    fp = fingerprint(key)
    trusted = presented.trusted_keys(ctx)
    already = any(k.public_data == key.public_data for k in trusted)
    print(f"node {node.name} ({name}) presents a {key.get_algorithm()} key:\n  {fp}")
    if already:
        print("This key is already trusted.")
        return 0
    if trusted:
        print(
            "WARNING: this is NOT the key trusted before for this host. It may have been reinstalled, "
            "or someone may be intercepting the connection: check the fingerprint with the node's admin."
        )
    if not args.yes:
        if not sys.stdin.isatty():
            print("not trusted: confirm on a terminal, or pass --yes", file=sys.stderr)
            return 1
        answer = input(f"Trust this key for node {node.name}? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("not trusted")
            return 1
    write_trusted_key(ctx.known_hosts.app_file, name, key)
    print(f"trusted: added to {ctx.known_hosts.app_file}")
    return 0
