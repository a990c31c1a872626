"""`cuco transform demo --llm MODEL --cluster cluster.yaml`: the fast path builds and verifies every answer
on the real sshd nodes a and b (not on this machine), and the API keys never reach a node.

The model is the real fake-LLM HTTP server of tests/llm, reached by a real `cuco` process over HTTP; its
answer is the demo seed whose cuco_setup dumps the job's environment into the marks folder,
so the test sees, from inside each verify/benchmark process (in its sandbox), who ran it and what it was given.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "llm"))  # the fake LLM server

from fake_llm import FakeLLMServer, Reply  # noqa: E402

from cuco_tui import cli  # noqa: E402
from engine.workload import load_workload  # noqa: E402

CLI = [sys.executable, "-m", "cuco_tui.cli"]
ROOT = Path(__file__).resolve().parents[2]
KEYS = {
    "CUCO_OPENAI_COMPAT_KEY": "sk-compat-TRANSFORMSECRET-0123456789",
    "ANTHROPIC_API_KEY": "sk-ant-TRANSFORMSECRET-abcdef0123",
    "OPENAI_API_KEY": "sk-proj-TRANSFORMSECRET-9876543210",
}


def _env_dumping(seed: str, marks: Path) -> str:
    """The seed, with its cuco_setup (outside the EVOLVE-BLOCK, called by the harness in the job's process)
    writing the process's environment. It needs file I/O, getpid, a clock and environ, which the symbol policy
    refuses: the test's copy of the demo allows them (see _instrumented_demo)."""
    dump = f"""#include <cstdio>
#include <ctime>
#include <unistd.h>
extern char** environ;
static void cuco_test_env_dump() {{
  char path[512];
  // pids repeat across jobs (each is pid 1.. of its own sandbox) and the harness gives every ranks' process
  // one address layout: the clock tells the processes apart
  timespec now{{}};
  clock_gettime(CLOCK_REALTIME, &now);
  std::snprintf(path, sizeof path, "{marks}/env-%d-%ld-%ld", (int)getpid(), (long)now.tv_sec, (long)now.tv_nsec);
  if (FILE* f = std::fopen(path, "w")) {{
    for (char** e = environ; *e; ++e) std::fprintf(f, "%s\\n", *e);
    std::fclose(f);
  }}
}}
"""
    head, sep, rest = seed.partition('#include "cuco_abi.h"\n')
    assert sep, "the demo seed changed: update the injection point"
    setup = 'extern "C" int cuco_setup(const cuco_problem*) { return 0; }'
    assert rest.count(setup) == 1, "the demo seed's cuco_setup changed: update the injection point"
    rest = rest.replace(setup, 'extern "C" int cuco_setup(const cuco_problem*) { cuco_test_env_dump(); return 0; }')
    return head + sep + dump + rest


def _instrumented_demo(tmp_path: Path) -> Path:
    """workloads/demo beside the shared harness, with a workload policy that lets the dump's calls through."""
    shutil.copytree(ROOT / "workloads" / "demo", tmp_path / "demo")
    shutil.copytree(ROOT / "workloads" / "_harness", tmp_path / "_harness")
    yaml_file = tmp_path / "demo" / "workload.yaml"
    yaml_file.write_text(
        yaml_file.read_text() + "\npolicy:\n  allow: [fopen, fclose, getpid, environ, clock_gettime]\n"
    )
    return tmp_path / "demo"


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_BASE_URL")}
    env.update(KEYS)
    return env


def _files_holding(root: Path, needle: bytes) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_transform_builds_and_verifies_on_the_nodes(nodes, tmp_path):
    demo = _instrumented_demo(tmp_path)
    workload = load_workload(str(demo))
    answer = _env_dumping(workload.seed_source, nodes.marks)
    cluster = nodes.cluster_yaml()
    out = tmp_path / "demo-fast.cpp"
    with FakeLLMServer(responder=lambda r: Reply(f"```cpp\n{answer}```")) as srv:
        run = subprocess.run(
            CLI
            + [
                "--home",
                str(nodes.home),
                "transform",
                str(demo),
                "--llm",
                f"openai-compat:coder@{srv.url}/v1",
                "--cluster",
                str(cluster),
                "-o",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env=_child_env(),
        )
        auth = [r.headers.get("authorization", r.headers.get("Authorization", "")) for r in srv.requests]
    assert run.returncode == 0, run.stderr[-3000:]
    assert out.read_text() == answer  # the verified program was written

    # The output names the node that verified the result; every stage of every evaluation ran on a node.
    m = re.search(r"verified on node (\S+?)[;,)]", run.stdout)
    assert m and m.group(1) in nodes.sshds, run.stdout
    stages = re.findall(r"(build|verify|benchmark) on (\S+?)(?:,|$)", run.stderr, re.MULTILINE)
    assert {s for s, _ in stages} == {"build", "verify", "benchmark"}, run.stderr[-3000:]
    assert {n for _, n in stages} <= set(nodes.sshds), stages
    assert not (nodes.home / "jobs").exists()  # no local job directory at all

    # The build uploaded the answer to a node's blob store (content-addressed): it was compiled there.
    sha = hashlib.sha256(answer.encode()).hexdigest()
    assert any((nodes.work_dir(n) / "blobs" / sha).is_file() for n in nodes.sshds)

    # From inside the verify/benchmark processes: they ran under sshd as the node's login user.
    dumps = sorted(nodes.marks.glob("env-*"))
    assert len(dumps) >= 4, dumps  # stages A and B, verify + benchmark each
    for dump in dumps:
        env = dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)
        assert env.get("USER", env.get("LOGNAME")) == "cucotest", sorted(env)  # the node's login user
        assert "SSH_CONNECTION" not in env, sorted(env)  # the session's variables stop at the sandbox's allow-list
        assert not any(k.endswith("_API_KEY") or k == "CUCO_OPENAI_COMPAT_KEY" for k in env), sorted(env)

    # The key was in play (sent to the model as a header) and reached no node.
    assert auth and all(a.endswith(KEYS["CUCO_OPENAI_COMPAT_KEY"]) for a in auth), auth
    for secret in KEYS.values():
        for root in (nodes.work_dir("a"), nodes.work_dir("b"), nodes.marks):
            assert _files_holding(root, secret.encode()) == [], (secret, root)


def test_transform_stops_before_any_llm_call_when_no_node_is_usable(nodes, tmp_path):
    (nodes.home / "known_hosts").write_text("")  # the fixture trusts both nodes: trust nothing
    cluster = nodes.cluster_yaml()
    with FakeLLMServer(responder=lambda r: Reply("unused")) as srv:
        run = subprocess.run(
            CLI
            + [
                "--home",
                str(nodes.home),
                "transform",
                "demo",
                "--llm",
                f"openai-compat:coder@{srv.url}/v1",
                "--cluster",
                str(cluster),
                "-o",
                str(tmp_path / "out.cpp"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=_child_env(),
        )
        requests = len(srv.requests)
    assert run.returncode == 1, run.stderr[-3000:]  # as `cuco run` exits when nodes are unusable
    assert "cuco nodes trust" in run.stderr and str(cluster) in run.stderr
    assert requests == 0  # no LLM cost for a run that cannot verify
    assert not (tmp_path / "out.cpp").exists()


def test_transform_cluster_missing_file_is_bad_input(tmp_path, capsys):
    missing = tmp_path / "nope" / "cluster.yaml"
    rc = cli.main(
        [
            "--home",
            str(tmp_path / "home"),
            "transform",
            "demo",
            "--llm",
            "openai-compat:coder@http://127.0.0.1:9/v1",
            "--cluster",
            str(missing),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert str(missing) in err and "--cluster" in err


def test_transform_cluster_bad_yaml_names_file_and_field(tmp_path, capsys):
    bad = tmp_path / "cluster.yaml"
    bad.write_text(yaml.safe_dump({"nodes": [{"name": "a", "host": "127.0.0.1", "port": 70000}]}))
    rc = cli.main(
        [
            "--home",
            str(tmp_path / "home"),
            "transform",
            "demo",
            "--llm",
            "openai-compat:coder@http://127.0.0.1:9/v1",
            "--cluster",
            str(bad),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert str(bad) in err and "nodes[0].port" in err
