"""The box every job runs in, on every executor (local, SSH, Slurm): the same POSIX sh launcher.

A job runs code an LLM wrote. The launcher starts it

- with an environment built from an allow-list (names below, plus the ones the job itself sets and the
  ones a node's `setup:` lines export), so no key, token or password of the engine's or the node's user
  reaches it, whatever its name (nor one a setup line exports under a name that says so);
- under bubblewrap (`bwrap`), with a file system of its own that shows only what a job needs: the toolchain
  read-only (`/usr` and its links, `/etc` without its secrets, `/sys`, and the directories the job's
  PATH, LD_LIBRARY_PATH, PYTHONPATH, CUDA_HOME, CUDA_PATH, NCCL_HOME, VIRTUAL_ENV and CUCO_PYTHON name, and
  the prefix of the job's own command when it is an absolute path),
  its own directory writable, a private `/tmp` (and `/dev/shm`), the GPUs (`gpu` mode): never the node
  user's home or the rest of `/`; its own pid namespace and a fresh `/proc` (no other process's environ,
  memory or fds) with `/proc/sys` read-only, its own network namespace (loopback only), IPC and UTS
  namespaces, every capability dropped (run by root, a `cpu` job keeps three for its harness: CAP_SETUID and
  CAP_SETGID to run the candidate's ranks under a uid of their own, CAP_KILL to stop and resume them), killed
  when its launcher dies; the command is its namespace's pid 1 (bwrap's own reaper there kept a Slurm job
  in the queue ~3 s after it ended), so everything it leaves dies with it;
- without a working bwrap, no candidate runs, unless the node's user names a weaker sandbox
  (`export CUCO_SANDBOX=unshare` or `CUCO_SANDBOX=none` in the node's `setup:` lines, or in the engine's
  environment for local jobs): util-linux `unshare` (pid and mount namespaces, a fresh `/proc`, a private
  `/tmp`, network and IPC namespaces; the rest of the file system visible and writable) or a plain process
  with the allow-listed environment only. The job's log then says which (WEAKER_NOTICES), and every result
  built from it says so (evaluation.py). Else the job exits NO_SANDBOX_EXIT, which faults.py takes for the
  node's fault.

`sh -c LAUNCHER cuco-sandbox MODE CMD...` runs CMD in the current directory (the job's): MODE is `gpu`
(the host's /dev, for the GPUs) or `cpu` (a minimal /dev). A node that gives its jobs a shared scratch
directory names it in a setup line, `export CUCO_SANDBOX_WRITABLE=/scratch/me` (colon-separated, no spaces;
bwrap only: under unshare the file system is writable anyway).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Mapping

# Exact names a job may inherit from the engine's (or the node's) environment.
ENV_ALLOW = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "NCCL_HOME",
    "CUCO_PYTHON",
    "CUDA_VISIBLE_DEVICES",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "CUCO_SANDBOX",
    "CUCO_SANDBOX_WRITABLE",
)  # where the NCCL wheel may be installed (the build finds NCCL_HOME through it)
# Families of names a job may inherit (locale, NCCL's and CUDA's knobs, Slurm's job description).
ENV_ALLOW_PREFIXES = ("LC_", "NCCL_", "CUDA_", "SLURM_")
# Never, even inside an allowed family (NCCL_..._TOKEN would be someone's secret).
SECRET_MARKERS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL")
NO_SANDBOX_EXIT = 95  # no working bwrap, and the node's user named no weaker sandbox: nothing ran
NO_SANDBOX_NOTICE = "cuco: no sandbox on this node (CUCO_SANDBOX=none): the job ran unconfined"
PARTIAL_NOTICE = "cuco: bwrap missing or unusable on this node; sandboxed with unshare (CUCO_SANDBOX=unshare: file system visible and writable)"
WEAKER_NOTICES = {"unshare": PARTIAL_NOTICE, "none": NO_SANDBOX_NOTICE}
REFUSED_NOTICE = (
    "cuco: bwrap is missing or does not work on this node, so no job runs there: install bubblewrap "
    "(apt-get install bubblewrap, dnf install bubblewrap), or name a weaker sandbox in the node's setup lines "
    "(export CUCO_SANDBOX=unshare, or CUCO_SANDBOX=none), and every result from it will say so"
)
# Files and directories of /etc a job never sees (passwords, host keys, TLS keys, sudo rules).
ETC_SECRETS = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers", "/etc/security/opasswd")
ETC_SECRET_DIRS = ("/etc/ssh", "/etc/ssl/private", "/etc/sudoers.d", "/etc/cuco")


def env_name_allowed(name: str, keep: Iterable[str] = ()) -> bool:
    upper = name.upper()
    if any(m in upper for m in SECRET_MARKERS):
        return False
    return name in ENV_ALLOW or name in set(keep) or name.startswith(ENV_ALLOW_PREFIXES)


def allowed_environment(env: Mapping[str, str], keep: Iterable[str] = ()) -> dict[str, str]:
    """The part of `env` a job may see."""
    keep = set(keep)
    return {k: v for k, v in env.items() if env_name_allowed(k, keep)}


def job_environment(
    extra: Mapping[str, str], spec_env: Mapping[str, str], base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A local job's environment: the allow-listed part of this process's, then the executor's extras and the
    job's own variables (those are the workload's and the engine's, never secrets: filtered all the same)."""
    env = allowed_environment(os.environ if base is None else base)
    env.update(allowed_environment(extra, extra))
    env.update(allowed_environment(spec_env, spec_env))
    return env


