"""`cuco nodes check` for a cluster of kind slurm: can cuco submit its jobs there?

The login node reachable (locally, or over SSH with the host-key rules), Slurm's commands on it, `sinfo`
partitions with their GPUs, each stage's partition/account/QoS/constraint accepted (`sbatch --test-only`),
the work dir writable from the login node and seen by a compute node (a small job reads a token the login
node wrote), and the reasons Slurm gives for cuco jobs still pending.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .hostkeys import HostKeyRefused
from .login_shell import open_login_shell
from .remote_job import q
from .slurm_commands import (
    NAME_PREFIX,
    init_script,
    is_limit_refusal,
    limit_named,
    parse_gres_gpus,
    refused_field,
    sbatch_options,
    test_only_script,
)
from .slurm_config import SlurmClusterConfig
from .ssh_connect import SSHContext
from .ssh_pool import NodeDown

CHECK_TIMEOUT_S = 60.0
SHARED_WAIT_S = 60.0


@dataclass
class SlurmReport:
    name: str
    reachable: bool = False
    work_dir: str | None = None
    partitions: list[str] = field(default_factory=list)  # "gpu*: up, 1 nodes, gpu:4, idle"
    gpus_per_node: int = 0
    accepted: list[str] = field(default_factory=list)  # "run: --partition=gpu ... accepted"
    shared: bool | None = None  # None: not confirmed (job still pending)
    pending: dict[str, int] = field(default_factory=dict)  # Slurm's reason -> cuco jobs pending for it
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def usable(self) -> bool:
        return not self.problems


async def check_slurm(
    cfg: SlurmClusterConfig,
    home: Path,
    user_known_hosts: list[Path] | None = None,
    shared_wait_s: float = SHARED_WAIT_S,
) -> SlurmReport:
    shell = open_login_shell(cfg.login, lambda: SSHContext.from_cluster(cfg, Path(home), user_known_hosts))
    report = SlurmReport(name=f"login {cfg.login.host}" if cfg.login else "login (this machine)")
    try:
        await _check(shell, cfg, report, shared_wait_s)
    except (NodeDown, HostKeyRefused, OSError) as exc:
        report.problems.append(f"the login node cannot be reached: {exc}")
    except TimeoutError:
        report.problems.append(f"the login node did not answer within {CHECK_TIMEOUT_S:g} s")
    finally:
        await shell.close()
    return report


async def _check(shell, cfg: SlurmClusterConfig, report: SlurmReport, shared_wait_s: float) -> None:
    res = await shell.run(init_script(cfg.work_dir), timeout=CHECK_TIMEOUT_S)
    report.reachable = True
    if res.exit_status != 0:
        report.problems.append(f"cannot create or write the work dir {cfg.work_dir}")
        return
    for line in str(res.stdout).splitlines():
        tag, _, val = line.partition(" ")
        if tag == "WORKDIR":
            report.work_dir = val.strip()
        elif tag == "MISSING":
            (report.problems if val.strip() in ("sbatch", "squeue", "scancel") else report.warnings).append(
                f"{val.strip()} not found on the login node"
            )
    if report.problems:
        return
    info = await shell.run("sinfo -h -o '%P|%a|%D|%G|%t' 2>&1", timeout=CHECK_TIMEOUT_S)
    for line in str(info.stdout).splitlines():
        parts = line.split("|")
        if len(parts) == 5:
            name, avail, count, gres, state = parts
            report.partitions.append(f"{name}: {avail}, {count} nodes, {gres}, {state}")
    configured = cfg.gpus_per_node
    report.gpus_per_node = (
        configured
        if configured is not None
        else parse_gres_gpus(
            str(
                (
                    await shell.run(
                        f"sinfo -h -N {'-p ' + q(cfg.run.partition) if cfg.run.partition else ''} -o '%G'",
                        timeout=CHECK_TIMEOUT_S,
                    )
                ).stdout
            )
        )
    )
    if report.gpus_per_node == 0:
        report.warnings.append("no GPU GRES on the run partition's nodes (CPU jobs only)")
    for stage in ("build", "run"):
        placement = cfg.placement(stage)
        if placement.where != "slurm":
            report.accepted.append(f"{stage}: on the login node")
            continue
        gpus = min(1, report.gpus_per_node) if stage == "run" else 0
        out = await shell.run(
            test_only_script(placement, gpus=gpus, gpu_request=cfg.gpu_request), timeout=CHECK_TIMEOUT_S
        )
        opts = " ".join(
            o
            for o in sbatch_options(placement, gpus=gpus, cpus=1, gpu_request=cfg.gpu_request)
            if not o.startswith(("--nodes", "--ntasks", "--cpus"))
        )
        if out.exit_status == 0:
            report.accepted.append(f"{stage}: {opts or '(defaults)'} accepted")
        elif is_limit_refusal(str(out.stdout)):
            report.accepted.append(f"{stage}: {opts or '(defaults)'} accepted")
            report.warnings.append(
                f"{stage} jobs: Slurm refuses more jobs now ({limit_named(str(out.stdout))}): "
                f"cuco's submissions will wait until jobs of yours end"
            )
        else:
            fld = refused_field(str(out.stdout))
            where = f" ({placement.field_of(fld)} in {cfg.path})" if fld else ""
            report.problems.append(f"{stage} jobs: Slurm refuses {opts}{where}: {' '.join(str(out.stdout).split())}")
    pend = await shell.run("squeue -h -u \"$(id -un)\" -t PENDING -o '%j|%r' 2>/dev/null", timeout=CHECK_TIMEOUT_S)
    report.pending = dict(
        Counter(
            line.split("|", 1)[1]
            for line in str(pend.stdout).splitlines()
            if line.startswith(NAME_PREFIX) and "|" in line
        )
    )
    if not report.problems:
        await _check_shared(shell, cfg, report, shared_wait_s)


async def _check_shared(shell, cfg: SlurmClusterConfig, report: SlurmReport, wait_s: float) -> None:
    """A job on a compute node reads a token the login node wrote in the work dir and writes it back."""
    token = secrets.token_hex(8)
    w = q(report.work_dir or cfg.work_dir)
    opts = " ".join(q(o) for o in sbatch_options(cfg.run, gpus=0, cpus=1, gpu_request=cfg.gpu_request, minutes=1))
    res = await shell.run(
        f'W={w}; printf %s {token} > "$W/check-{token}" && '
        f"sbatch --parsable {opts} --job-name={NAME_PREFIX}check --output=/dev/null "
        f'--wrap="cat $W/check-{token} > $W/check-{token}.seen" 2>&1',
        timeout=CHECK_TIMEOUT_S,
    )
    job = str(res.stdout).strip().split(";")[0]
    if res.exit_status != 0 or not job.isdigit():
        report.warnings.append(f"could not submit the shared-work-dir check job: {' '.join(str(res.stdout).split())}")
        return
    deadline = time.monotonic() + wait_s
    reason = ""
    try:
        while time.monotonic() < deadline:
            out = await shell.run(
                f"W={w}; cat \"$W/check-{token}.seen\" 2>/dev/null; echo; squeue -h -j {job} -o '%T|%r' 2>/dev/null",
                timeout=CHECK_TIMEOUT_S,
            )
            seen, _, state = str(out.stdout).partition("\n")
            if seen.strip() == token:
                report.shared = True
                return
            state = state.strip()
            if not state:  # the job ended without writing the token back
                await asyncio.sleep(1.0)
                again = await shell.run(f"cat {w}/check-{token}.seen 2>/dev/null", timeout=CHECK_TIMEOUT_S)
                report.shared = str(again.stdout).strip() == token
                if not report.shared:
                    report.problems.append(
                        "a job on a compute node cannot read the work dir: it must be on a "
                        "filesystem the login and compute nodes share"
                    )
                return
            reason = state.split("|", 1)[-1]
            await asyncio.sleep(0.5)
        report.warnings.append(
            f"could not confirm that the work dir is shared: the check job is still "
            f"pending ({reason}) after {wait_s:g} s"
        )
    finally:
        await shell.run(
            f"scancel {job} 2>/dev/null; rm -f {w}/check-{token} {w}/check-{token}.seen", timeout=CHECK_TIMEOUT_S
        )
