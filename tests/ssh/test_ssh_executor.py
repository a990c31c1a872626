"""The SSH executor against two real OpenSSH sshd nodes on 127.0.0.1 (see conftest.py)."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from engine.stages import run_jobs_pattern
from remote.cluster import load_cluster
from remote.jobs import Executor, JobSpec, JobStatus
from remote.registry import executor_from_file
from remote.ssh_executor import NoUsableNode, SSHExecutor
from tests.ssh.conftest import USER

CPP = b"""#include <cstdio>
#include <optional>
#include <string_view>
int main(int argc, char** argv) {
    std::optional<std::string_view> who = argc > 1 ? std::optional<std::string_view>(argv[1]) : std::nullopt;
    if (auto [a, b] = std::pair{6, 7}; a * b == 42)
        std::printf("hello %s %d\\n", who ? who->data() : "nobody", a * b);
    return 0;
}
"""


def make_executor(nodes, **yaml_kw) -> SSHExecutor:
    return SSHExecutor(load_cluster(nodes.cluster_yaml(**yaml_kw)), nodes.home, user_known_hosts=[])


def group_alive(pgid: int) -> bool:
    """Does `ps` on the node (this machine) show a live process in group `pgid`?

    Zombies are dead: they only wait for init to reap them (some container inits never do).
    """
    out = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True, check=True).stdout
    return any(f[0] == str(pgid) and not f[1].startswith("Z") for f in (ln.split() for ln in out.splitlines()))


async def wait_for_file(path: Path, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        await asyncio.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


async def node_pgid(nodes, job_id: str, timeout: float = 10.0) -> int:
    """The job's process group id as the node's wrapper recorded it (jobs/ID/pgid in the node's work dir):
    inside its sandbox (its own pid namespace) a job cannot see its own group as the node does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in nodes.sshds:
            p = nodes.work_dir(name) / "jobs" / job_id / "pgid"
            if p.is_file() and p.read_text().strip():
                return int(p.read_text().strip())
        await asyncio.sleep(0.05)
    raise AssertionError(f"job {job_id} never recorded its process group")


async def test_build_then_run_cpp17(nodes):
    ex = executor_from_file(nodes.cluster_yaml(), nodes.home)
    assert isinstance(ex, Executor)
    ex.ctx.known_hosts.user_files = []
    await ex.start()
    try:
        build = await ex.run(
            JobSpec(
                "build-1",
                ["g++", "-std=c++17", "-O1", "-o", "prog", "main.cpp"],
                files={"main.cpp": CPP},
                outputs=["prog"],
                timeout_s=60,
                kind="build",
            )
        )
        assert build.ok, build.log + build.error
        binary = build.outputs["prog"]
        assert binary[:4] == b"\x7fELF"
        run = await ex.run(JobSpec("run-1", ["./prog", "cuco"], files={"prog": binary}, executable=["prog"]))
        assert run.ok, run.log + run.error
        assert run.log.strip() == "hello cuco 42"
        assert run.attempts == 1 and run.node in ("a", "b")
    finally:
        await ex.close()


async def test_setup_lines_env_and_failures(nodes):
    path = nodes.cluster_yaml(
        node_extra={"a": {"setup": ["export CUCO_SETUP=loaded"]}, "b": {"setup": ["export CUCO_SETUP=loaded"]}}
    )
    ex = SSHExecutor(load_cluster(path), nodes.home, user_known_hosts=[])
    await ex.start()
    try:
        r = await ex.run(JobSpec("env-1", ["sh", "-c", 'echo "$CUCO_SETUP $MINE"; exit 3'], env={"MINE": "x y"}))
        assert r.status is JobStatus.OK and r.rc == 3
        assert r.log.strip() == "loaded x y"
    finally:
        await ex.close()
    path = nodes.cluster_yaml(defaults={"setup": ["false"]})
    ex = SSHExecutor(load_cluster(path), nodes.home, user_known_hosts=[])
    await ex.start()
    try:
        r = await ex.run(JobSpec("setup-fail", ["true"]))
        assert r.rc == 125 and "setup line failed on this node: false" in r.log
    finally:
        await ex.close()


async def test_hung_job_killed_at_timeout_with_its_group(nodes):
    ex = make_executor(nodes)
    await ex.start()
    try:
        t0 = time.monotonic()
        task = asyncio.create_task(ex.run(JobSpec("hung", ["sh", "-c", "sleep 300 & sleep 300"], timeout_s=1.0)))
        pgid = await node_pgid(nodes, "hung")
        r = await task
        assert r.status is JobStatus.TIMEOUT, r
        assert time.monotonic() - t0 < 6
        assert not group_alive(pgid), "the hung job's process group survived its timeout"
    finally:
        await ex.close()


async def test_cancel_kills_remote_group(nodes):
    ex = make_executor(nodes)
    await ex.start()
    try:
        task = asyncio.create_task(ex.run(JobSpec("cancel-me", ["sh", "-c", "sleep 300"], timeout_s=600)))
        pgid = await node_pgid(nodes, "cancel-me")
        assert group_alive(pgid)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The kill ran inside the cancelled task (shielded), before CancelledError came out.
        assert not group_alive(pgid)
        assert all(n.running_jobs == 0 for n in ex.nodes())
    finally:
        await ex.close()


async def test_close_kills_jobs_in_flight(nodes):
    ex = make_executor(nodes)
    await ex.start()
    tasks = [
        asyncio.create_task(ex.run(JobSpec(f"close-{i}", ["sh", "-c", "sleep 300"], timeout_s=600))) for i in range(3)
    ]
    pgids = [await node_pgid(nodes, f"close-{i}") for i in range(3)]
    await ex.close()
    results = await asyncio.wait_for(asyncio.gather(*tasks), 10)
    assert all(r.status is not JobStatus.OK or r.rc != 0 for r in results)
    assert not any(group_alive(p) for p in pgids)


async def test_node_dies_mid_job_jobs_requeued(nodes):
    ex = make_executor(nodes)
    await ex.start()
    try:
        specs = [JobSpec(f"dies-{i}", ["sh", "-c", "sleep 1; echo done"], timeout_s=30) for i in range(6)]
        tasks = [asyncio.create_task(ex.run(s)) for s in specs]
        await asyncio.sleep(0.5)
        assert {n.name: n.running_jobs for n in ex.nodes()} == {"a": 3, "b": 3}
        nodes.sshds["a"].kill()
        results = await asyncio.wait_for(asyncio.gather(*tasks), 30)
        assert all(r.ok and r.log.strip() == "done" for r in results), results
        assert all(r.node == "b" for r in results if r.attempts == 2)
        assert sum(r.attempts == 2 for r in results) == 3
        a = next(n for n in ex.nodes() if n.name == "a")
        assert not a.healthy and a.failures >= 3 and a.detail
    finally:
        await ex.close()


async def test_quarantine_after_k_failures(nodes):
    nodes.sshds["b"].kill()
    ex = make_executor(nodes, quarantine={"failures": 2, "window_s": 60, "duration_s": 0})
    await ex.start()  # b: failure 1 (connect refused), backing off 1 s
    try:
        b = ex.node("b")
        assert not b.quarantined() and b.failures_total == 1
        await asyncio.sleep(1.1)
        r = await ex.run(JobSpec("q-1", ["echo", "ok"]))  # b is retried: failure 2 -> quarantined
        assert r.ok and r.node == "a"
        state = {n.name: n for n in ex.nodes()}
        assert state["b"].quarantined and not state["b"].healthy and "quarantined" in state["b"].detail
        assert not state["a"].quarantined
        results = await asyncio.gather(*(ex.run(JobSpec(f"q-{i}", ["true"])) for i in range(2, 8)))
        assert all(r.ok and r.node == "a" for r in results)
    finally:
        await ex.close()


async def test_unknown_and_changed_host_keys_refused_then_trusted(nodes, capsys):
    from cuco_tui.verbs import nodes as nodes_verb

    (nodes.home / "known_hosts").write_text("")  # nothing trusted
    ex = make_executor(nodes)
    with pytest.raises(NoUsableNode) as err:
        await ex.start()
    assert "cuco nodes trust a" in str(err.value) and "cuco nodes trust b" in str(err.value)
    await ex.close()

    # A changed key: trust b's real key under a's address.
    b_key = nodes.sshds["b"].host_key.export_public_key().decode().strip()
    a_port = nodes.sshds["a"].port
    (nodes.home / "known_hosts").write_text(f"[127.0.0.1]:{a_port} {b_key}\n")
    ex = make_executor(nodes)
    try:
        await ex.start()  # b works? no: b is not trusted either; a has the wrong key
    except NoUsableNode as exc:
        assert "cuco nodes trust a" in str(exc)
    await ex.close()

    # `cuco nodes trust a --yes` replaces the wrong key; b stays untrusted.
    cluster = nodes.cluster_yaml()
    parser = __import__("argparse").ArgumentParser(prog="cuco")
    nodes_verb.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        ["nodes", "trust", "a", "--cluster", str(cluster), "--yes", "--home", str(nodes.home), "--no-user-known-hosts"]
    )
    assert await asyncio.to_thread(args.func, args) == 0
    out = capsys.readouterr().out
    assert "SHA256:" in out and "NOT the key trusted before" in out
    ex = make_executor(nodes)
    await ex.start()
    try:
        r = await ex.run(JobSpec("after-trust", ["echo", "ok"]))
        assert r.ok and r.node == "a"
        states = {n.name: n for n in ex.nodes()}
        assert not states["b"].healthy and "cuco nodes trust b" in states["b"].detail
    finally:
        await ex.close()
    assert await asyncio.to_thread(args.func, args) == 0 and "already trusted" in capsys.readouterr().out


