"""The shell side of Slurm jobs (sbatch, squeue, sacct, scancel on the login node) and their parsing.

Layout in the shared work dir `W`, for job `ID` (the same as the SSH executor's, plus two files):

    W/blobs/<sha256>       uploaded files, content-addressed
    W/jobs/ID/job.sh       the batch script given to sbatch (#SBATCH lines + the job wrapper)
    W/jobs/ID/slurm_id     the Slurm job id, written by the submitting shell right after sbatch
    W/jobs/ID/work/        the job's working directory;  log, rc, timedout, cancel as for SSH jobs

The job's Slurm name is `cuco.ID`, so a job whose id file was never written is still found by name.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .jobs import JobSpec
from .remote_job import job_wrapper, q, result_lines, stage_lines, workdir_expr
from .slurm_config import StagePlacement

NAME_PREFIX = "cuco."
ACTIVE_STATES = {
    "PENDING",
    "RUNNING",
    "SUSPENDED",
    "COMPLETING",
    "CONFIGURING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "SIGNALING",
    "STAGE_OUT",
    "STOPPED",
    "RESV_DEL_HOLD",
    "SPECIAL_EXIT",
}
# Ended by the cluster, not by the job: the job is submitted again (JobStatus.LOST).
LOST_STATES = {"NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED"}
SQUEUE_FORMAT = "%i|%T|%r|%j"
# What Slurm's commonest pending reasons mean for a cuco user (the TUI's nodes screen and docs/cluster.md).
PENDING_REASONS = {
    "None": "just submitted: the scheduler has not looked at it yet",
    "Priority": "jobs of higher priority are ahead in the queue; it starts when their turn is over",
    "Resources": "waiting for the GPUs/CPUs/memory it asks for to free up",
    "QOSMaxJobsPerUserLimit": "your QoS allows no more running jobs: lower max_jobs, or wait",
    "AssocMaxJobsLimit": "your account allows no more running jobs: lower max_jobs, or wait",
    "QOSMaxGRESPerUser": "your QoS allows no more GPUs at once: fewer jobs run together",
    "AssocGrpGRES": "your account's group has used its GPUs: wait, or use another account",
    "ReqNodeNotAvail": "the nodes it may use are down, drained or reserved",
    "PartitionTimeLimit": "its --time exceeds the partition's limit: lower the stage's time_limit or timeout",
    "QOSMaxWallDurationPerJobLimit": "its --time exceeds the QoS's limit: lower the stage's time_limit",
    "BeginTime": "it may not start before its begin time",
    "Dependency": "it waits for another job",
    "JobHeldUser": "held by you (scontrol release ID)",
    "JobHeldAdmin": "held by an administrator",
    "BadConstraints": "no node has the constraint (features) it asks for: check constraint",
}


def explain_reason(reason: str) -> str:
    return PENDING_REASONS.get(reason, "see `man squeue`, JOB REASON CODES")


# sbatch's refusals of a configured value -> the cluster file's field that holds it.
REFUSED_FIELDS = (
    (re.compile(r"invalid partition", re.I), "partition"),
    (re.compile(r"invalid account|account.*(not|no) (known|valid|permitted)", re.I), "account"),
    (re.compile(r"invalid qos|qos.*not (known|valid|permitted)", re.I), "qos"),
    (re.compile(r"invalid feature|constraint", re.I), "constraint"),
    (re.compile(r"invalid generic resource|gres", re.I), "gpus_per_node"),
    (re.compile(r"Requested time limit|WallDuration", re.I), "time_limit"),
)
# A submission refused for the number of jobs the user (or account) has queued: it clears as jobs end, so
# the submission waits and is tried again (QOSMaxSubmitJobPerUserLimit, AssocMaxSubmitJobLimit,
# AssocGrpSubmitJobsLimit, ...; slurmctld's MaxJobCount: "temporarily unable to accept job").
SUBMIT_LIMIT_RE = re.compile(
    r"MaxSubmitJob|SubmitJobs?Limit|temporarily unable to accept|"
    r"Resource temporarily unavailable",
    re.I,
)
# Slurm's generic words for any limit: alone, a limit it did not name (waited for like the above); beside a
# reason it names that is not about the number of jobs (wall time, GPUs per job), waiting will not help.
POLICY_RE = re.compile(r"Job violates accounting/QOS policy", re.I)
REASON_CODE_RE = re.compile(r"\b(?:QOS|Assoc)\w*Limit\b|\bQOSMax\w+|\bAssoc(?:Max|Grp)\w+")


def refused_field(message: str) -> str | None:
    for rx, fld in REFUSED_FIELDS:
        if rx.search(message):
            return fld
    return None


def is_limit_refusal(message: str) -> bool:
    """sbatch refused a submission for a limit on the number of jobs (back-pressure: wait, try again)."""
    if SUBMIT_LIMIT_RE.search(message):
        return True
    return bool(POLICY_RE.search(message)) and not REASON_CODE_RE.search(message)


def limit_named(message: str) -> str:
    """The limit a refusal names (e.g. QOSMaxSubmitJobPerUserLimit), for the user's message."""
    m = REASON_CODE_RE.search(message) or SUBMIT_LIMIT_RE.search(message) or POLICY_RE.search(message)
    return m.group(0) if m else " ".join(message.split())[:120]


