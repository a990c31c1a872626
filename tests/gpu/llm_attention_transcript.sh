#!/usr/bin/env bash
# A recorded LLM transcript on one GPU (kind nvidia-h200), from the repository root, carrying .whl/ (the
# wheels of tests/gpu/fetch_wheels.sh): `cuco run attention_allgather --ranks 1 --headless` with the LLM
# mutator against the project's OpenAI-compatible test server on 127.0.0.1, which serves the answers of
# tests/llm/transcripts/attention_gpu by position (tests/llm/transcripts.py serve):
#   1. the first mutation reads this rank's own K/V block from its inputs instead of the gathered copy
#      (and skips the collective at one rank), but writes `st->s.S_loc` for the member function `S_loc()`:
#      nvcc rejects it ("a pointer to a bound function may only be used to call the function");
#   2. the repair prompt carries that error and the line it points at; the answer adds the `()`; the child
#      builds, is verified on every config of one rank and benchmarked: a verified candidate made by
#      `llm-repair` whose parent is the failed child.
# The official OpenAI SDK must import on the node: where the image lacks it, fetch it here first, with its
# dependencies, into .whl/llm (carried with .whl/):
#   python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl/llm openai==1.57.0
# Ends within 4 minutes. Output under $OUT: prompts/NNN-*.md (what the model was told), engine.log,
# report.json, candidates.txt (id, parent, operator, status, speedup, reason), and a last line
#   TRANSCRIPT OK: candidate C (llm-repair, parent F failed to build) verified, speedup S
# or TRANSCRIPT FAILED with the reason.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/cuco-gpu-out}
mkdir -p "$OUT/prompts"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export CUDA_DEVICE_ORDER=PCI_BUS_ID
nvidia-smi -L
. tests/gpu/node_setup.sh
if ! python3 -c "import openai" 2>/dev/null; then
    [ -d .whl/llm ] || { echo "TRANSCRIPT FAILED: the openai SDK is missing here and .whl/llm was not carried"; exit 2; }
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .whl/llm/*.whl 2>&1 | tail -3
fi
HOME_DIR=$PWD/.gpu-homes/llm-attention
rm -rf "$HOME_DIR"
mkdir -p "$HOME_DIR"
cat > "$HOME_DIR/search.yaml" <<'EOF'
islands: 1
concurrency: 1
max_evals: 3
meta_every: 0
top_inspirations: 0
archive_inspirations: 0
reverify_best: false
repair_rate: 1000.0
llm_max_attempts: 1
EOF
python3 tests/llm/transcripts.py serve attention_gpu "$OUT/prompts" > "$OUT/server.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
for _ in $(seq 50); do [ -s "$OUT/prompts/url" ] && break; sleep 0.2; done
url=$(cat "$OUT/prompts/url")
echo "replay server at $url"
timeout -k 20 200 python3 -m cuco_tui.cli run attention_allgather --headless --ranks 1 \
    --llm "openai-compat:recorded@$url/v1" --config "$HOME_DIR/search.yaml" \
    --name llm-attention --home "$HOME_DIR" > "$OUT/engine.log" 2>&1
echo "cuco run: exit $?"
tail -n 15 "$OUT/engine.log"
python3 -m cuco_tui.cli report llm-attention --json --home "$HOME_DIR" > "$OUT/report.json"
python3 - "$HOME_DIR/cuco.db" "$OUT" <<'EOF'
import json, sqlite3, sys
from pathlib import Path

db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
rows = db.execute("SELECT id, parent_id, operator, status, speedup, reason FROM candidates ORDER BY id").fetchall()
calls = db.execute("SELECT id, purpose, status, candidate_id FROM llm_calls ORDER BY id").fetchall()
out = Path(sys.argv[2])
(out / "candidates.txt").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
print("candidates:", *rows, sep="\n  ")
print("llm calls:", *calls, sep="\n  ")
failed = [r for r in rows if r[3] == "failed"]
repaired = [r for r in rows if r[2] == "llm-repair" and r[3] == "done"]
if failed and repaired and repaired[0][1] == failed[0][0]:
    c = repaired[0]
    print(f"TRANSCRIPT OK: candidate {c[0]} (llm-repair, parent {c[1]} failed to build) verified, speedup {c[4]:.3f}")
else:
    print("TRANSCRIPT FAILED: no verified repair of a failed child (see engine.log and prompts/)")
EOF