async def test_blob_uploads_skip_what_the_node_has(nodes):
    path = nodes.cluster_yaml()
    cluster = load_cluster(path)
    from dataclasses import replace

    only_a = replace(cluster, nodes=cluster.nodes[:1])
    payload = os.urandom(200_000)
    ex = SSHExecutor(only_a, nodes.home, user_known_hosts=[])
    await ex.start()
    try:
        r1 = await ex.run(JobSpec("blob-1", ["sha256sum", "data.bin"], files={"data.bin": payload}))
        r2 = await ex.run(
            JobSpec("blob-2", ["sha256sum", "same.bin"], files={"same.bin": payload, "sub/dir/x.txt": b"x"})
        )
        assert r1.ok and r2.ok and r1.log.split()[0] == r2.log.split()[0]
        blobs = ex.node("a").blobs
        assert blobs.uploads == 2 and blobs.bytes_sent == len(payload) + 1  # payload once, then "x"
    finally:
        await ex.close()
    ex = SSHExecutor(only_a, nodes.home, user_known_hosts=[])  # a new engine: the node lists its blobs
    await ex.start()
    try:
        r3 = await ex.run(JobSpec("blob-3", ["cat", "sub/dir/x.txt"], files={"a.bin": payload, "sub/dir/x.txt": b"x"}))
        assert r3.ok and r3.log == "x" and ex.node("a").blobs.uploads == 0
        # Someone cleaned the node's cache: the executor notices and uploads again.
        for p in (nodes.work_dir("a") / "blobs").iterdir():
            p.unlink()
        r4 = await ex.run(JobSpec("blob-4", ["wc", "-c", "a.bin"], files={"a.bin": payload}))
        assert r4.ok and r4.log.split()[0] == str(len(payload)) and ex.node("a").blobs.uploads == 1
    finally:
        await ex.close()


