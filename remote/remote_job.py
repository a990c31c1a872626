"""The shell side of a remote job (POSIX sh, GNU coreutils, util-linux `setsid`).

Layout on the node, for job `ID` under work dir `W`:

    W/blobs/<sha256>      uploaded files, content-addressed, read-only
    W/jobs/ID/work/       the job's working directory (its files are hard links to blobs, or copies)
    W/jobs/ID/pgid        the job's process group id (it is a session leader: `setsid`)
    W/jobs/ID/log         stdout + stderr
    W/jobs/ID/rc          the exit code, written when the command ended (absent while running)
    W/jobs/ID/timedout    present when the remote `timeout` killed it
    W/jobs/ID/cancel      present when the engine cancelled it

The command runs under `timeout --foreground -k GRACE -s TERM T` (KILL as the backstop); when it ends,
the wrapper writes `rc`, and the script that started it kills what is left of the job's process group,
so grandchildren never outlive the job. `run_script` is idempotent by job id: a finished job is collected, a running one is
adopted (waited for), anything else is started fresh. Its stdout is a tar stream of the results.
"""

from __future__ import annotations

import io
import re
import shlex
import tarfile
from collections.abc import Iterable, Mapping, Sequence

from .sandbox import wrap_shell

JOB_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
EXIT_MISSING_BLOBS = 97
MISSING_MARK = "CUCO-MISSING-BLOBS:"
PLAIN_MARK = "CUCO-RESULT"  # first line of the result when the job has no outputs (no tar)
LOG_TAIL_BYTES = 64 * 1024


def q(s: str) -> str:
    return shlex.quote(s)


def spec_problem(job_id: str, env_keys) -> str:
    """Why a job's id or environment cannot go into the remote scripts ('' when they can)."""
    if not JOB_ID_RE.match(job_id):
        return f"job id {job_id!r}: use letters, digits, '_', '.', '-' (at most 128)"
    for k in env_keys:
        if not ENV_KEY_RE.match(k):
            return f"job {job_id}: env name {k!r} is not a valid variable name"
    return ""


def workdir_expr(work_dir: str) -> str:
    """A shell word for the configured work dir (`~/x` is the remote user's home)."""
    if work_dir == "~":
        return '"$HOME"'
    if work_dir.startswith("~/"):
        return '"$HOME"/' + q(work_dir[2:])
    return q(work_dir)


def init_script(work_dir: str, probe_gpus: bool, probe_cpus: bool) -> str:
    """Create the work dir; print its absolute path, the CPU count, the GPUs, the blobs and jobs present."""
    lines = [
        f"W={workdir_expr(work_dir)}",
        'mkdir -p "$W/blobs" "$W/jobs" || exit 3',
        'cd "$W" || exit 3',
        'echo "WORKDIR $(pwd -P)"',
    ]
    if probe_cpus:
        lines.append('echo "CPUS $(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)"')
    if probe_gpus:
        lines.append(
            "command -v nvidia-smi >/dev/null 2>&1 && "
            "nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | sed 's/^/GPU /'"
        )
    lines += [
        'for f in blobs/*; do [ -f "$f" ] && echo "BLOB ${f#blobs/}"; done',
        'for d in jobs/*; do [ -d "$d" ] && echo "JOB ${d#jobs/}"; done',
        "exit 0",
    ]
    return "\n".join(lines) + "\n"


def upload_script(work_dir: str, sha: str) -> str:
    """Write stdin to W/blobs/<sha> atomically (read-only), unless it is already there."""
    return (
        f'W={q(work_dir)}; B="$W/blobs/{sha}"; [ -f "$B" ] && {{ cat >/dev/null; exit 0; }}; '
        f'T="$B.tmp.$$"; cat > "$T" && chmod 444 "$T" && mv -f "$T" "$B" || {{ rm -f "$T"; exit 1; }}'
    )


