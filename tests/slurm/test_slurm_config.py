"""A `kind: slurm` cluster file: every mistake is an InputError naming the file and the field."""

from __future__ import annotations

import pytest
import yaml

from remote.errors import InputError
from remote.registry import load_config


def write(tmp_path, doc) -> object:
    path = tmp_path / "slurm.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


BASE = {"kind": "slurm", "work_dir": "/shared/cuco"}


def test_a_complete_file_loads(tmp_path):
    cfg = load_config(
        write(
            tmp_path,
            {
                **BASE,
                "login": {"host": "login1", "user": "alice", "port": 2222},
                "partition": "gpu",
                "account": "proj",
                "qos": "normal",
                "extra_sbatch": ["--mem=8G"],
                "gpu_request": "gres",
                "gpus_per_node": 8,
                "build": {"where": "login"},
                "run": {"partition": "h100", "time_limit": 30},
            },
        )
    )
    assert cfg.kind == "slurm" and cfg.login.host == "login1" and cfg.login.port == 2222
    assert cfg.login.work_dir == "/shared/cuco" and cfg.gpus_per_node == 8 and cfg.gpu_request == "gres"
    assert cfg.build.where == "login" and cfg.build.partition == "gpu" and cfg.build.account == "proj"
    assert cfg.run.partition == "h100" and cfg.run.time_limit_min == 30 and cfg.run.extra_sbatch == ("--mem=8G",)
    assert cfg.run.field_of("partition") == "run.partition" and cfg.run.field_of("account") == "account"


@pytest.mark.parametrize(
    "extra, field, words",
    [
        ({"kind": "pbs"}, "kind", "must be one of: slurm, ssh"),
        ({"work_dir": None}, "work_dir", "is required"),
        ({"work_dir": "relative/dir"}, "work_dir", "absolute path"),
        ({"login": {"user": "alice"}}, "login.host", "is required"),
        ({"login": {"host": "h", "port": 70000}}, "login.port", "1-65535"),
        ({"login": {"host": "h", "gpus": [0]}}, "login.gpus", "unknown field"),
        ({"partition": "gpu; rm -rf ~"}, "partition", "single word"),
        ({"gpu_request": "cuda"}, "gpu_request", "gpus (--gpus=N) or gres"),
        ({"build": {"where": "gpu"}}, "build.where", "slurm or login"),
        ({"run": {"where": "login"}}, "run.where", "must be slurm"),
        ({"run": {"time_limit": 0}}, "run.time_limit", "integer"),
        ({"extra_sbatch": ["mem=8G"]}, "extra_sbatch", "starting with '-'"),
        ({"max_jobs": 0}, "max_jobs", "integer"),
        ({"limit_wait_s": -1}, "limit_wait_s", "number >= 0"),
        ({"poll": {"min_s": 2, "max_s": 1}}, "poll.max_s", ">= poll.min_s"),
        ({"partiton": "gpu"}, "partiton", "unknown field"),
    ],
)
def test_each_mistake_names_its_field(tmp_path, extra, field, words):
    path = write(tmp_path, {**BASE, **extra})
    with pytest.raises(InputError) as err:
        load_config(path)
    assert err.value.file == str(path) and err.value.field == field and words in err.value.message, err.value


def test_each_kind_is_one_module_and_cluster_py_imports_none_of_them():
    """The registry: every kind's module has the two entry points; the cluster file reader imports no
    executor (the old cluster.py <-> ssh_executor.py import circle)."""
    import ast
    import importlib
    from pathlib import Path

    from remote.registry import KINDS

    for kind, module in KINDS.items():
        m = importlib.import_module(module)
        assert callable(m.load_config) and callable(m.from_config), kind
    tree = ast.parse((Path(__file__).resolve().parents[2] / "remote" / "cluster.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and ("executor" in m or "registry" in m)}, imported


@pytest.mark.parametrize(
    "message, waits",
    [
        # sbatch's words (Slurm 22.05) when the user's queued jobs are at the QoS's MaxSubmitJobsPerUser
        (
            "sbatch: error: QOSMaxSubmitJobPerUserLimit sbatch: error: Batch job submission failed: Job violates "
            "accounting/QOS policy (job submit limit, user's size and/or time limits)",
            True,
        ),
        (
            "sbatch: error: AssocMaxSubmitJobLimit sbatch: error: Batch job submission failed: Job violates "
            "accounting/QOS policy (job submit limit, user's size and/or time limits)",
            True,
        ),
        (
            "sbatch: error: Batch job submission failed: Job violates accounting/QOS policy (job submit limit, "
            "user's size and/or time limits)",
            True,
        ),
        ("sbatch: error: Slurm temporarily unable to accept job, sleeping and retrying", True),
        # a limit waiting cannot clear (the job itself is too long for the QoS, under DenyOnLimit)
        (
            "sbatch: error: QOSMaxWallDurationPerJobLimit sbatch: error: Batch job submission failed: Job violates "
            "accounting/QOS policy (job submit limit, user's size and/or time limits)",
            False,
        ),
        ("sbatch: error: invalid partition specified: nosuch", False),
    ],
)
def test_which_refusals_are_waited_for(message, waits):
    """A refusal for the number of jobs is back-pressure (wait, submit again); one for the job itself is not."""
    from remote.slurm_commands import is_limit_refusal, refused_field

    assert is_limit_refusal(message) is waits
    if "WallDuration" in message:
        assert refused_field(message) == "time_limit"
