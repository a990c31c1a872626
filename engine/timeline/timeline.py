"""Where the time goes: the per-rank timeline of one profiled call per benchmarked config.

The harness records it after the timed loop (never a timed call): the CPU demo's link puts, waits and
barriers (`source: cpu-link`), or CUPTI's kernel, memcpy and memset records on GPUs (`source: cupti`).
This module turns either into lanes of intervals (compute, communication, wait), derives the figures
(compute busy, communication busy, overlapped, exposed communication, idle gaps, the critical rank, the
overlap fraction), writes them to the store with the candidate's result, and exports the Chrome
trace-event JSON that Perfetto and chrome://tracing open. It never feeds the score.

Times are microseconds from the start of the profiled call.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

COMPUTE, COMM, WAIT = "compute", "comm", "wait"
MIN_GAP_US = 1.0  # shorter idle stretches are scheduling noise, not gaps worth naming
MAX_RAW_BYTES = 4 << 20  # a timeline larger than this (compressed) is stored as its figures only

Span = tuple[float, float]


class TimelineError(ValueError):
    """A timeline record the harness wrote that cannot be read (the reason is kept, the result is not lost)."""


@dataclass
class Interval:
    lane: str
    kind: str  # compute | comm | wait
    name: str
    start: float
    end: float
    args: dict[str, Any] = field(default_factory=dict)


@dataclass
class RankTimeline:
    rank: int
    start: float
    end: float
    intervals: list[Interval] = field(default_factory=list)

    def lanes(self) -> list[str]:
        seen: dict[str, None] = {}
        for iv in self.intervals:
            seen.setdefault(iv.lane, None)
        return list(seen)


@dataclass
class ConfigTimeline:
    config: str
    source: str
    ranks: list[RankTimeline]
    dropped: int = 0  # records the harness left out (its cap)


# ----- interval arithmetic ------------------------------------------------------------------------


def union(spans: Iterable[Span]) -> list[Span]:
    out: list[Span] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def intersect(xs: list[Span], ys: list[Span]) -> list[Span]:
    """Both inputs are unions (sorted, disjoint)."""
    out, i, j = [], 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if b > a:
            out.append((a, b))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(xs: list[Span], ys: list[Span]) -> list[Span]:
    """xs minus ys (both unions)."""
    out = []
    for a, b in xs:
        cur = a
        for c, d in ys:
            if d <= cur or c >= b:
                continue
            if c > cur:
                out.append((cur, c))
            cur = max(cur, d)
        if cur < b:
            out.append((cur, b))
    return out


def total(spans: Iterable[Span]) -> float:
    return sum(b - a for a, b in spans)


# ----- parsing the harness's records --------------------------------------------------------------


def _num(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise TimelineError(f"{where} must be a finite number (got {v!r})")
    return float(v)


def _ranks(raw: dict[str, Any], end_key: str) -> dict[int, RankTimeline]:
    return {
        int(r["rank"]): RankTimeline(
            int(r["rank"]), _num(r["start"], "rank start"), _num(r[end_key], f"rank {end_key}")
        )
        for r in raw.get("ranks") or []
    }


def _events(raw: dict[str, Any], ranks: dict[int, RankTimeline]):
    """(where, kind, rank, t0, t1, the record) of each record, its rank and times checked."""
    for i, e in enumerate(raw.get("events") or []):
        where = f"event {i}"
        if e.get("rank") not in ranks:
            raise TimelineError(f"{where}: rank {e.get('rank')!r} is not one of the call's ranks")
        yield where, e.get("k"), e["rank"], _num(e.get("t0"), where + " t0"), _num(e.get("t1"), where + " t1"), e


def _cpu_link(config: str, raw: dict[str, Any]) -> ConfigTimeline:
    """Compute is a rank thread's time outside its own waits, quiets and barriers; its link lane holds the
    transfers it sent. Waits of threads the candidate started do not stop the rank's thread computing."""
    ranks = _ranks(raw, "return")
    syncs: dict[int, list[Span]] = defaultdict(list)
    for where, kind, rank, t0, t1, e in _events(raw, ranks):
        rt = ranks[rank]
        if kind == "put":
            dst = e.get("dst")
            carried = _num(e.get("carried"), where + " carried")
            args = {"bytes": e.get("bytes"), "queued_us": t0, "dst": dst}
            rt.intervals.append(Interval(f"link {rank}", COMM, f"put -> rank {dst}", carried, t1, args))
            if dst in ranks and dst != rank:  # data landing on a rank is communication there too
                ranks[dst].intervals.append(
                    Interval(f"link {rank}", COMM, f"put from rank {rank}", carried, t1, dict(args, incoming=True))
                )
        elif kind in ("wait", "quiet", "barrier"):
            helper = bool(e.get("helper"))
            lane = f"rank {rank} helper" if helper else f"rank {rank}"
            rt.intervals.append(Interval(lane, WAIT, kind, t0, t1))
            if not helper:
                syncs[rank].append((t0, t1))
        else:
            raise TimelineError(f"{where}: unknown kind {kind!r}")
    for rank, rt in ranks.items():
        for a, b in subtract([(rt.start, rt.end)], union(syncs[rank])):
            rt.intervals.append(Interval(f"rank {rank}", COMPUTE, "cuco_run", a, b))
        rt.intervals.sort(key=lambda iv: (iv.start, iv.end))
        rt.end = max([rt.end] + [iv.end for iv in rt.intervals])  # done when its data has landed
    return ConfigTimeline(config, "cpu-link", [ranks[k] for k in sorted(ranks)], int(raw.get("dropped") or 0))


