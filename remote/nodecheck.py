"""`cuco nodes check`: can each node of a cluster run cuco jobs?

Per node: reachable, authenticated, CPUs, GPUs (nvidia-smi), nvcc version, NCCL (the `nvidia.nccl` wheel or
a system header) and its version, mpirun, free disk in the work dir. A node is *unusable* when it cannot
be reached or logged in to, its host key is not trusted, its setup lines fail, its work dir cannot be
created, or it has less than MIN_FREE_DISK free there; missing GPUs/nvcc/NCCL/mpirun are warnings.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from pathlib import Path

from .cluster import ClusterConfig, NodeConfig
from .hostkeys import HostKeyRefused
from .remote_job import q, workdir_expr
from .ssh_connect import NodeUnreachable, SSHContext, connect_node

MIN_FREE_DISK = 1 << 30
CHECK_TIMEOUT_S = 60.0

_NCCL_PY = "import nvidia.nccl as m, os; print(os.path.join(list(m.__path__)[0], 'include', 'nccl.h'))"


@dataclass
class NodeReport:
    name: str
    host: str
    reachable: bool = False
    authenticated: bool = False
    cpus: int | None = None
    gpus: list[str] = field(default_factory=list)  # "0: NVIDIA H100 80GB HBM3, 81559 MiB"
    nvcc: str | None = None
    nccl: str | None = None  # "2.28.9 (wheel)" / "2.21.5 (/usr/include/nccl.h)"
    mpirun: str | None = None
    free_disk: int | None = None  # bytes free in the work dir
    work_dir: str | None = None
    problems: list[str] = field(default_factory=list)  # why it is unusable
    warnings: list[str] = field(default_factory=list)

    @property
    def usable(self) -> bool:
        return not self.problems


def probe_script(node: NodeConfig) -> str:
    setup = "".join(f"{line}\n[ $? = 0 ] || echo {q('SETUPFAIL ' + line)}\n" for line in node.setup)
    return f"""{setup}echo "CPUS $(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>&1 | sed 's/^/GPU /'
else echo "NOSMI"; fi
command -v nvcc >/dev/null 2>&1 && echo "NVCC $(nvcc --version 2>&1 | sed -n 's/.*release \\([0-9][0-9.]*\\).*/\\1/p' | head -1)"
h=$(python3 -c {q(_NCCL_PY)} 2>/dev/null)
if [ -n "$h" ] && [ -f "$h" ]; then echo "NCCLSRC wheel"; else
  h=; for c in "${{CUDA_HOME:-/usr/local/cuda}}/include/nccl.h" /usr/include/nccl.h /usr/local/include/nccl.h; do
    [ -f "$c" ] && {{ h=$c; echo "NCCLSRC $c"; break; }}; done; fi
[ -n "$h" ] && grep -E '^#define NCCL_(MAJOR|MINOR|PATCH)[[:space:]]' "$h" | sed 's/^/NCCLH /'
command -v mpirun >/dev/null 2>&1 && echo "MPIRUN $(command -v mpirun)"
W={workdir_expr(node.work_dir)}
if mkdir -p "$W" 2>/dev/null && [ -w "$W" ]; then echo "WORKDIR $(cd "$W" && pwd -P)"
  echo "DISK $(df -Pk "$W" | awk 'NR==2 {{print $4}}')"
else echo "NOWORKDIR"; fi
exit 0
"""


def parse_probe(report: NodeReport, text: str) -> None:
    nccl: dict[str, str] = {}
    nccl_src = None
    for line in text.splitlines():
        tag, _, val = line.partition(" ")
        val = val.strip()
        if tag == "CPUS" and val.isdigit():
            report.cpus = int(val)
        elif tag == "GPU":
            report.gpus.append(val)
        elif tag == "NOSMI":
            report.warnings.append("nvidia-smi not found: no GPUs (compile jobs only)")
        elif tag == "NVCC":
            report.nvcc = val or "?"
        elif tag == "NCCLSRC":
            nccl_src = val
        elif tag == "NCCLH":
            m = re.match(r"#define NCCL_(MAJOR|MINOR|PATCH)\s+(\d+)", val)
            if m:
                nccl[m.group(1)] = m.group(2)
        elif tag == "MPIRUN":
            report.mpirun = val
        elif tag == "WORKDIR":
            report.work_dir = val
        elif tag == "DISK" and val.isdigit():
            report.free_disk = int(val) * 1024
        elif tag == "NOWORKDIR":
            report.problems.append("cannot create or write the work dir")
        elif tag == "SETUPFAIL":
            report.problems.append(f"setup line failed: {val}")
    if nccl_src:
        ver = ".".join(nccl.get(k, "?") for k in ("MAJOR", "MINOR", "PATCH"))
        report.nccl = f"{ver} ({nccl_src})"
    else:
        report.warnings.append("NCCL not found (pip install nvidia-nccl-cu13 on the node, or a system nccl.h)")
    if report.gpus and any("error" in g.lower() or "failed" in g.lower() for g in report.gpus):
        report.warnings.append("nvidia-smi failed: " + "; ".join(report.gpus))
        report.gpus = []
    elif not report.gpus and "NOSMI" not in text:
        report.warnings.append("nvidia-smi lists no GPUs")
    if report.nvcc is None:
        report.warnings.append("nvcc not found (add a setup line such as `module load cuda`)")
    if report.mpirun is None:
        report.warnings.append("mpirun not found")
    if report.free_disk is not None and report.free_disk < MIN_FREE_DISK:
        report.problems.append(f"only {report.free_disk >> 20} MiB free in the work dir (need 1 GiB)")


async def check_node(node: NodeConfig, ctx: SSHContext) -> NodeReport:
    report = NodeReport(name=node.name, host=node.host)
    try:
        conn = await asyncio.wait_for(connect_node(node, ctx), ctx.connect_timeout_s + 10)
    except HostKeyRefused as exc:
        report.reachable = True
        report.problems.append(str(exc))
        return report
    except NodeUnreachable as exc:
        msg = str(exc)
        report.reachable = "authentication failed" in msg
        report.problems.append(msg)
        return report
    except TimeoutError:
        report.problems.append("timed out connecting")
        return report
    report.reachable = report.authenticated = True
    try:
        res = await asyncio.wait_for(conn.run(probe_script(node), check=False), CHECK_TIMEOUT_S)
        parse_probe(report, str(res.stdout or ""))
    except TimeoutError:
        report.problems.append(f"the checks did not finish within {CHECK_TIMEOUT_S:g} s")
    except Exception as exc:  # noqa: BLE001 - a broken link mid-check is a finding, not a crash
        report.problems.append(f"connection failed during the checks: {exc}")
    finally:
        conn.close()
    return report


async def check_cluster(
    cluster: ClusterConfig, home: Path, user_known_hosts: list[Path] | None = None
) -> list[NodeReport]:
    ctx = SSHContext.from_cluster(cluster, home, user_known_hosts)
    return list(await asyncio.gather(*(check_node(n, ctx) for n in cluster.nodes)))
