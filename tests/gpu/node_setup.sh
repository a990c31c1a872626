# Sourced by the GPU scripts, from the repository root: what a GPU node of the device machine lacks.
# - bubblewrap, from .whl/bwrap (carried; see tests/gpu/sandbox_checks.sh for how it is made), where no
#   `bwrap` is on PATH: the jobs' sandbox then is the one users get (bwrap), not the unshare fallback;
# - the Python wheels of .whl/ installed into $PWD/.site, not under /tmp: a sandboxed job's /tmp is its own,
#   so a job would not see packages (nor NCCL's wheel) installed there.
if ! command -v bwrap >/dev/null 2>&1 && [ -x .whl/bwrap/bwrap.bin ]; then
    mkdir -p .site-bin
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} exec %s/bwrap.bin "$@"\n' \
        "$PWD/.whl/bwrap" "$PWD/.whl/bwrap" > .site-bin/bwrap
    chmod +x .site-bin/bwrap
    export PATH=$PWD/.site-bin:$PATH
fi
# without a working bwrap no job runs unless a weaker sandbox is named (remote/sandbox.py): named here
if bwrap --ro-bind / / --unshare-pid --proc /proc --cap-drop ALL true 2>/dev/null; then echo "bwrap works here"
else echo "bwrap unusable here: jobs run under unshare (CUCO_SANDBOX=unshare)"; export CUCO_SANDBOX=unshare; fi
SITE=$PWD/.site
if [ ! -d "$SITE/aiosqlite" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        $(ls .whl/*.whl | grep -v '/pytest-[0-9]') $(ls .whl/onboard/*.whl 2>/dev/null) 2>&1 | grep -v '^WARNING' | tail -3
    if ! python3 -c 'import pytest, sys; sys.exit(tuple(map(int, pytest.__version__.split(".")[:2])) < (8, 4))' 2>/dev/null; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
            .whl/pytest-[0-9]*.whl 2>&1 | grep -v '^WARNING' | tail -3
    fi
fi
export PYTHONPATH=$SITE:$PWD