def _case_pattern(keep: Iterable[str]) -> str:
    names = sorted(set(ENV_ALLOW) | {k for k in keep if env_name_allowed(k, keep)})
    return "|".join(names + [p + "*" for p in ENV_ALLOW_PREFIXES])


def launcher(keep: Iterable[str] = ()) -> str:
    """The launcher's sh text. `keep`: variable names the job sets itself (they survive the allow-list)."""
    # case-insensitive without a fork per variable: *[Kk][Ee][Yy]*
    markers = "|".join("*" + "".join(f"[{c.upper()}{c.lower()}]" for c in m) + "*" for m in SECRET_MARKERS)
    return f"""mode=$1; shift
keep=" ${{CUCO_KEEP_ENV:-}} "   # what a node's setup lines exported (remote_job.job_wrapper)
writable=${{CUCO_SANDBOX_WRITABLE:-}}   # more directories a job may write (a node's shared scratch)
for v in $(env | sed -n 's/^\\([A-Za-z_][A-Za-z0-9_]*\\)=.*/\\1/p'); do
  case $v in {markers}) unset "$v" 2>/dev/null; continue;; esac
  case $keep in *" $v "*) continue;; esac
  case $v in {_case_pattern(keep)}) ;; *) unset "$v" 2>/dev/null;; esac
done
d=$(pwd -P)
binds=
oldifs=$IFS; IFS=:
for w in $writable; do [ -d "$w" ] && binds="$binds --bind $w $w"; done
IFS=$oldifs
if [ "$mode" = gpu ]; then
  dev="--dev-bind /dev /dev --tmpfs /dev/shm"
  export NCCL_SOCKET_IFNAME=lo   # its network namespace has loopback only: NCCL's bootstrap rides on it
else dev="--dev /dev"; fi
# The job's command is not its pid namespace's init: init ignores every signal it has no handler for (a
# crash it raises itself, a TERM at the timeout). A plain sh is pid 1 and ends with the command's status.
as_child='"$@"; exit $?'
# Run by root, bwrap keeps root's capabilities unless told (a job could then open any process's memory);
# run by another user, the sandbox has none already
caps=
[ "$(id -u)" = 0 ] && caps="--cap-drop ALL"
weaker=${{CUCO_SANDBOX:-}}
if command -v bwrap >/dev/null 2>&1 && bwrap --ro-bind / / --unshare-pid --as-pid-1 --proc /proc $caps true >/dev/null 2>&1; then
  # Run by root, a cpu job's harness keeps what it needs to run the candidate's ranks as another user
  [ -n "$caps" ] && [ "$mode" = cpu ] && caps="$caps --cap-add CAP_SETUID --cap-add CAP_SETGID --cap-add CAP_KILL"
  # The view: the toolchain read-only, the job's directory, nothing else of the node's
  view=
  for p in /usr /bin /sbin /lib /lib32 /lib64 /libx32 /etc /sys; do
    if [ -L "$p" ]; then view="$view --symlink $(readlink "$p") $p"
    elif [ -d "$p" ]; then view="$view --ro-bind $p $p"; fi
  done
  for f in {" ".join(ETC_SECRETS)}; do [ -e "$f" ] && view="$view --ro-bind /dev/null $f"; done
  for f in {" ".join(ETC_SECRET_DIRS)}; do [ -d "$f" ] && view="$view --tmpfs $f"; done
  # an interpreter's prefix, and where a venv's python links to (the job's own command, if absolute, too)
  prefixes=
  for x in "${{CUCO_PYTHON:-}}" "${{VIRTUAL_ENV:-/nonexistent}}/bin/python" "$1"; do
    case $x in /*/bin/*) ;; *) continue;; esac
    t=$(readlink -f "$x" 2>/dev/null) && [ -x "$t" ] || continue
    prefixes="$prefixes:${{x%/bin/*}}"
    case $t in /*/bin/*) prefixes="$prefixes:${{t%/bin/*}}";; esac
  done
  home=$(cd -P "${{HOME:-/nonexistent}}" 2>/dev/null && pwd) || home=/nonexistent
  # one variable first: sh splits only what an expansion produced, so the ':' written between expansions
  # would glue their ends into one path
  dirs="$PATH:${{LD_LIBRARY_PATH:-}}:${{PYTHONPATH:-}}:${{CUDA_HOME:-}}:${{CUDA_PATH:-}}:${{NCCL_HOME:-}}:${{VIRTUAL_ENV:-}}$prefixes"
  IFS=:
  for p in $dirs; do
    case $p in /*) ;; *) continue;; esac
    r=$(cd -P "$p" 2>/dev/null && pwd) || continue
    # never a directory the node user's home lies in (nor the home itself), nor what the view has already
    case "$home/" in "$r"/*) continue;; esac
    case $r in /|/usr|/usr/*|/etc|/etc/*|/sys|/sys/*|/proc|/proc/*|/dev|/dev/*) continue;; esac
    view="$view --ro-bind $r $r"
    [ "$r" = "$p" ] || view="$view --ro-bind $r $p"
  done
  IFS=$oldifs
  # /tmp first: a toolchain named under the host's /tmp is bound on top of the private one
  exec bwrap --tmpfs /tmp $view $dev --proc /proc --ro-bind /proc/sys /proc/sys --setenv HOME /tmp \\
    $binds --bind "$d" "$d" --chdir "$d" \\
    --unshare-pid --as-pid-1 --unshare-ipc --unshare-uts --unshare-net --unshare-cgroup-try --die-with-parent \\
    $caps \\
    -- /bin/sh -c "$as_child" cuco-job "$@"
fi
case $weaker in
  unshare|none) ;;
  *) echo "{REFUSED_NOTICE}" >&2; exit {NO_SANDBOX_EXIT};;
esac
userns=
[ "$(id -u)" = 0 ] || userns="--user --map-root-user"
# cwd still names the job directory once /tmp is covered: bind it back from there
private_tmp='d=$1; shift; cd "$d" && mount -t tmpfs tmpfs /tmp && mkdir -p "$d" && mount -c --bind . "$d" && cd "$d" || exit 96
{{ ip link set lo up || ifconfig lo up; }} >/dev/null 2>&1; exec "$@"'
# A new network namespace's loopback is down (bwrap raises it; unshare does not): GPU jobs need it for NCCL's
# bootstrap, so they keep the host's network where no tool here can raise it
net=--net
if [ "$mode" = gpu ] && ! command -v ip >/dev/null 2>&1 && ! command -v ifconfig >/dev/null 2>&1; then
  net=; unset NCCL_SOCKET_IFNAME
fi
if [ "$weaker" = unshare ] && command -v unshare >/dev/null 2>&1 && unshare $userns --pid --fork --mount --mount-proc true >/dev/null 2>&1; then
  echo "{PARTIAL_NOTICE}" >&2
  exec unshare $userns --pid --fork --kill-child --mount --mount-proc --ipc $net --propagation private \\
    sh -c "$private_tmp" cuco-sandbox "$d" "$@"
fi
if [ "$weaker" = unshare ]; then echo "{REFUSED_NOTICE} (CUCO_SANDBOX=unshare, but unshare does not work here either)" >&2; exit {NO_SANDBOX_EXIT}; fi
echo "{NO_SANDBOX_NOTICE}" >&2
exec "$@"
"""


def wrap(argv: Iterable[str], *, gpus: bool, keep: Iterable[str] = ()) -> list[str]:
    """`argv` run in the sandbox, from the job directory (its working directory)."""
    return ["sh", "-c", launcher(keep), "cuco-sandbox", "gpu" if gpus else "cpu", *argv]


def wrap_shell(argv: Iterable[str], *, gpus: bool, keep: Iterable[str] = ()) -> str:
    """The same, as one shell command line (for the remote wrapper)."""
    return " ".join(shlex.quote(a) for a in wrap(argv, gpus=gpus, keep=keep))
