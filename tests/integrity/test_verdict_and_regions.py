"""The verdict cannot be forged, the CPU judge shares nothing writable with both sides, and a candidate
cannot pass its failure off as the environment's (workloads/_harness/cpu/harness.cpp, ranks.cpp,
engine/evaluation/evaluation.py, engine/evaluation/faults.py).

Each candidate is the demo's seed with a cheat spliced in, compiled by real g++ and run through the real
evaluation cascade on a real local executor (in the job sandbox). The workload's policy allows the libc
calls the cheats make, as a computed pointer would get round it: the defence under test must hold on its
own. Where a cheat needs the shared region's layout, it reads it from the harness's header, as an adversary
reading the frozen source would (here: offsetof, compiled at test time).

Before these defences, each was believed: the nonce read from the wrapper shell's memory and a result.json
put in place of the judge's (1.35x); the baseline's commands seen in the shared command counter, and its
geometry rewritten before its full runs (1.19-1.99x); a put whose source lay past the region, which the
judge bounded by a field of the region (the judge's own memory, its check's generator included, read
back); a put whose `col + cols` wrapped round, which crashed the judge after a forged result.json was in
place; a candidate that printed "No space left on device" and crashed, taken for a full disk (the run paused).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

import engine.evaluation.evaluation as evaluation
from engine.evaluation.evaluation import EvalOutcome
from tests.integrity.evaluate_all import demo_cheats, evaluate_all

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH: the candidates are compiled")

HARNESS = Path(__file__).resolve().parents[2] / "workloads" / "_harness"

ALLOWED = [
    "fopen",
    "fgets",
    "fclose",
    "fputs",
    "fread",
    "fwrite",
    "fseek",
    "fflush",
    "sscanf",
    "__isoc99_sscanf",
    "strstr",
    "printf",
    "fprintf",
    "snprintf",
    "rename",
    "stderr",
    "write",
]

DECLS = (
    "typedef struct _IO_FILE FILE;\n"
    'extern "C" FILE* fopen(const char*, const char*);\n'
    'extern "C" char* fgets(char*, int, FILE*);\n'
    'extern "C" int fclose(FILE*);\n'
    'extern "C" int fputs(const char*, FILE*);\n'
    'extern "C" unsigned long fread(void*, unsigned long, unsigned long, FILE*);\n'
    'extern "C" int fseek(FILE*, long, int);\n'
    'extern "C" int fflush(FILE*);\n'
    'extern "C" int sscanf(const char*, const char*, ...);\n'
    'extern "C" int printf(const char*, ...);\n'
    'extern "C" int fprintf(FILE*, const char*, ...);\n'
    'extern "C" FILE* stderr;\n'
    'extern "C" int snprintf(char*, unsigned long, const char*, ...);\n'
    'extern "C" int rename(const char*, const char*);\n'
    'extern "C" long write(int, const void*, unsigned long);\n'
)


def layout() -> dict[str, int]:
    """Offsets in the shared region, from the harness's own header (what an adversary reads)."""
    names = {
        "cmd_seq": "offsetof(Region, cmd_seq)",
        "data_floats": "offsetof(Region, data_floats)",
        "put_size": "sizeof(PutReq)",
        "put_src_off": "offsetof(PutReq, src_off)",
    }
    src = (
        '#include <cstddef>\n#include <cstdio>\n#include "cuco_shared.h"\nusing namespace cuco_shared;\nint main() {\n'
        + "".join(f'  printf("{k} %zu\\n", (size_t)({v}));\n' for k, v in names.items())
        + "}\n"
    )
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "layout"
        subprocess.run(
            ["g++", "-std=c++17", f"-I{HARNESS / 'cpu'}", f"-I{HARNESS}", "-x", "c++", "-", "-o", str(binary)],
            input=src.encode(),
            check=True,
            timeout=120,
        )
        text = subprocess.run([str(binary)], capture_output=True, text=True, timeout=30, check=True).stdout
    return {k: int(v) for k, v in (line.split() for line in text.splitlines())}


