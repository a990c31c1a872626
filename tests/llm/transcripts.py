"""Recorded transcripts: cuco's own prompts, answered by a model, kept as fixtures and replayed through the
OpenAI-compatible test server.

A transcript is a folder `tests/llm/transcripts/<name>/` of `NNN-<key>.json` files, one per LLM call in the
order cuco makes them: `{"key", "answer", "prompt"}`. The key is the SHA-256 of the call's messages with the
measured numbers masked (times, speedups and their intervals vary from run to run; every other byte of the
prompt counts). Replaying, the server answers call NNN with fixture NNN's answer when the keys match, and
refuses the call otherwise, naming the fixture to refresh.

    python tests/llm/transcripts.py record demo      # run until the first prompt without an answer; it is
                                                     # written to NNN-<key>.prompt.md: answer it in NNN-<key>.json
    python tests/llm/transcripts.py refresh demo     # prompts changed on purpose: re-key every fixture, in order,
                                                     # keeping its answer (read the new prompts first)
    python tests/llm/transcripts.py replay demo      # what CI does
    python tests/llm/transcripts.py serve attention_gpu OUT_DIR   # a replay server for a run elsewhere (a GPU
                                                     # node): answers by position, writes each prompt to OUT_DIR
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))
from fake_llm import FakeLLMServer, Reply, Request  # noqa: E402
from transcript_executor import RecordedBenchmarks  # noqa: E402

from engine.blocks import parse_blocks  # noqa: E402
from engine.config import RunConfig  # noqa: E402
from engine.llm.edits import apply_diff, parse_diff  # noqa: E402
from engine.run.engine import Engine  # noqa: E402
from engine.workload import load_workload  # noqa: E402
from remote.local import LocalExecutor  # noqa: E402

ROOT = HERE.parents[1]
TRANSCRIPTS = HERE / "transcripts"
MODEL = "recorded"
INTERVAL = re.compile(r" ?\[\d[\d.]*-\d[\d.]*\]")
MEASURED = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e[-+]?\d+)?(?=x\b| ms\b|%)")
TIMELINE = re.compile(r"(where its time went[^\n]*\n)(?:[ -].*\n)*", re.MULTILINE)
QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def masked(text: str) -> str:
    """The prompt as its key sees it: the profiled call's timeline (which rank is critical, which gap is
    largest: a measurement) reduced to its heading, intervals dropped, measured numbers as `#`, typographic
    quotes (a compiler's, by locale) plain."""
    text = TIMELINE.sub(r"\1", text)
    return MEASURED.sub("#", INTERVAL.sub("", text)).translate(QUOTES)


def prompt_text(body: dict[str, Any]) -> str:
    parts = [f"[{m.get('role')}]\n{m.get('content')}" for m in body.get("messages", [])]
    return "\n\n".join(parts)


def key_of(body: dict[str, Any]) -> str:
    return hashlib.sha256(masked(prompt_text(body)).encode()).hexdigest()


@dataclass
class Fixture:
    path: Path
    number: int
    key: str
    answer: str


def fixtures(name: str) -> list[Fixture]:
    out = []
    for path in sorted((TRANSCRIPTS / name).glob("[0-9][0-9][0-9]-*.json")):
        data = json.loads(path.read_text())
        out.append(Fixture(path, int(path.name[:3]), data["key"], data["answer"]))
    return out


@dataclass
class Replay:
    """The test server's responder: call N gets fixture N's answer if its prompt's key matches."""

    name: str
    mode: str = "replay"  # replay | record | refresh | order (answers by position, keys not checked)
    calls: int = 0
    problems: list[str] = field(default_factory=list)
    unanswered: Path | None = None
    prompts: Path | None = None  # serve mode: where each prompt is written
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, req: Request) -> Reply:
        with self.lock:
            n = self.calls
            self.calls += 1
        fx = {f.number: f for f in fixtures(self.name)}.get(n)
        key = key_of(req.body)
        if self.mode == "order":
            return self._by_position(n, key, fx, req)
        if fx is None:
            if self.mode == "record" and self.unanswered is None:  # the first one only: later ones follow from it
                prompt = TRANSCRIPTS / self.name / f"{n:03d}-{key[:16]}.prompt.md"
                prompt.write_text(prompt_text(req.body))
                self.unanswered = prompt
            elif self.mode != "record":
                self.problems.append(f"call {n}: no fixture {n:03d}-*.json in tests/llm/transcripts/{self.name}")
            return Reply(status=400, body={"error": {"message": "no recorded answer", "type": "invalid_request"}})
        if self.mode == "refresh" and fx.key != key:
            data = json.loads(fx.path.read_text())
            data.update(key=key, prompt=prompt_text(req.body))
            fx.path.unlink()
            (fx.path.parent / f"{n:03d}-{key[:16]}.json").write_text(json.dumps(data, indent=1) + "\n")
        elif self.mode in ("replay", "record") and fx.key != key:
            self.problems.append(
                f"call {n}: its prompt changed: refresh {fx.path.relative_to(ROOT)} "
                f"(python tests/llm/transcripts.py refresh {self.name})"
            )
            if self.mode == "record" and self.unanswered is None:
                self.unanswered = TRANSCRIPTS / self.name / f"{n:03d}-{key[:16]}.changed.md"
                (TRANSCRIPTS / self.name / f"{n:03d}-{key[:16]}.changed.md").write_text(prompt_text(req.body))
            return Reply(status=400, body={"error": {"message": "prompt changed", "type": "invalid_request"}})
        return Reply(fx.answer, input_tokens=len(masked(prompt_text(req.body))) // 4, output_tokens=len(fx.answer) // 4)

    def _by_position(self, n: int, key: str, fx: Fixture | None, req: Request) -> Reply:
        """Serve mode: fixture N answers call N whatever its key (the run's measurements are another machine's);
        a SEARCH/REPLACE answer to a prompt that asks for whole blocks is given as the blocks it makes."""
        if self.prompts is not None:
            (self.prompts / f"{n:03d}-{key[:16]}.md").write_text(prompt_text(req.body))
        if fx is None:
            self.problems.append(f"call {n}: no fixture {n:03d}-*.json")
            return Reply(status=400, body={"error": {"message": "no recorded answer", "type": "invalid_request"}})
        answer = fx.answer
        text = prompt_text(req.body)
        if "<<<<<<< SEARCH" in answer and "Answer with the new text of every EVOLVE-BLOCK" in text:
            answer = as_blocks(answer, text)
        return Reply(answer, input_tokens=len(text) // 4, output_tokens=len(answer) // 4)


def as_blocks(diff_answer: str, prompt: str) -> str:
    """A SEARCH/REPLACE answer as the whole-blocks answer a full-rewrite prompt asks for."""
    parent = prompt.split("# Parent program", 1)[1].split("```\n", 1)[1].split("\n```", 1)[0] + "\n"
    child = apply_diff(parent, parse_diff(diff_answer))
    lines = child.splitlines(keepends=True)
    blocks = "".join("".join(lines[b.start : b.end + 1]) for b in parse_blocks(child))
    note = diff_answer.split("<<<<<<<", 1)[0].strip()
    return f"{note}\n\n```\n{blocks}```\n"


def save_answer(prompt_file: Path, answer: str) -> Path:
    """Store an answer beside its prompt (record mode's second half)."""
    number, key16 = prompt_file.name[:3], prompt_file.name[4:20]
    body_text = prompt_file.read_text()
    full = hashlib.sha256(masked(body_text).encode()).hexdigest()
    assert full.startswith(key16), "the prompt file was edited"
    out = prompt_file.parent / f"{number}-{key16}.json"
    out.write_text(json.dumps({"key": full, "answer": answer, "prompt": body_text}, indent=1) + "\n")
    prompt_file.unlink()
    return out


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["PYTHONPATH"] = str(ROOT)
    return env


DEMO_CONFIG = {
    "islands": 1,
    "concurrency": 1,
    "max_evals": 9,  # the seed and 8 children
    "meta_every": 0,
    "top_inspirations": 0,
    "archive_inspirations": 0,
    "reverify_best": False,
    "repair_rate": 1.0,
    "seed": 3,
}


@dataclass
class Outcome:
    ok: bool
    log: str
    missing_benchmarks: list[str] = field(default_factory=list)


def run_demo(url: str, home: Path, record: bool = False) -> Outcome:
    """The demo searched for 9 evaluations with the recorded model: real builds and verifications, the
    benchmark numbers recorded with the transcript (transcript_executor.py)."""

    async def search() -> Outcome:
        local = LocalExecutor(work_dir=home / "jobs", extra_env={"CUCO_PYTHON": sys.executable})
        executor = RecordedBenchmarks(local, TRANSCRIPTS / "demo" / "bench.json", record)
        config = RunConfig(llm=[f"openai-compat:{MODEL}@{url}/v1"], mutator="llm", **DEMO_CONFIG)
        await executor.start()
        try:
            engine = await Engine.create(home, load_workload("demo"), config, run_id="transcript", executor=executor)
            try:
                state = await asyncio.wait_for(engine.run(), 900)
            finally:
                await engine.close()
        finally:
            await executor.close()
        return Outcome(state == "finished", f"state {state}: {engine.stop_reason}", executor.missing)

    return asyncio.run(search())


def run_gemm_transform(url: str, home: Path, record: bool = False) -> Outcome:
    """`cuco transform gemm_allgather --build-only` with the recorded model (nvcc and the NCCL wheel needed)."""
    proc = subprocess.run(
        [sys.executable, "-m", "cuco_tui.cli", "transform", "gemm_allgather", "--build-only"]
        + ["--llm", f"openai-compat:{MODEL}@{url}/v1", "-o", str(home / "gemm_device.cu"), "--home", str(home)],
        cwd=ROOT,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    return Outcome(proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:])


SCENARIOS = {"demo": run_demo, "gemm_transform": run_gemm_transform}


def play(name: str, mode: str, home: Path | None = None) -> tuple[Replay, Outcome, Path]:
    """Run the scenario against the transcript; returns the responder (its problems), the outcome and the home."""
    (TRANSCRIPTS / name).mkdir(parents=True, exist_ok=True)
    replay = Replay(name, mode)
    home = home or Path(tempfile.mkdtemp(prefix=f"cuco-transcript-{name}-"))
    with FakeLLMServer(responder=replay) as srv:
        outcome = SCENARIOS[name](srv.url, home, mode in ("record", "refresh"))
    return replay, outcome, home


def main() -> int:
    mode, name = sys.argv[1], sys.argv[2]
    if mode == "answer":  # answer PROMPT_FILE ANSWER_FILE
        print(save_answer(Path(sys.argv[2]), Path(sys.argv[3]).read_text()))
        return 0
    if mode == "serve":  # serve NAME OUT_DIR: prints the URL, answers by position until killed
        out = Path(sys.argv[3])
        out.mkdir(parents=True, exist_ok=True)
        served = Replay(name, "order", prompts=out)
        with FakeLLMServer(responder=served) as srv:
            (out / "url").write_text(srv.url)
            print(srv.url, flush=True)
            threading.Event().wait()
        return 0
    replay, outcome, home = play(name, mode)
    print(outcome.log)
    print(f"home: {home}; calls: {replay.calls}")
    for p in replay.problems:
        print("problem:", p)
    if replay.unanswered is not None:
        print(f"answer this prompt: {replay.unanswered}")
    return 1 if replay.problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