def _cupti(config: str, raw: dict[str, Any]) -> ConfigTimeline:
    """Kernels are compute, NCCL's own kernels and every copy (a copy engine moving data) communication;
    a kernel that moves data itself (device-initiated) counts as compute: its communication is inside it."""
    ranks = _ranks(raw, "end")
    for where, kind, rank, t0, t1, e in _events(raw, ranks):
        stream = e.get("stream")
        name = str(e.get("name") or kind)
        if kind == "kernel":
            lane = f"stream {stream}"
            cls = COMM if "nccl" in name.lower() else COMPUTE
        elif kind == "memcpy":
            lane = f"copy engine (stream {stream})"
            cls = COMM
            name = f"memcpy {e.get('copy', '')}".strip()
        elif kind == "memset":
            lane = f"stream {stream}"
            cls = COMPUTE
            name = "memset"
        else:
            raise TimelineError(f"{where}: unknown kind {kind!r}")
        args = {k: e[k] for k in ("bytes", "copy", "grid", "block", "device") if k in e}
        ranks[rank].intervals.append(Interval(lane, cls, name, t0, t1, args))
    for rt in ranks.values():
        rt.intervals.sort(key=lambda iv: (iv.start, iv.end))
    return ConfigTimeline(config, "cupti", [ranks[k] for k in sorted(ranks)], int(raw.get("dropped") or 0))


PARSERS = {"cpu-link": _cpu_link, "cupti": _cupti}


def parse(config: str, raw: dict[str, Any]) -> ConfigTimeline:
    if not isinstance(raw, dict):
        raise TimelineError("a timeline must be an object")
    if raw.get("error"):
        raise TimelineError(str(raw["error"]))
    source = raw.get("source")
    parser = PARSERS.get(source) if isinstance(source, str) else None
    if parser is None:
        raise TimelineError(f"unknown timeline source {raw.get('source')!r}")
    try:
        return parser(config, raw)
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, TimelineError):
            raise
        raise TimelineError(f"malformed timeline record: {type(exc).__name__}: {exc}") from None


# ----- figures -------------------------------------------------------------------------------------


def rank_figures(rt: RankTimeline) -> dict[str, Any]:
    compute = union((iv.start, iv.end) for iv in rt.intervals if iv.kind == COMPUTE)
    comm = intersect(union((iv.start, iv.end) for iv in rt.intervals if iv.kind == COMM), [(rt.start, rt.end)])
    overlapped = intersect(compute, comm)
    gaps = [g for g in subtract([(rt.start, rt.end)], union(compute + comm)) if g[1] - g[0] >= MIN_GAP_US]
    largest = max(gaps, key=lambda g: g[1] - g[0], default=None)
    comp_us, comm_us, over_us = total(compute), total(comm), total(overlapped)
    by_name: dict[str, float] = defaultdict(float)
    for iv in rt.intervals:
        if iv.kind in (COMPUTE, COMM) and not iv.args.get("incoming"):
            by_name[iv.name] += iv.end - iv.start
    dominant = max(by_name.items(), key=lambda kv: kv[1], default=(None, 0.0))
    out = {
        "rank": rt.rank,
        "span_ms": (rt.end - rt.start) / 1e3,
        "compute_ms": comp_us / 1e3,
        "comm_ms": comm_us / 1e3,
        "overlapped_ms": over_us / 1e3,
        "exposed_comm_ms": (comm_us - over_us) / 1e3,
        "exposed_share": (comm_us - over_us) / (rt.end - rt.start) if rt.end > rt.start else 0.0,
        "idle_ms": total(gaps) / 1e3,
        "gaps": len(gaps),
        "largest_gap_ms": (largest[1] - largest[0]) / 1e3 if largest else 0.0,
        "largest_gap_at_ms": largest[0] / 1e3 if largest else None,
        "largest_gap_after": _before(rt, largest[0]) if largest else None,
        "largest_gap_in": _waiting_in(rt, largest) if largest else None,
        "overlap_fraction": over_us / min(comp_us, comm_us) if min(comp_us, comm_us) > 0 else None,
        "dominant": dominant[0],
        "dominant_ms": dominant[1] / 1e3,
        "end_ms": rt.end / 1e3,
    }
    return out