def job_wrapper(
    argv: Sequence[str],
    env: Mapping[str, str],
    setup: Iterable[str],
    timeout_s: float,
    kill_grace_s: float,
    signal_voids_rc: bool = False,
    gpus: bool = False,
) -> str:
    """The job's own shell (a session leader under setsid): few forks, since every fork costs ~2 ms.
    The command runs in the sandbox (remote/sandbox.py): the node's environment reaches it only through the
    allow-list, and `gpus` gives it the node's /dev.

    `signal_voids_rc`: a TERM/INT/HUP sent to the job from outside (a scheduler ending it) leaves no rc, so
    the exit code of a command killed under it is never taken for the command's own."""
    exports = "".join(f"export {k}={q(v)}\n" for k, v in env.items())
    names = "env | sed -n 's/^\\([A-Za-z_][A-Za-z0-9_]*\\)=.*/\\1/p'"
    # What the setup lines export is the node's configuration for its jobs: it passes the sandbox's allow-list.
    before_setup = f"cuco_env0=\" $({names} | tr '\\n' ' ') \"\n" if setup else ""
    after_setup = (
        (
            f'CUCO_KEEP_ENV=$(for n in $({names}); do case "$cuco_env0" in *" $n "*) ;; '
            f"*) printf '%s ' \"$n\";; esac; done); export CUCO_KEEP_ENV\n"
        )
        if setup
        else ""
    )
    setup_lines = "".join(
        f"if [ $ok = 1 ]; then {line}\n"
        f"[ $? = 0 ] || {{ echo {q('cuco: setup line failed on this node: ' + line)}; ok=0; }}; fi\n"
        for line in setup
    )
    t = f"{timeout_s:.3f}"
    grace = f"{max(kill_grace_s, 0.1):.3f}"
    floor = max(int(timeout_s) - 1, 0)
    cmd = wrap_shell(argv, gpus=gpus, keep=env)
    trap_line = "trap 'cuco_signaled=1' TERM INT HUP\n" if signal_voids_rc else ""
    write_rc = '[ -z "$cuco_signaled" ] && echo "$rc" > ../rc' if signal_voids_rc else 'echo "$rc" > ../rc'
    return f"""{trap_line}echo $$ > ../pgid
[ -f ../cancel ] && exit 0
ok=1; rc=125
{before_setup}{setup_lines}{after_setup}if [ $ok = 1 ]; then
{exports}timeout --foreground -k {grace} -s TERM {t} {cmd}
rc=$?
fi
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  [ $(( $(date +%s) - $(stat -c %Y ../pgid) )) -ge {floor} ] && : > ../timedout
fi
{write_rc}
"""


def run_script(
    work_dir: str,
    job_id: str,
    links: Sequence[tuple[str, str, bool]],
    argv: Sequence[str],
    env: Mapping[str, str],
    setup: Iterable[str],
    timeout_s: float,
    kill_grace_s: float,
    outputs: Sequence[str],
    gpus: bool = False,
) -> str:
    """Start (or adopt, or collect) job `job_id`; print a tar of rc, timedout, log tail and outputs
    (or, with no outputs, a `CUCO-RESULT rc=N timedout=0|1` line and the log tail).

    `links` is (sha256, relative path, executable) for each input file: executables are copied and
    made executable; the rest are hard-linked to the read-only blob (copied across file systems).
    Exits EXIT_MISSING_BLOBS and prints MISSING_MARK + the hashes on stderr when blobs are missing.
    """
    setup = list(setup)
    out: list[str] = [
        f'W={q(work_dir)}; J="$W/jobs/{job_id}"',
        # `read` and `kill` are builtins: the common path forks only mkdir, setsid+sh, timeout, tail, tar.
        'alive() { [ -f "$J/pgid" ] && read P < "$J/pgid" && kill -s 0 -- "-$P" 2>/dev/null; }',
        'if [ -f "$J/rc" ] && ! alive; then :',
        "elif alive; then",
        "  while alive; do sleep 0.2; done",
        "else",
        '  [ -e "$J" ] && rm -rf "$J"',
    ]
    out += ["  " + line for line in stage_lines(links)]
    wrapper = job_wrapper(argv, env, setup, timeout_s, kill_grace_s, gpus=gpus)
    out += [
        '  cd "$J/work" || exit 96',
        f'  setsid -w sh -c {q(wrapper)} </dev/null >"$J/log" 2>&1',
        '  read P < "$J/pgid" && kill -s KILL -- "-$P" 2>/dev/null  # stragglers die with the job',
        "fi",
    ]
    if not outputs:
        # No outputs: a header line from builtins, then the log tail (one fork instead of tail + tar).
        out += [
            'rc=; [ -f "$J/rc" ] && read rc < "$J/rc"; t=0; [ -f "$J/timedout" ] && t=1',
            f'echo "{PLAIN_MARK} rc=$rc timedout=$t"',
            f'tail -c {LOG_TAIL_BYTES} "$J/log" 2>/dev/null',
            "exit 0",
        ]
        return "\n".join(out) + "\n"
    out += result_lines(outputs) + ["exit 0"]
    return "\n".join(out) + "\n"


def stage_lines(links: Sequence[tuple[str, str, bool]]) -> list[str]:
    """Shell lines that fill "$J/work" from the blobs in "$W/blobs" (`links`: sha256, relative path,
    executable). Missing blobs: exit EXIT_MISSING_BLOBS with MISSING_MARK + their hashes on stderr."""
    out: list[str] = []
    if links:
        shas = " ".join(sorted({sha for sha, _, _ in links}))
        out += [
            "m=",
            f'for h in {shas}; do [ -f "$W/blobs/$h" ] || m="$m $h"; done',
            f'if [ -n "$m" ]; then echo "{MISSING_MARK}$m" >&2; exit {EXIT_MISSING_BLOBS}; fi',
        ]
    dirs = sorted({rel.rsplit("/", 1)[0] for _, rel, _ in links if "/" in rel})
    out.append('mkdir -p "$J/work" ' + " ".join(f'"$J/work/"{q(d)}' for d in dirs) + " || exit 96")
    for sha, rel, executable in links:
        dest = f'"$J/work/"{q(rel)}'
        src = f'"$W/blobs/{sha}"'
        if executable:
            out.append(f"cp {src} {dest} && chmod 755 {dest} || exit 96")
        else:
            out.append(f"ln -f {src} {dest} 2>/dev/null || cp {src} {dest} || exit 96")
    return out