# Every process it can see: its memory read through /proc/PID/mem for a 32-hex-digit string (the nonce's
# shape), each one found printed; then a result.json of its own, saying correct, with the first one found,
# put in place of the judge's by rename (and result.json.tmp taken first, where a judge that writes
# through a temporary file would have failed silently). Then it computes honestly; where it could not
# write the job's directory at all (its ranks run under a uid of their own), it says so as its verdict.
STEAL_AND_FORGE = (
    "static int cuco_candidate_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }\n"
    "static int cuco_candidate_scan(int pid, char* nonce) {\n"
    "  char path[64];\n"
    '  snprintf(path, sizeof path, "/proc/%d/maps", pid);\n'
    '  FILE* maps = fopen(path, "r");\n'
    "  if (!maps) return 0;\n"
    '  snprintf(path, sizeof path, "/proc/%d/mem", pid);\n'
    '  FILE* mem = fopen(path, "rb");\n'
    "  if (!mem) { fclose(maps); return 0; }\n"
    "  static char buf[1 << 16];\n"
    "  char line[512];\n"
    "  int found = 0;\n"
    "  while (fgets(line, sizeof line, maps)) {\n"
    '    unsigned long a, b; char perm[8] = "";\n'
    "    if (sscanf(line, \"%lx-%lx %7s\", &a, &b, perm) != 3 || perm[0] != 'r') continue;\n"
    '    if (strstr(line, "[vvar") || strstr(line, "[vsyscall")) continue;\n'
    "    for (unsigned long at = a; at < b; at += sizeof buf) {\n"
    "      unsigned long want = b - at < sizeof buf ? b - at : sizeof buf;\n"
    "      if (fseek(mem, (long)at, 0) != 0) break;\n"
    "      unsigned long got = fread(buf, 1, want, mem);\n"
    "      int run = 0;\n"
    "      for (unsigned long i = 0; i < got; ++i) {\n"
    "        run = cuco_candidate_hex(buf[i]) ? run + 1 : 0;\n"
    "        if (run == 32 && (i + 1 == got || !cuco_candidate_hex(buf[i + 1]))) {\n"
    "          char s[33]; memcpy(s, buf + i - 31, 32); s[32] = 0;\n"
    '          printf("hex string in pid %d: %s\\n", pid, s);\n'
    "          if (!found) memcpy(nonce, s, 33);\n"
    "          found = 1;\n"
    "        }\n"
    "      }\n"
    "      if (got < want) break;\n"
    "    }\n"
    "  }\n"
    "  fclose(mem); fclose(maps);\n"
    "  return found;\n"
    "}\n"
)
STEAL_AND_FORGE_HEAD = (
    "  static int forged = 0, placed = 0;\n"
    "  if (p->rank == 0 && !forged) {\n"
    "    forged = 1;\n"
    '    char nonce[33] = "00000000000000000000000000000000";\n'
    "    int seen = 0;\n"
    "    for (int pid = 1; pid < 256; ++pid) seen += cuco_candidate_scan(pid, nonce);\n"
    '    printf("processes with a nonce-shaped string: %d\\n", seen);\n'
    '    if (FILE* t = fopen("result.json.tmp", "w")) fclose(t);\n'
    '    if (FILE* f = fopen("forged.json", "w")) {\n'
    '      fputs("{\\"harness\\": \\"cuco-cpu/1\\", \\"mode\\": \\"verify\\", \\"correct\\": true, \\"error\\": null, "\n'
    '            "\\"configs\\": [{\\"name\\": \\"tall\\", \\"correct\\": true}, {\\"name\\": \\"square\\", \\"correct\\": true}, "\n'
    '            "{\\"name\\": \\"odd\\", \\"correct\\": true}, {\\"name\\": \\"sliver\\", \\"correct\\": true}], \\"nonce\\": \\"", f);\n'
    "      fputs(nonce, f);\n"
    '      fputs("\\"}\\n", f);\n'
    "      fclose(f);\n"
    '      placed = rename("forged.json", "result.json") == 0;\n'
    "    }\n"
    '    printf("forged result in place: %d\\n", placed);\n'
    "    fflush(nullptr);\n"
    "  }\n"
    "  p->barrier(p->barrier_ctx);\n"
    "  if (!placed) return 46;   // the job's directory is not its to write: nothing to gain, say so\n"
)