def _before(rt: RankTimeline, t: float) -> str | None:
    """What ran last before time t on this rank (what the gap waited behind)."""
    done = [iv for iv in rt.intervals if iv.end <= t + 1e-6]
    if not done:
        return "the start of the call"
    last = max(done, key=lambda iv: iv.end)
    return f"{last.kind} {last.name}"


def _waiting_in(rt: RankTimeline, gap: Span) -> str | None:
    """The wait (barrier, wait, quiet) the rank sat in during most of the gap, if any."""
    best, best_us = None, 0.0
    for iv in rt.intervals:
        if iv.kind == WAIT:
            us = min(iv.end, gap[1]) - max(iv.start, gap[0])
            if us > best_us:
                best, best_us = iv.name, us
    return best


def figures(tl: ConfigTimeline) -> dict[str, Any]:
    """Per rank, and for the config: the overlap fraction is the overlapped time over the smaller of compute
    and communication busy (1: all of what could hide did), summed over ranks; the critical rank finishes last."""
    ranks = [rank_figures(rt) for rt in tl.ranks]
    can_hide = sum(min(r["compute_ms"], r["comm_ms"]) for r in ranks)
    critical = max(ranks, key=lambda r: (r["end_ms"], r["exposed_comm_ms"]), default=None)
    return {
        "source": tl.source,
        "ranks": ranks,
        "critical_rank": critical["rank"] if critical else None,
        "overlap_fraction": (sum(r["overlapped_ms"] for r in ranks) / can_hide) if can_hide > 0 else None,
        "exposed_comm_ms": max((r["exposed_comm_ms"] for r in ranks), default=0.0),
        "dropped": tl.dropped,
    }


# ----- carried out of the harness's result, into the store ---------------------------------------


def take_from_result(raw: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Removes each config's `timeline` from a harness result (the result stored with the evaluation stays
    small) and returns them by config name; a `timeline_error` (no CUPTI, ...) becomes {"error": reason}."""
    out: dict[str, dict[str, Any]] = {}
    for c in raw.get("configs") or []:
        if not isinstance(c, dict):
            continue
        tl, err = c.pop("timeline", None), c.pop("timeline_error", None)
        if isinstance(tl, dict):
            out[str(c.get("name"))] = tl
        elif err:
            out[str(c.get("name"))] = {"error": str(err)}
    return out


def summarize(raws: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Figures per config (or {"error": why there is none}): small, kept in the candidate's metrics."""
    out = {}
    for config, raw in raws.items():
        try:
            out[config] = figures(parse(config, raw))
        except TimelineError as exc:
            why = str(exc)
            out[config] = {"error": why if "no timeline" in why else f"no timeline: {why}"}
    return out


# ----- Chrome trace-event export -------------------------------------------------------------------

CONFIG_GAP_US = 1000.0  # configs are laid one after another on the trace, this far apart


