#!/usr/bin/env bash
# Fills .whl/ (git-ignored) with the wheels tests/gpu/run_gpu_search.sh installs on the GPU machine, which
# reaches no package registry: the project's dependencies its image lacks, for its Python (3.12, x86_64).
# Run it here, then pass `carry: [".whl"]` to the device `run` call.
#   bash tests/gpu/fetch_wheels.sh            # PY=3.13 to target another interpreter
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-3.12}
mkdir -p .whl
# --no-deps: exactly these (the image has the rest; extra copies of its packages would shadow them)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl aiosqlite==0.22.1 asyncssh==2.24.1 cryptography cffi pycparser pytest-asyncio pytest pyelftools==0.33
ls .whl