def time_limit_minutes(spec: JobSpec, placement: StagePlacement, kill_grace_s: float, slack_s: float) -> int:
    """Slurm's --time for a job: the stage's configured limit, else the job's timeout plus the kill
    grace and slack, rounded up to whole minutes, so nothing outlives its stage."""
    if placement.time_limit_min is not None:
        return placement.time_limit_min
    return max(1, math.ceil((spec.timeout_s + kill_grace_s + slack_s) / 60))


def sbatch_options(
    placement: StagePlacement, *, gpus: int, cpus: int, gpu_request: str, minutes: int | None = None
) -> list[str]:
    opts = ["--nodes=1", "--ntasks=1", f"--cpus-per-task={max(1, cpus)}"]
    if minutes is not None:
        opts.append(f"--time={minutes}")
    for flag, value in (
        ("partition", placement.partition),
        ("account", placement.account),
        ("qos", placement.qos),
        ("constraint", placement.constraint),
    ):
        if value:
            opts.append(f"--{flag}={value}")
    if gpus:
        opts.append(f"--gpus={gpus}" if gpu_request == "gpus" else f"--gres=gpu:{gpus}")
    return opts + list(placement.extra_sbatch)


def batch_script(
    job_dir: str,
    spec: JobSpec,
    placement: StagePlacement,
    *,
    gpu_request: str,
    setup: Iterable[str],
    kill_grace_s: float,
    slack_s: float,
) -> str:
    """job.sh: the #SBATCH header and the same wrapper SSH jobs run (pgid, rc, timedout files).

    Slurm sets CUDA_VISIBLE_DEVICES to the GPUs it allocated. `job_dir` is absolute."""
    minutes = time_limit_minutes(spec, placement, kill_grace_s, slack_s)
    opts = [
        f"--job-name={NAME_PREFIX}{spec.job_id}",
        f"--output={job_dir}/log",
        f"--chdir={job_dir}/work",
        "--open-mode=append",
        "--no-requeue",
    ]
    opts += sbatch_options(
        placement, gpus=spec.gpus, cpus=spec.cpus if not spec.gpus else 1, gpu_request=gpu_request, minutes=minutes
    )
    header = "".join(f"#SBATCH {o}\n" for o in opts)
    # Slurm ends a job (scancel, NODE_FAIL, --time) with TERM: then the Slurm state decides, not an rc.
    return (
        "#!/bin/sh\n"
        + header
        + job_wrapper(
            spec.argv, dict(spec.env), setup, spec.timeout_s, kill_grace_s, signal_voids_rc=True, gpus=spec.gpus > 0
        )
    )


def submit_script(work_dir: str, job_id: str, links: Sequence[tuple[str, str, bool]]) -> str:
    """Submit job `job_id` (its batch script on stdin) unless it was submitted before: prints
    `ADOPT <slurm id>` for a job already submitted, `SUBMITTED <slurm id>`, or `REFUSED <sbatch's error>`.
    Exits EXIT_MISSING_BLOBS (remote_job) when blobs are missing."""
    out = [
        f'W={q(work_dir)}; J="$W/jobs/{job_id}"',
        'if [ -s "$J/slurm_id" ]; then read S < "$J/slurm_id"; cat >/dev/null; echo "ADOPT $S"; exit 0; fi',
        'if [ -d "$J" ]; then',  # no id written (killed between sbatch and the write?): look it up by name
        # (only a job of this work dir: another project may have a run of the same name)
        f'  S=$(squeue -h -u "$(id -un)" -n {q(NAME_PREFIX + job_id)} -o "%i|%Z" 2>/dev/null | '
        'while IFS="|" read -r i z; do [ "$z" = "$J/work" ] && echo "$i"; done | head -n 1)',
        '  if [ -n "$S" ]; then echo "$S" > "$J/slurm_id"; cat >/dev/null; echo "ADOPT $S"; exit 0; fi',
        '  rm -rf "$J"',
        "fi",
    ]
    out += stage_lines(links)
    out += [
        'cat > "$J/job.sh" || exit 96',
        'O=$(sbatch --parsable "$J/job.sh" 2>&1); rc=$?',
        "S=${O%%;*}",
        'case "$S" in',
        '  *[!0-9]*|"") rc=1;;',
        "esac",
        'if [ $rc = 0 ]; then echo "$S" > "$J/slurm_id"; echo "SUBMITTED $S"',
        'else rm -rf "$J"; printf "REFUSED %s\\n" "$(printf %s "$O" | tr "\\n" " ")"; fi',
        "exit 0",
    ]
    return "\n".join(out) + "\n"


