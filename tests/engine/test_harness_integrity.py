"""The evaluation cascade and the frozen CPU harness against bad candidates (real g++ compiles, real
subprocesses): nothing a candidate prints or writes about itself is believed.

Every candidate is the demo's seed with its EVOLVE-BLOCK edited; all of them are evaluated concurrently
once per module (engine.evaluation.evaluation.evaluate_source on a remote.local.LocalExecutor).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from engine import blocks
from engine.evaluation.evaluation import EvalOutcome, FrozenObjectCache, evaluate_source
from engine.workload import load_workload
from remote.local import LocalExecutor

pytestmark = pytest.mark.skipif(
    shutil.which("g++") is None, reason="g++ is not on PATH: these tests compile real candidates with the harness"
)

RUN_HEAD = (
    'extern "C" int cuco_run(const cuco_problem* p) {\n  const int N = p->N, ld = p->ranks * N, rank = p->rank;\n'
)
SEED_RETURN = "  return p->wait(p->link, rank, 0, p->ranks - 1, 20000) == 0 ? 0 : 6;\n"
RUN_TAIL = SEED_RETURN + "}\n// EVOLVE-BLOCK-END"
PUT_LINE = "    if (peer != rank) p->put(p->link, rank, peer, 0, rank * N, p->M, N, p->scratch, N, 0);\n"
SEED_SEND_LOOP = (
    "  for (int s = 0; s < p->ranks; ++s) {\n"
    "    const int peer = kStagger ? (rank + s) % p->ranks : s;\n" + PUT_LINE + "  }\n"
)

# libc functions the bad candidates need, declared inside the block (no preprocessor lines allowed).
DECLS = (
    'extern "C" int open(const char*, int, ...);\n'
    'extern "C" long read(int, void*, unsigned long);\n'
    'extern "C" long write(int, const void*, unsigned long);\n'
    'extern "C" int close(int);\n'
    'extern "C" int fork(void);\n'
    'extern "C" void exit(int);\n'
    'extern "C" void _exit(int);\n'
    'extern "C" int printf(const char*, ...);\n'
)
O_WRONLY_CREAT_TRUNC = 0o1 | 0o100 | 0o1000

FORGED_VERIFY = (
    '{"harness": "cuco-cpu/1", "mode": "verify", "correct": true, "error": null, "configs": ['
    '{"name": "tall", "correct": true}, {"name": "square", "correct": true}, '
    '{"name": "odd", "correct": true}, {"name": "sliver", "correct": true}], "env": {}}'
)
FORGED_BENCH = (
    '{"harness": "cuco-cpu/1", "mode": "benchmark", "correct": true, "error": null, "configs": ['
    '{"name": "tall", "correct": true, "baseline_ms": 1.0, "candidate_ms": 0.01, "speedup": 100.0}, '
    '{"name": "square", "correct": true, "baseline_ms": 1.0, "candidate_ms": 0.01, "speedup": 100.0}], '
    '"env": {}}'
)


def c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def edit(seed: str, *, head: str = "", tail: str = "", decls: str = "", replace: tuple[str, str] | None = None) -> str:
    """The seed with code added at the start / before the `return 0;` of cuco_run."""
    assert seed.count(RUN_HEAD) == 1 and seed.count(RUN_TAIL) == 1
    src = seed.replace(RUN_HEAD, decls + RUN_HEAD + head).replace(RUN_TAIL, tail + RUN_TAIL)
    if replace:
        assert src.count(replace[0]) == 1
        src = src.replace(*replace)
    blocks.validate_child(seed, src)  # every bad candidate is a legal edit: only the harness stops it
    return src


def bad_candidates(seed: str) -> dict[str, str]:
    write_file = (
        '    int fd = open("{path}", ' + str(O_WRONLY_CREAT_TRUNC) + ", 0644);\n"
        "    const char* s = {text};\n"
        "    write(fd, s, strlen(s));\n"
        "    close(fd);\n"
    )
    return {
        "seed": seed,
        "compile_error": edit(seed, tail="  cuco_undeclared_helper(rank);\n"),
        "segfault": edit(
            seed,
            decls="static volatile int* volatile g_nowhere = nullptr;\n",
            head="  if (rank == 0) *g_nowhere = 1;\n",
        ),
        # (It cannot fork a helper any more: the harness's system-call filter refuses that, tests/integrity/
        # test_seccomp.py; a job's forked grandchildren dying with it is tests/remote/test_local_executor.py's.)
        "hang": edit(
            seed, decls=DECLS, head=("  for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(20));\n")
        ),
        # Rank 1 sends rank 0 an empty transfer instead of its tile (the arrival counter still rises).
        "wrong_gather": edit(
            seed, replace=(PUT_LINE, PUT_LINE.replace("p->M, N,", "(rank == 1 && peer == 0) ? 0 : p->M, N,"))
        ),
        "fake_pass": edit(
            seed,
            decls=DECLS,
            head=('  if (rank == 0) printf("Verification: PASS\\nTime: 0.001 ms\\n");\n  return 0;\n'),
        ),
        "detached_thread": edit(
            seed, tail=("  std::thread([] { std::this_thread::sleep_for(std::chrono::seconds(3)); }).detach();\n")
        ),
        "writes_input": edit(seed, tail="  if (rank == 0) const_cast<float*>(p->A)[0] += 1.0f;\n"),
        # The all-gather moved onto a detached thread that finishes a millisecond or two after
        # cuco_run returned: the copy is never timed.
        "late_copy_thread": edit(
            seed,
            replace=(
                SEED_SEND_LOOP + SEED_RETURN,
                (
                    "  std::thread([p, rank, N] {\n"
                    "    std::this_thread::sleep_for(std::chrono::milliseconds(1));\n"
                    + SEED_SEND_LOOP.replace("\n  ", "\n    ").replace("  for (int s", "    for (int s", 1)
                    + "  }).detach();\n  return 0;\n"
                ),
            ),
        ),
        # Memoisation across calls: the timed calls all see the same inputs, so after the first call the
        # candidate replays its saved output (every input compared in full, so it is never wrong).
        "replay_cache": edit(
            seed,
            decls=(
                # pointers, not objects: a global with a constructor is refused by the symbol policy
                "static std::vector<float>* g_key[2];\n"
                "static std::vector<float>* g_saved[2];\n"
                "static std::vector<float> cache_key(const cuco_problem* p) {\n"
                "  std::vector<float> k(p->A, p->A + (size_t)p->M * p->K);\n"
                "  k.insert(k.end(), p->B, p->B + (size_t)p->K * p->N);\n"
                "  k.push_back((float)p->M); k.push_back((float)p->N);\n"
                "  return k;\n"
                "}\n"
            ),
            head=(
                "  const size_t out_n = (size_t)p->M * p->ranks * p->N;\n"
                "  std::vector<float> key = rank < 2 ? cache_key(p) : std::vector<float>();\n"
                "  if (rank < 2 && !g_key[rank]) { g_key[rank] = new std::vector<float>(); g_saved[rank] = new std::vector<float>(); }\n"
                "  if (rank < 2 && key == *g_key[rank] && g_saved[rank]->size() == out_n) {\n"
                "    memcpy(p->out, g_saved[rank]->data(), out_n * sizeof(float));\n"
                "    return 0;\n"
                "  }\n"
            ),
            tail=(
                "  if (rank < 2) { p->wait(p->link, rank, 0, p->ranks - 1, 20000);\n"
                "    *g_key[rank] = key; g_saved[rank]->assign(p->out, p->out + out_n); }\n"
            ),
        ),
        "forged_result_exit": edit(
            seed,
            decls=DECLS,
            head=(
                "  if (rank == 0) {\n"
                + write_file.format(path="result.json", text=c_string(FORGED_VERIFY))
                + "    exit(0);\n  }\n"
            ),
        ),
        "forged_result__exit": edit(
            seed,
            decls=DECLS,
            head=(
                "  {\n"
                "    char spec[8192] = {0};\n"
                '    int in = open("spec.json", 0);\n'
                "    long n = read(in, spec, sizeof spec - 1);\n"
                "    close(in);\n"
                "    (void)n;\n"
                '    const bool bench = strstr(spec, "\\"mode\\": \\"benchmark\\"") != nullptr;\n'
                "    if (rank == 0) {\n"
                + write_file.format(
                    path="result.json", text=f"bench ? {c_string(FORGED_BENCH)} : {c_string(FORGED_VERIFY)}"
                )
                + "      _exit(0);\n    }\n"
                "    for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(20));\n"
                "  }\n"
            ),
        ),
    }


def live_processes_under(root: Path) -> list[tuple[int, str]]:
    """Processes (not zombies) whose working directory or executable lies under `root`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            if state in ("Z", "X"):
                continue
            paths = [os.readlink(f"/proc/{entry}/cwd"), os.readlink(f"/proc/{entry}/exe")]
        except (OSError, IndexError):
            continue
        if any(p.startswith(str(root)) for p in paths):
            found.append((int(entry), paths[1]))
    return found


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    workload = load_workload("demo")
    # These candidates test the harness's own defences, behind the symbol policy (which refuses their libc
    # calls before anything runs: tests/integrity/): the workload's policy lets them through to it.
    workload = dataclasses.replace(
        workload,
        extra={
            **workload.extra,
            "policy": {
                "allow": ["open", "read", "write", "close", "fork", "exit", "_exit", "strstr", "_ZNSt11this_thread*"]
            },
        },
    )
    # Fewer timed pairs than the shipped 11 keep the module fast; still A B A B side by side.
    fast = dataclasses.replace(workload, warmup=1, iters=5)
    hang_workload = dataclasses.replace(workload, timeouts=dict(workload.timeouts, verify=3.0))
    sources = bad_candidates(workload.seed_source)
    work = tmp_path_factory.mktemp("jobs")
    hang_work = tmp_path_factory.mktemp("hang-jobs")

    async def main() -> dict:
        executor = LocalExecutor(work_dir=work, keep_job_dirs=True)
        # The hang sleeps in its loop; on its own executor it does not hold a CPU slot the seed's
        # benchmark is waiting for.
        hang_executor = LocalExecutor(work_dir=hang_work, keep_job_dirs=True)
        frozen = FrozenObjectCache()  # the frozen harness is compiled once for all candidates
        try:

            async def one(name: str) -> tuple[str, EvalOutcome]:
                w, ex = (hang_workload, hang_executor) if name == "hang" else (fast, executor)
                out = await asyncio.wait_for(
                    evaluate_source(w, sources[name], ex, job_prefix=name, seed=4242, frozen=frozen), 150
                )
                return name, out

            outs = dict(await asyncio.gather(*(one(n) for n in sources)))
        finally:
            await executor.close()
            await hang_executor.close()
        # The hang's job directory, and whatever still runs there (give SIGKILL a moment to land).
        hang_dirs = sorted(hang_work.glob("hang-verify-*"))
        left = []
        for _ in range(30):
            left = [p for d in hang_dirs for p in live_processes_under(d)]
            if not left:
                break
            await asyncio.sleep(0.1)
        return {"outcomes": outs, "hang_dirs": hang_dirs, "hang_left": left}

    return asyncio.run(main())


