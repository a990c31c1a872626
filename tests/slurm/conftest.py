"""A real single-node Slurm (munged, slurmctld, slurmd on 127.0.0.1) for the Slurm executor's tests.

Needs root and Debian's slurmctld, slurmd, slurm-client and munge (`.ci/run` installs them); otherwise
every test here is skipped with the reason. One cluster serves the session (starting it takes seconds);
each test gets its own work dir and cluster file. Daemons are stopped by their pids on teardown.

With Debian's slurmdbd and mariadb-server (`.ci/run` installs them too) that cluster has Slurm's accounting
(sacct, enforced accounts and QoS; about 5 s more to start, once); the tests that need it ask for
`slurm_accounting` and are skipped with the reason without it, the others run either way.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import slurm_cluster


def pytest_collection_modifyitems(config, items):
    reason = slurm_cluster.skip_reason()
    here = Path(__file__).parent
    for item in items:
        uses_slurm = {"slurm", "slurm_env", "slurm_yaml", "slurm_accounting"} & set(getattr(item, "fixturenames", ()))
        if Path(str(item.fspath)).parent == here and reason and uses_slurm:
            item.add_marker(pytest.mark.skip(reason=f"Slurm tests skipped: {reason}"))


@pytest.fixture(scope="session")
def slurm():
    accounting = slurm_cluster.accounting_skip_reason() is None
    cluster = slurm_cluster.start_cluster(accounting=accounting)
    try:
        yield cluster
    finally:
        slurm_cluster.remove(cluster)


@pytest.fixture
def slurm_accounting(slurm):
    """The session's cluster, which must have accounting (else the test is skipped with the reason)."""
    if not slurm.accounting:
        pytest.skip(f"Slurm accounting tests skipped: {slurm_cluster.accounting_skip_reason()}")
    return slurm


@pytest.fixture
def slurm_env(slurm, monkeypatch):
    """This process (and the cuco processes it starts) talks to the test cluster."""
    monkeypatch.setenv("SLURM_CONF", str(slurm.conf))
    return slurm


@pytest.fixture
def slurm_yaml(slurm_env, tmp_path):
    """A local-login cluster file for the test cluster (fields may be overridden)."""
    work = tmp_path / "shared"
    work.mkdir()
    os.chmod(tmp_path, 0o755)

    def make(**fields) -> Path:
        return slurm_cluster.write_cluster_yaml(tmp_path / "slurm.yaml", work, **fields)

    return make