def poll_script(work_dir: str, slurm_ids: Iterable[str], job_ids: Iterable[str]) -> str:
    """One poll for every job in flight: the user's jobs from one `squeue` (`Q` lines), `sacct` for the
    ones squeue no longer lists (`A` lines), and the jobs whose exit code is written (`RC` lines)."""
    ids = " ".join(sorted(set(slurm_ids), key=int))
    jobs = " ".join(q(j) for j in sorted(set(job_ids)))
    return (
        "\n".join(
            [
                f"W={q(work_dir)}",
                f"Q=$(squeue -h -t all -u \"$(id -un)\" -o '{SQUEUE_FORMAT}' 2>&1) || "
                "{ printf 'SQUEUE-FAILED %s\\n' \"$(printf %s \"$Q\" | head -c 500 | tr '\\n' ' ')\"; Q=; }",
                '[ -n "$Q" ] && printf "%s\\n" "$Q" | sed "s/^/Q /"',
                "m=; nl='\n'",  # an id squeue lists starts a line of $Q
                f'for i in {ids}; do case "$nl$Q" in *"$nl$i|"*) ;; *) m="$m,$i";; esac; done',
                '[ -n "$m" ] && sacct -n -P -X -j "${m#,}" -o JobIDRaw,State 2>/dev/null | sed "s/^/A /"',
                f'for j in {jobs}; do [ -s "$W/jobs/$j/rc" ] && echo "RC $j"; done',
                "exit 0",
            ]
        )
        + "\n"
    )


@dataclass
class PollResult:
    states: dict[str, tuple[str, str]] = field(default_factory=dict)  # slurm id -> (state, reason)
    names: dict[str, str] = field(default_factory=dict)  # slurm id -> job name
    finished: set[str] = field(default_factory=set)  # cuco job ids with an rc file
    error: str = ""


def parse_poll(text: str) -> PollResult:
    res = PollResult()
    for line in text.splitlines():
        tag, _, rest = line.partition(" ")
        if tag == "Q":
            parts = rest.split("|", 3)
            if len(parts) >= 3 and parts[0].strip().isdigit():
                res.states[parts[0].strip()] = (parts[1].strip(), parts[2].strip())
                if len(parts) == 4:
                    res.names[parts[0].strip()] = parts[3].strip()
        elif tag == "A":
            sid, _, state = rest.partition("|")
            if sid.strip().isdigit() and state.strip():
                # sacct says "CANCELLED by 1000": the state is the first word
                res.states.setdefault(sid.strip(), (state.split()[0], ""))
        elif tag == "RC":
            res.finished.add(rest.strip())
        elif tag == "SQUEUE-FAILED":
            res.error = rest.strip()
    return res


def collect_script(work_dir: str, job_id: str, outputs: Sequence[str], remove: bool) -> str:
    """Print a tar of the job's log tail, rc, timedout and outputs (remote_job.read_result), then remove
    its directory."""
    lines = [f'W={q(work_dir)}; J="$W/jobs/{job_id}"', '[ -d "$J" ] || exit 3'] + result_lines(outputs)
    if remove:
        lines.append('cd "$W/jobs" && rm -rf -- ' + q(job_id))
    return "\n".join(lines + ["exit 0"]) + "\n"


def cancel_script(work_dir: str, jobs: Mapping[str, str], remove: bool) -> str:
    """Cancel jobs (cuco job id -> Slurm id): mark them cancelled, one `scancel` for all, then remove
    their directories."""
    ids = " ".join(sorted(set(jobs.values()), key=int))
    marks = " ".join(q(j) for j in sorted(jobs))
    lines = [
        f"W={q(work_dir)}",
        f'for j in {marks}; do [ -d "$W/jobs/$j" ] && : > "$W/jobs/$j/cancel"; done',
        f"scancel {ids} 2>/dev/null",
        f"G={ids.replace(' ', ',')}",
        WAIT_GONE,
    ]
    if remove:
        lines.append(f'cd "$W/jobs" && rm -rf -- {marks}')
    return "\n".join(lines + ["exit 0"]) + "\n"