async def test_gpu_leases_never_overlap(nodes):
    path = nodes.cluster_yaml(node_extra={"a": {"gpus": [0, 1, 2, 3]}, "b": {"gpus": [0, 1]}})
    ex = SSHExecutor(load_cluster(path), nodes.home, user_known_hosts=[])
    await ex.start()
    try:
        assert ex.max_gpus_per_job == 4
        cmd = 'echo "$CUDA_VISIBLE_DEVICES $(date +%s.%N)"; sleep 0.3; date +%s.%N'
        specs = [JobSpec(f"gpu-{i}", ["sh", "-c", cmd], gpus=2) for i in range(9)]
        specs += [JobSpec(f"cc-{i}", ["sh", "-c", "sleep 0.2"]) for i in range(4)]  # compiles beside them
        results = await asyncio.gather(*(ex.run(s) for s in specs))
        assert all(r.ok for r in results), results
        spans = []
        for r in results[:9]:
            first, end = r.log.split("\n")[:2]
            cvd, start = first.split()
            assert cvd == ",".join(map(str, r.gpus)) and len(r.gpus) == 2
            spans.append((r.node, set(r.gpus), float(start), float(end)))
        for i, (n1, g1, s1, e1) in enumerate(spans):
            for n2, g2, s2, e2 in spans[i + 1 :]:
                if n1 == n2 and s1 < e2 and s2 < e1:
                    assert not (g1 & g2), f"two jobs shared GPUs {g1 & g2} on node {n1}"
        assert {s[0] for s in spans} == {"a", "b"}
        four = await ex.run(JobSpec("gpu-4", ["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"], gpus=4))
        assert four.ok and four.node == "a" and four.log.strip() == "0,1,2,3"
        too_many = await ex.run(JobSpec("gpu-5", ["true"], gpus=5))
        assert too_many.status is JobStatus.ERROR and "no node has 5 GPUs" in too_many.error
    finally:
        await ex.close()