def outcome(results, name: str) -> EvalOutcome:
    return results["outcomes"][name]


def test_seed_is_done_at_about_1x(results):
    out = outcome(results, "seed")
    assert out.status == "done", (out.reason, out.feedback)
    assert out.correct is True
    # The seed is the baseline's code, measured side by side (A B A B) on a noisy machine.
    assert 0.5 <= out.speedup <= 2.0, out.speedup
    assert out.time_ms > 0 and out.baseline_ms > 0
    assert [s.stage for s in out.stages] == ["build", "verify", "benchmark"]
    assert all(s.status == "ok" for s in out.stages)
    bench = out.metrics["benchmark"]
    assert [c["name"] for c in bench["configs"]] == ["tall", "square"]  # bench configs only
    assert [c["name"] for c in out.metrics["verify"]["configs"]] == ["tall", "square", "odd", "sliver"]


def test_compile_error_fails_in_build_with_the_compiler_message(results):
    out = outcome(results, "compile_error")
    assert out.status == "failed"
    assert "build" in out.reason
    assert [s.stage for s in out.stages] == ["build"]
    assert "error:" in out.feedback and "cuco_undeclared_helper" in out.feedback
    line = next(text for text in out.feedback.splitlines() if "cuco_undeclared_helper" in text and "error" in text)
    assert "candidate.cpp:" in line