# Until the Slurm ids in $G (comma-separated) have left the queue (COMPLETING while their processes die),
# at most ~10 s: a stopped cuco leaves nothing in squeue.
WAIT_GONE = (
    'i=0; while [ $i -lt 50 ] && [ -n "$G" ] && squeue -h -j "$G" -o %T 2>/dev/null | grep -q .; '
    "do sleep 0.2; i=$((i+1)); done"
)


def reconcile_script(work_dir: str, mine: str) -> str:
    """Cancel and remove every job whose cuco job id matches `mine` (a whole-id ERE: one run's jobs) and is
    not listed on stdin (one per line): those with a directory in the work dir and those Slurm still lists
    under a cuco name running in it. Prints `CANCELLED <id>` for each that Slurm still had queued or running
    and `REMOVED <id>` for each finished one. Other runs' jobs in the same work dir are left alone."""
    return (
        "\n".join(
            [
                f"W={q(work_dir)}; M={q(mine)}",
                'K=$(mktemp) || exit 3; cat > "$K"',
                "L=$(squeue -h -u \"$(id -un)\" -o '%i|%j|%Z' 2>/dev/null)",
                "G=",
                "for line in $L; do",
                "  S=${line%%|*}; R=${line#*|}; N=${R%%|*}; Z=${R#*|}",
                f'  case "$N" in {NAME_PREFIX}*) j=${{N#{NAME_PREFIX}}};; *) continue;; esac',
                '  [ "$Z" = "$W/jobs/$j/work" ] || continue   # a job of another work dir (another project) stays',
                '  printf "%s\\n" "$j" | grep -qxE -- "$M" || continue   # another run\'s job stays',
                '  grep -qxF -- "$j" "$K" && continue',
                '  [ -d "$W/jobs/$j" ] && : > "$W/jobs/$j/cancel"',
                '  scancel "$S" 2>/dev/null && { echo "CANCELLED $j"; G="$G${G:+,}$S"; }',
                "done",
                WAIT_GONE,
                'cd "$W/jobs" 2>/dev/null || { rm -f "$K"; exit 0; }',
                "for d in *; do",
                '  [ -d "$d" ] || continue',
                '  printf "%s\\n" "$d" | grep -qxE -- "$M" || continue',
                '  grep -qxF -- "$d" "$K" && continue',
                '  [ -f "$d/rc" ] || [ ! -s "$d/slurm_id" ] || { read S < "$d/slurm_id"; scancel "$S" 2>/dev/null; }',
                '  echo "REMOVED $d"; rm -rf "$d"',
                "done",
                'rm -f "$K"',
                "exit 0",
            ]
        )
        + "\n"
    )


def init_script(work_dir: str) -> str:
    """Create the work dir; print its absolute path, the Slurm commands found, and the blobs present."""
    return (
        "\n".join(
            [
                f"W={workdir_expr(work_dir)}",
                'mkdir -p "$W/blobs" "$W/jobs" || exit 3',
                'cd "$W" || exit 3',
                'echo "WORKDIR $(pwd -P)"',
                'for c in sbatch squeue scancel sinfo sacct; do command -v $c >/dev/null 2>&1 || echo "MISSING $c"; done',
                'for f in blobs/*; do [ -f "$f" ] && echo "BLOB ${f#blobs/}"; done',
                "exit 0",
            ]
        )
        + "\n"
    )


def gpus_script(partition: str | None) -> str:
    """The GPU GRES of the partition's nodes, one node per line (`sinfo -N -o %G`)."""
    part = f"-p {q(partition)} " if partition else ""
    return f"sinfo -h -N {part}-o '%G' 2>&1\n"


def parse_gres_gpus(text: str) -> int:
    """The most GPUs one node offers, from `sinfo -o %G` lines like gpu:4, gpu:a100:8(S:0-1), (null)."""
    best = 0
    for line in text.splitlines():
        for item in line.split(","):
            m = re.match(r"\s*gpu(?::[^:(]+)?:(\d+)", item)
            if m:
                best = max(best, int(m.group(1)))
    return best


def test_only_script(placement: StagePlacement, *, gpus: int, gpu_request: str) -> str:
    """`sbatch --test-only` with the stage's partition, account, QoS, constraint and GPUs: does the
    cluster accept them? (A trivial command; nothing is queued.)"""
    opts = sbatch_options(placement, gpus=gpus, cpus=1, gpu_request=gpu_request, minutes=1)
    return f"sbatch --test-only {' '.join(q(o) for o in opts)} --wrap=true 2>&1\n"