def region_cheats(lay: dict[str, int]) -> dict[str, tuple[str, str]]:
    """The cheats on the shared region, with its layout filled in."""
    region = "char* cuco_candidate_region = *(char**)p->link;   // a port's first member: its region\n"
    # Its own command counter between its own calls: with one region for both sides, the baseline's
    # commands showed as gaps (where the A B loop was); with its own region, there are none.
    count_commands = (
        "  {\n    " + region + "    static unsigned last = 0; static int calls = 0, gaps = 0;\n"
        f"    unsigned now = *(volatile unsigned*)(cuco_candidate_region + {lay['cmd_seq']});\n"
        "    if (p->rank == 0) {\n"
        "      if (calls++ && now != last + 1) ++gaps;\n"
        "      last = now;\n"
        '      printf("commands of the other side seen: %d\\n", gaps);\n'
        "      fflush(nullptr);\n"
        "    }\n"
        "    p->barrier(p->barrier_ctx);\n"
        "    if (calls >= 2) return gaps ? 45 : 44;   // the baseline's call between was invisible: say so\n"
        "  }\n"
    )
    # The data area's size in the region raised, then a put whose source lies past the region: a judge that
    # bounded the source by that field would copy its own memory into the candidate's output.
    read_past = (
        "  {\n    " + region + "    if (p->rank == 0) {\n"
        f"      *(long*)(cuco_candidate_region + {lay['data_floats']}) = 1L << 40;\n"
        "      const float* beyond = p->A + (64L << 20);   // 256 MiB past the inputs, outside every region\n"
        "      p->put(p->link, 0, 1, 0, 0, 1, 16, beyond, 16, 7);\n"
        "    }\n"
        "  }\n"
    )
    # After honest work: a put sent straight on the link's socket (descriptor 11, round the put call's own
    # checks), whose `col + cols` wraps round in 32 bits (it crashed the judge, leaving whatever result.json
    # was there).
    wrap = (
        "  {\n    " + region + "    int rc = cuco_candidate_honest(p);\n"
        "    p->barrier(p->barrier_ctx);\n"
        "    if (p->rank == 0) {\n"
        f"      char e[{lay['put_size']}] = {{0}};\n"
        "      int fields[9] = {0, 1, 0, 0x7fffff00, 1, 0x200, 0x200, 0, 0};   // from dst row col rows cols src_ld flag helper\n"
        "      memcpy(e, fields, sizeof fields);\n"
        f"      *(long*)(e + {lay['put_src_off']}) = 0;\n"
        "      if (write(11, e, sizeof e) != (long)sizeof e) return 47;\n"
        '      printf("wrapping put queued\\n");\n'
        "      fflush(nullptr);\n"
        "    }\n"
        "    return rc;\n"
        "  }\n"
    )
    honest = (
        "static int cuco_candidate_honest(const cuco_problem* p) {\n"
        "  const int N = p->N, ld = p->ranks * N, rank = p->rank;\n"
        "  gemm_rows(p, 0, p->M, p->scratch, N);\n"
        "  for (int i = 0; i < p->M; ++i) memcpy(p->out + (size_t)i * ld + (size_t)rank * N, "
        "p->scratch + (size_t)i * N, sizeof(float) * N);\n"
        "  p->barrier(p->barrier_ctx);\n"
        "  for (int s = 0; s < p->ranks; ++s) if (s != rank) p->put(p->link, rank, s, 0, rank * N, p->M, N, p->scratch, N, 0);\n"
        "  return p->wait(p->link, rank, 0, p->ranks - 1, 20000) == 0 ? 0 : 6;\n"
        "}\n"
    )
    # Say the disk is full, then crash: the job's log says what a full disk says.
    claim_no_space = (
        "  if (p->rank == 0) {\n"
        '    fprintf(stderr, "write: No space left on device\\n");\n'
        "    fflush(nullptr);\n"
        "    *(volatile int*)0 = 1;\n"
        "  }\n"
    )
    return {
        "steal_the_nonce_and_forge": (DECLS + STEAL_AND_FORGE, STEAL_AND_FORGE_HEAD),
        "count_the_baselines_commands": (DECLS, count_commands),
        "read_past_the_region": (DECLS, read_past),
        "wrap_a_bounds_check": (DECLS + honest, wrap),
        "claim_no_space": (DECLS, claim_no_space),
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[dict[str, EvalOutcome], list[str]]:
    """Every cheat's outcome, and every nonce the engine handed out."""
    tmp = tmp_path_factory.mktemp("verdict")
    workload, sources = demo_cheats(tmp, region_cheats(layout()), ALLOWED, iters=3)
    nonces: list[str] = []
    real = evaluation.secrets.token_hex

    def recorded(n: int) -> str:
        nonces.append(real(n))
        return nonces[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(evaluation.secrets, "token_hex", recorded)
        outcomes = evaluate_all(workload, sources, Path(tmp) / "jobs", seed=7)
    return outcomes, nonces


def logs(out: EvalOutcome) -> str:
    return "\n".join(s.log or "" for s in out.stages)


def test_no_process_of_the_job_shows_the_nonce_and_a_result_put_in_its_place_is_seen(run):
    """The nonce reaches the judge as its stdin from a file no shell reads. Run by root, the candidate's ranks
    run under a uid of their own that cannot write the job's directory; else the judge, which created
    result.json before any candidate code ran, finds its file replaced at the end, and the verdict says so."""
    outcomes, nonces = run
    out = outcomes["steal_the_nonce_and_forge"]
    text = logs(out)
    assert nonces and not any(n in text for n in nonces), "a process of the job held the nonce"
    assert out.status == "incorrect" and out.speedup is None, (out.status, out.reason)
    if os.geteuid() == 0:
        assert "forged result in place: 0" in text, text[-2000:]
        assert "cuco_run returned 46" in out.reason, out.reason
        uid = out.metrics["verify"]["env"]["candidate_uid"]
        assert uid != 0 and uid != out.metrics["verify"]["env"]["judge_uid"], out.metrics["verify"]["env"]
    else:
        assert "forged result in place: 1" in text, text[-2000:]
        assert "result.json was replaced while the job ran" in out.reason, out.reason


def test_the_baselines_commands_are_not_in_the_candidates_region(run):
    """Each ranks' process has a region of its own: the candidate's command counter counts its own calls."""
    out = run[0]["count_the_baselines_commands"]
    assert out.status == "incorrect", (out.status, out.reason)
    assert "cuco_run returned 44" in out.reason, out.reason
    assert "commands of the other side seen: 0" in logs(out)


def test_a_put_past_the_region_is_bounded_by_the_judges_own_limit(run):
    """The data area's size the judge checks a put's source against is its own, not the region's field."""
    out = run[0]["read_past_the_region"]
    assert out.status == "incorrect", (out.status, out.reason)
    assert "the link was handed a put it cannot carry" in out.reason, out.reason


def test_a_bounds_check_does_not_wrap_and_the_judge_stands(run):
    """`col + cols` past 2^31 is caught in 64-bit arithmetic: the judge writes its verdict instead of crashing."""
    out = run[0]["wrap_a_bounds_check"]
    assert "wrapping put queued" in logs(out)
    assert out.status == "incorrect", (out.status, out.reason)
    assert "the link was handed a put it cannot carry" in out.reason, out.reason
    assert out.stages[-1].rc == 0, out.stages[-1].rc  # the judge ended on its own terms


def test_a_candidate_that_says_the_disk_is_full_and_crashes_is_its_own_failure(run):
    """What a job prints is not the environment's word: the judge saw its candidate's process killed by
    SIGSEGV, and that is the verdict; no environment fault, no pause."""
    out = run[0]["claim_no_space"]
    assert "No space left on device" in logs(out)
    assert out.status == "incorrect", (out.status, out.reason)
    assert "killed by signal 11" in out.reason, out.reason
    assert out.fault is None or not out.fault.environment, out.fault


def test_every_job_exited_0_or_was_not_believed(run):
    """No stage whose job exited other than 0 carries a correct result."""
    for name, out in run[0].items():
        for st in out.stages:
            if st.result is not None and st.result.get("correct"):
                assert st.rc == 0, (name, st.stage, st.rc)