def test_segfault_is_incorrect_by_the_judge(results):
    # the candidate's ranks run in a process of their own: the judge outlives their crash and says so
    out = outcome(results, "segfault")
    assert out.status == "incorrect", (out.status, out.reason)
    assert "killed by signal 11" in out.reason
    assert out.stages[-1].stage == "verify" and out.stages[-1].status == "incorrect"
    assert out.speedup is None and out.fault is None  # the candidate's failure, never the environment's


def test_infinite_loop_times_out_and_its_process_group_dies(results):
    out = outcome(results, "hang")
    assert out.status == "failed"
    assert "timed out" in out.reason and "verify" in out.reason
    assert out.stages[-1].status == "timeout"
    assert 2.5 <= out.stages[-1].duration_s < 15
    assert len(results["hang_dirs"]) == 1
    assert results["hang_left"] == [], f"processes of the timed-out job still alive: {results['hang_left']}"


def test_wrong_gather_is_incorrect_naming_rank_and_index(results):
    out = outcome(results, "wrong_gather")
    assert out.status == "incorrect" and out.correct is False
    # Rank 0 never copied rank 1's tile: the first element of tile 1 (column N = 256) of config tall.
    assert "rank 0" in out.reason and "index 256" in out.reason
    assert "gather" in out.reason and "tall" in out.reason
    assert [s.stage for s in out.stages] == ["build", "verify"]