ENGINE = """
import asyncio, sys
from pathlib import Path
from remote.cluster import load_cluster
from remote.jobs import JobSpec
from remote.ssh_executor import SSHExecutor

async def main():
    ex = SSHExecutor(load_cluster(Path(sys.argv[1])), Path(sys.argv[2]), user_known_hosts=[])
    await ex.start()
    specs = [JobSpec(j, ["sh", "-c", c], timeout_s=60, outputs=["out.txt"]) for j, c in JOBS]
    await asyncio.gather(*(ex.run(s) for s in specs))

JOBS = %r
asyncio.run(main())
"""


async def test_engine_dies_then_reconcile_collects_adopts_and_kills(nodes):
    m = nodes.marks
    jobs = [
        ("keep-done", f"sleep 0.7; echo run >> {m}/done.count; echo fast > out.txt; echo finished"),
        ("keep-slow", f"echo run >> {m}/slow.count; sleep 3; echo slow > out.txt"),
        ("unwanted", f"echo started > {m}/unwanted.started; sleep 300"),
    ]
    script = nodes.base / "engine.py"
    script.write_text(ENGINE % (jobs,))
    path = nodes.cluster_yaml()
    proc = subprocess.Popen(
        [sys.executable, str(script), str(path), str(nodes.home)], cwd=Path(__file__).resolve().parents[2]
    )
    try:
        await wait_for_file(m / "unwanted.started", 15)
        await wait_for_file(m / "slow.count")
        assert not (m / "done.count").exists()
    finally:
        proc.kill()  # the engine dies without cleaning up, its jobs still running
        proc.wait()
    await wait_for_file(m / "done.count")  # keep-done finishes with no engine
    await asyncio.sleep(0.2)
    unwanted_pgid = await node_pgid(nodes, "unwanted")
    assert group_alive(unwanted_pgid)

    ex = make_executor(nodes)
    await ex.start()
    try:
        killed = await ex.reconcile({"keep-done", "keep-slow"}, "unwanted|keep-.*")
        assert killed == ["unwanted"]
        assert not group_alive(unwanted_pgid)
        t0 = time.monotonic()
        done, slow = await asyncio.gather(
            ex.run(JobSpec("keep-done", ["sh", "-c", jobs[0][1]], outputs=["out.txt"])),
            ex.run(JobSpec("keep-slow", ["sh", "-c", jobs[1][1]], outputs=["out.txt"])),
        )
        assert done.ok and done.log.strip() == "finished" and done.outputs == {"out.txt": b"fast\n"}
        assert slow.ok and slow.outputs == {"out.txt": b"slow\n"}
        assert time.monotonic() - t0 < 3.0  # adopted, not started again
        assert (m / "done.count").read_text() == "run\n"  # neither job ran twice
        assert (m / "slow.count").read_text() == "run\n"
        await asyncio.sleep(0.5)  # collected job dirs are removed in the background
        left = [p.name for n in ("a", "b") for p in (nodes.work_dir(n) / "jobs").iterdir()]
        assert left == []
    finally:
        await ex.close()