def result_lines(outputs: Sequence[str]) -> list[str]:
    """Shell lines that print a tar of job "$J"'s log tail, rc, timedout and `outputs` (see read_result)."""
    return (
        [
            f'tail -c {LOG_TAIL_BYTES} "$J/log" > "$J/logtail" 2>/dev/null',
            'cd "$J" || exit 96',
            'set -- logtail; [ -f rc ] && set -- "$@" rc; [ -f timedout ] && set -- "$@" timedout',
        ]
        + [f'[ -e work/{q(o)} ] && set -- "$@" work/{q(o)}' for o in outputs]
        + [
            'tar -cf - "$@" 2>/dev/null',
        ]
    )


def read_result(raw: bytes) -> dict[str, bytes]:
    """The files of a job's result stream: a tar (result_lines), or the CUCO-RESULT header line and the log
    tail of a job without outputs. Keys: logtail, rc, timedout, work/<output>. Raises tarfile.TarError."""
    members: dict[str, bytes] = {}
    if raw.startswith(PLAIN_MARK.encode()):
        header, _, log_bytes = raw.partition(b"\n")
        fields = dict(f.split("=", 1) for f in header.decode().split()[1:] if "=" in f)
        members["logtail"] = log_bytes
        if fields.get("rc"):
            members["rc"] = fields["rc"].encode()
        if fields.get("timedout") == "1":
            members["timedout"] = b""
        return members
    if raw:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
            for m in tar.getmembers():
                if m.isfile():
                    f = tar.extractfile(m)
                    if f is not None:
                        members[m.name] = f.read()
    return members


def kill_script(work_dir: str, job_id: str, kill_grace_s: float, remove: bool = True) -> str:
    """Cancel job `job_id`: mark it, TERM its process group, then KILL; print KILLED if it was running."""
    n = max(int(kill_grace_s * 10), 1)
    lines = [
        f'W={q(work_dir)}; J="$W/jobs/{job_id}"',
        '[ -d "$J" ] || exit 0',
        ': > "$J/cancel" 2>/dev/null',
        'i=0; while [ ! -s "$J/pgid" ] && [ ! -f "$J/rc" ] && [ $i -lt 10 ]; do sleep 0.05; i=$((i+1)); done',
        'if [ -f "$J/pgid" ] && read P < "$J/pgid"; then',
        '  if kill -s 0 -- "-$P" 2>/dev/null; then echo KILLED; kill -s TERM -- "-$P" 2>/dev/null',
        f'    i=0; while kill -s 0 -- "-$P" 2>/dev/null && [ $i -lt {n} ]; do sleep 0.1; i=$((i+1)); done',
        '    kill -s KILL -- "-$P" 2>/dev/null; fi',
        "fi",
    ]
    if remove:
        lines.append('rm -rf "$J"')
    return "\n".join(lines) + "\n"


def reconcile_script(work_dir: str, kill_grace_s: float, mine: str) -> str:
    """Kill and remove every job whose id matches `mine` (a whole-id ERE: one run's jobs) and is not on
    stdin (one per line); print `KILLED <id>` for each that was still running and `REMOVED <id>` for each
    finished one removed. Other runs' jobs in the same work directory are left alone."""
    n = max(int(kill_grace_s * 10), 1)
    return (
        "\n".join(
            [
                f"W={q(work_dir)}; M={q(mine)}",
                'K=$(mktemp) || exit 3; cat > "$K"',
                'cd "$W/jobs" 2>/dev/null || { rm -f "$K"; exit 0; }',
                "for d in *; do",
                '  [ -d "$d" ] || continue',
                '  printf "%s\\n" "$d" | grep -qxE -- "$M" || continue',
                '  grep -qxF -- "$d" "$K" && continue',
                '  if [ -f "$d/pgid" ] && read P < "$d/pgid" && kill -s 0 -- "-$P" 2>/dev/null; then',
                '    : > "$d/cancel"; kill -s TERM -- "-$P" 2>/dev/null',
                f'    i=0; while kill -s 0 -- "-$P" 2>/dev/null && [ $i -lt {n} ]; do sleep 0.1; i=$((i+1)); done',
                '    kill -s KILL -- "-$P" 2>/dev/null; echo "KILLED $d"',
                '  else echo "REMOVED $d"; fi',
                '  rm -rf "$d"',
                "done",
                'rm -f "$K"',
            ]
        )
        + "\n"
    )


def remove_script(work_dir: str, job_ids: Iterable[str]) -> str:
    ids = " ".join(q(j) for j in job_ids)
    return f'W={q(work_dir)}; cd "$W/jobs" && rm -rf -- {ids}\n'