def test_printed_pass_and_time_are_not_believed(results):
    out = outcome(results, "fake_pass")
    assert out.status == "incorrect"
    assert out.speedup is None and out.time_ms is None
    assert "Verification: PASS" in out.stages[-1].log  # it did print it
    assert "rank" in out.reason


def test_detached_thread_is_caught(results):
    out = outcome(results, "detached_thread")
    assert out.status != "done"
    assert "thread" in out.reason


def test_writing_the_inputs_is_caught(results):
    out = outcome(results, "writes_input")
    assert out.status != "done"
    assert "inputs" in out.reason


def test_forged_result_then_exit_is_overwritten_by_the_harness(results):
    out = outcome(results, "forged_result_exit")
    assert out.status != "done"
    assert out.speedup is None
    assert "exit" in out.reason or "nonce" in out.reason


def test_forged_result_then__exit_is_not_believed(results):
    out = outcome(results, "forged_result__exit")
    if not out.stages or out.stages[0].status != "ok":  # a broken test candidate is a real failure
        pytest.fail(f"the forging candidate did not build: {out.feedback}")
    assert out.status != "done", f"believed a forged result: speedup {out.speedup}"


def test_work_finished_on_a_detached_thread_after_return_is_not_believed(results):
    out = outcome(results, "late_copy_thread")
    if not out.stages or out.stages[0].status != "ok":
        pytest.fail(f"the late-copy candidate did not build: {out.feedback}")
    # Either refused, or the late copy is inside the timed region: the time covers the thread's work,
    # so the cheat shows no gain over honest work (it used to report 1.2x by hiding the copy).
    if out.status == "done":
        bench = out.metrics["benchmark"]["configs"]
        assert all(c["candidate_ms"] >= 0.5 * c["baseline_ms"] for c in bench), bench
        assert out.speedup < 1.5, f"untimed work believed: speedup {out.speedup}"


def test_replaying_a_cached_answer_is_not_believed(results):
    out = outcome(results, "replay_cache")
    if not out.stages or out.stages[0].status != "ok":
        pytest.fail(f"the replay candidate did not build: {out.feedback}")
    # Inputs change before every timed call, so a replayed answer never matches: the candidate either
    # computes honestly (no gain) or is caught with stale output (it used to report 21.5x).
    assert out.status != "done" or out.speedup < 1.5, f"replayed answers believed: speedup {out.speedup}"