async def test_reconcile_leaves_another_runs_jobs_on_the_node_alone(nodes):
    """Two runs share a node's work dir. Reconciling run `r1` (its engine died) kills its leftover job and
    removes its directory; the job of run `r1-c1` (a name that begins with the first's), in flight for
    another engine, runs on and keeps its directory."""
    ex = make_executor(nodes)
    await ex.start()
    groups = {}
    try:
        jobs = nodes.work_dir("a") / "jobs"
        for job_id in ("r1-c4-benchmark", "r1-c1-c2-r1-build"):  # as the node's user ran them
            proc = subprocess.Popen(["sleep", "120"], start_new_session=True, user=USER)
            groups[job_id] = proc
            (jobs / job_id).mkdir(parents=True)
            (jobs / job_id / "pgid").write_text(f"{proc.pid}\n")
            for path in (jobs / job_id, jobs / job_id / "pgid"):
                shutil.chown(path, USER)
        killed = await ex.reconcile(set(), run_jobs_pattern("r1"))
        assert killed == ["r1-c4-benchmark"]
        assert not group_alive(groups["r1-c4-benchmark"].pid) and not (jobs / "r1-c4-benchmark").exists()
        assert group_alive(groups["r1-c1-c2-r1-build"].pid) and (jobs / "r1-c1-c2-r1-build").is_dir()
    finally:
        for proc in groups.values():
            proc.kill()
            proc.wait()
        await ex.close()


async def test_ssh_config_alias_and_many_concurrent_jobs(nodes):
    b = nodes.sshds["b"]
    nodes.ssh_config.write_text(
        textwrap.dedent(f"""\
        Host node-b-alias
            HostName 127.0.0.1
            Port {b.port}
            User cucotest
            IdentityFile {nodes.client_key}
        """)
    )
    path = nodes.cluster_yaml(
        node_extra={
            "b": {"host": "node-b-alias", "port": None, "user": None, "identity_file": None, "cpu_slots": 8},
            "a": {"cpu_slots": 8},
        }
    )
    ex = SSHExecutor(load_cluster(path), nodes.home, user_known_hosts=[])
    await ex.start()
    try:
        results = await asyncio.gather(*(ex.run(JobSpec(f"many-{i}", ["echo", str(i)])) for i in range(60)))
        assert all(r.ok and r.log.strip() == str(i) and r.attempts == 1 for i, r in enumerate(results))
        assert {r.node for r in results} == {"a", "b"}
        assert all(n.failures == 0 for n in ex.nodes())
        assert all(ex.node(n).pool.connects <= 2 for n in ("a", "b"))  # 8 channels per connection
    finally:
        await ex.close()


async def test_nodes_check_table_and_exit_codes(nodes, capsys):
    import argparse

    from cuco_tui.verbs import nodes as nodes_verb

    parser = argparse.ArgumentParser(prog="cuco")
    nodes_verb.register(parser.add_subparsers(dest="command"))
    path = nodes.cluster_yaml()
    args = parser.parse_args(["nodes", "check", str(path), "--home", str(nodes.home), "--no-user-known-hosts"])
    assert await asyncio.to_thread(args.func, args) == 0
    out = capsys.readouterr().out
    assert "cuco nodes" in out and out.count("yes") >= 4 and str(os.cpu_count()) in out
    assert "nvidia-smi not found" in out or "GPU" in out
    nodes.sshds["b"].kill()
    assert await asyncio.to_thread(args.func, args) == 1
    out = capsys.readouterr().out
    assert "b: unusable: b (127.0.0.1): [Errno 111] Connect call failed" in out
    assert "a: unusable" not in out