def chrome_trace(timelines: dict[str, ConfigTimeline], title: str = "") -> dict[str, Any]:
    """Trace-event JSON (the "JSON Object Format"): a process per rank, a thread per lane (the rank's thread
    or stream, its link or copy engine), plus an `idle` thread with the gaps and a `config` thread naming
    each config's stretch; `otherData.figures` holds each config's own figures (overlap fraction, critical
    rank). Configs follow one another in time. `cuco_tui.trace_html` draws the same dict as a page."""
    events: list[dict[str, Any]] = []
    tids: dict[tuple[int, str], int] = {}

    def tid(rank: int, lane: str) -> int:
        key = (rank, lane)
        if key not in tids:
            tids[key] = sum(1 for k in tids if k[0] == rank) + 1
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tids[key], "args": {"name": lane}})
            events.append(
                {
                    "ph": "M",
                    "name": "thread_sort_index",
                    "pid": rank,
                    "tid": tids[key],
                    "args": {"sort_index": tids[key]},
                }
            )
        return tids[key]

    ranks_seen: set[int] = set()
    config_figures: dict[str, dict[str, Any]] = {}  # the config's own figures (overlap fraction, critical rank)
    offset = 0.0
    for config, tl in timelines.items():
        figs = figures(tl)
        config_figures[config] = {k: v for k, v in figs.items() if k != "ranks"}
        first = min((rt.start for rt in tl.ranks), default=0.0)
        shift = offset - first
        for rt, rf in zip(tl.ranks, figs["ranks"]):
            if rt.rank not in ranks_seen:
                ranks_seen.add(rt.rank)
                events.append({"ph": "M", "name": "process_name", "pid": rt.rank, "args": {"name": f"rank {rt.rank}"}})
                events.append(
                    {"ph": "M", "name": "process_sort_index", "pid": rt.rank, "args": {"sort_index": rt.rank}}
                )
            events.append(
                {
                    "ph": "X",
                    "name": config,
                    "cat": "config",
                    "pid": rt.rank,
                    "tid": tid(rt.rank, "config"),
                    "ts": rt.start + shift,
                    "dur": rt.end - rt.start,
                    "args": {k: v for k, v in rf.items() if not isinstance(v, (dict, list))},
                }
            )
            for iv in rt.intervals:
                if iv.args.get("incoming"):
                    continue  # shown once, on the sender's link
                events.append(
                    {
                        "ph": "X",
                        "name": iv.name,
                        "cat": iv.kind,
                        "pid": rt.rank,
                        "tid": tid(rt.rank, iv.lane),
                        "ts": iv.start + shift,
                        "dur": max(0.0, iv.end - iv.start),
                        "args": iv.args,
                    }
                )
            compute = union((iv.start, iv.end) for iv in rt.intervals if iv.kind == COMPUTE)
            comm = union((iv.start, iv.end) for iv in rt.intervals if iv.kind == COMM)
            for a, b in subtract([(rt.start, rt.end)], union(compute + comm)):
                if b - a >= MIN_GAP_US:
                    events.append(
                        {
                            "ph": "X",
                            "name": "idle",
                            "cat": "idle",
                            "pid": rt.rank,
                            "tid": tid(rt.rank, "idle"),
                            "ts": a + shift,
                            "dur": b - a,
                            "args": {},
                        }
                    )
        offset += max((rt.end for rt in tl.ranks), default=first) - first + CONFIG_GAP_US
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"title": title, "configs": list(timelines), "figures": config_figures},
    }


# ----- the LLM's view ------------------------------------------------------------------------------


def prompt_summary(
    figs_by_config: dict[str, dict[str, Any]], public: set[str] | None = None, max_ranks: int = 8
) -> str:
    """A compact text of the figures for a model: per config and rank, exposed communication (ms and share
    of the rank's time), the largest idle gap and what preceded it, the dominant kernel. Only configs in
    `public` (when given) appear."""
    lines = []
    for config, f in figs_by_config.items():
        if public is not None and config not in public:
            continue
        if not isinstance(f, dict):
            continue
        if f.get("error"):
            lines.append(f"- {config}: {f['error']}")
            continue
        frac = f.get("overlap_fraction")
        head = f"- {config}: overlap fraction {frac:.2f}" if frac is not None else f"- {config}: no communication seen"
        lines.append(f"{head}, critical rank {f.get('critical_rank')}")
        for r in (f.get("ranks") or [])[:max_ranks]:
            gap = (
                f"largest idle gap {r['largest_gap_ms']:.3f} ms after {r['largest_gap_after']}"
                + (f" (in {r['largest_gap_in']})" if r.get("largest_gap_in") else "")
                if r.get("largest_gap_ms")
                else "no idle gap"
            )
            lines.append(
                f"  rank {r['rank']}: exposed communication {r['exposed_comm_ms']:.3f} ms "
                f"({100 * r['exposed_share']:.0f}% of its {r['span_ms']:.3f} ms), compute {r['compute_ms']:.3f} ms, "
                f"{gap}; dominant: {r['dominant']} ({r['dominant_ms']:.3f} ms)"
            )
    return "\n".join(lines)
