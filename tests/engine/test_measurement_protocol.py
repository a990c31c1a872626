"""The measurement protocol's parts: the interval of a median ratio (and that it holds 1.00 for a program
against its own copy about 95 % of the time, bursts included), rounds pooled across jobs, ranking by the
interval's lower end, the overlap bound judged at the slow end of the interval, the finalists, the node's
interference read from /proc, and the one way a speedup is shown."""

from __future__ import annotations

import random

import pytest

from engine.contract import format_speedup
from engine.evaluation.evaluation import held_beyond_bound
from engine.evaluation.harness_result import HarnessResult, ResultError, parse_result
from engine.evaluation.pooled import pooled
from engine.evaluation.protocol import median_interval, narrow
from engine.search import ranking
from engine.search.finalists import finalists
from engine.search.population import Cand, Population
from remote import interference


def test_the_median_interval_is_the_order_statistics_of_a_95_percent_band():
    assert median_interval([9, 1, 8, 2, 7, 3, 6, 4, 5]) == (2, 8)  # n=9: x(2)..x(8), 96 %
    assert median_interval([3, 1, 2]) == (1, 3)  # too few values for 95 %: the whole range
    assert median_interval([]) is None
    assert median_interval(list(range(1, 37))) == (12, 25)


def test_a_program_against_its_own_copy_holds_1_in_about_95_percent_of_jobs_despite_bursts():
    rng = random.Random(5)
    held = 0
    trials = 2000
    for _ in range(trials):
        ratios = []
        for _ in range(36):
            base, cand = rng.lognormvariate(0, 0.08), rng.lognormvariate(0, 0.08)
            if rng.random() < 0.15:  # a burst lands on one call of the round: a ratio far off
                if rng.random() < 0.5:
                    base *= 3
                else:
                    cand *= 3
            ratios.append(base / cand)
        lo, hi = median_interval(ratios)
        held += lo <= 1.0 <= hi
    assert 0.93 <= held / trials <= 0.99


def _config(name: str, rounds: list[list[float]], **extra) -> dict:
    ratios = sorted(b / c for b, c, _ in rounds)
    lo, hi = median_interval(ratios)
    return {
        "name": name,
        "correct": True,
        "baseline_ms": 10.0,
        "candidate_ms": 10.0 / ratios[len(ratios) // 2],
        "speedup": ratios[len(ratios) // 2],
        "speedup_interval": [lo, hi],
        "rounds": rounds,
        **extra,
    }


def test_two_jobs_pooled_read_as_one_measurement_with_every_round():
    rng = random.Random(1)
    jobs = []
    for _ in range(2):
        rounds = [[10.0 * rng.uniform(0.9, 1.1), 8.0 * rng.uniform(0.9, 1.1), i % 2] for i in range(11)]
        jobs.append(HarnessResult("benchmark", True, None, [_config("square", rounds, comp_ms=3.0, comm_ms=7.0)]))
    both = pooled(jobs)
    every = [r[0] / r[1] for j in jobs for r in j.configs[0]["rounds"]]
    assert len(both.configs[0]["rounds"]) == 22 and both.rounds("square") == pytest.approx(every)
    assert both.speedup == pytest.approx(sorted(every)[10] / 2 + sorted(every)[11] / 2)
    lo, hi = both.speedup_interval
    assert lo <= both.speedup <= hi
    pooled_lo, pooled_hi = median_interval(every)
    own = [j.configs[0]["speedup_interval"] for j in jobs]  # jobs differ more than their rounds say
    assert lo == pytest.approx(min(pooled_lo, *(o[0] for o in own)))
    assert hi == pytest.approx(max(pooled_hi, *(o[1] for o in own)))


def test_a_result_whose_interval_does_not_hold_its_speedup_is_refused():
    raw = (
        b'{"mode": "benchmark", "correct": true, "configs": [{"name": "a", "correct": true, "baseline_ms": 2, '
        b'"candidate_ms": 1, "speedup": 2.0, "speedup_interval": [2.5, 3.0]}]}'
    )
    with pytest.raises(ResultError, match="speedup_interval"):
        parse_result(raw, "benchmark", ["a"])


def test_candidates_rank_by_the_lower_end_of_their_interval():
    assert ranking.fitness(1.30, [1.00, 1.60]) == 1.00
    assert ranking.fitness(1.20, None) == 1.20  # a result from before intervals
    pop = Population()
    steady = Cand(1, 0, 0, 0, "done", "h1", {}, "c1", "seed", fitness=ranking.fitness(1.20, [1.17, 1.23]))
    lucky = Cand(2, 1, 0, 1, "done", "h2", {}, "c1", "knob", fitness=ranking.fitness(1.30, [1.00, 1.60]))
    for c in (steady, lucky):
        pop.add(c)
        pop.admit(c)
    assert pop.best is steady and pop.archive.cells["c1"].candidate_id == 1  # one lucky reading crowns nothing


def test_the_overlap_bound_is_judged_at_the_slow_end_of_the_interval():
    # the median reads 20 % under the 7 ms bound, but the interval reaches the bound: not beyond it
    noisy = {
        "name": "square",
        "baseline_ms": 12.0,
        "candidate_ms": 5.6,
        "comp_ms": 3.0,
        "comm_ms": 7.0,
        "speedup": 12.0 / 5.6,
        "speedup_interval": [12.0 / 7.2, 12.0 / 5.0],
    }
    assert HarnessResult("benchmark", True, None, [noisy]).beyond_bound() == []
    tight = {**noisy, "speedup_interval": [12.0 / 5.8, 12.0 / 5.4]}
    assert [f["config"] for f in HarnessResult("benchmark", True, None, [tight]).beyond_bound()] == ["square"]


def test_the_finalists_are_the_top_by_lower_bound_the_top_by_speedup_and_the_seed():
    pop = Population()
    # (lower bound, speedup): 6 and 7 read fast in a job whose interval came out wide
    readings = [(0.9, 1.0), (1.5, 1.55), (1.4, 1.45), (1.3, 1.35), (1.2, 1.25), (1.0, 1.7), (0.95, 1.6), (1.1, 1.2)]
    for i, (fit, speedup) in enumerate(readings, start=1):
        c = Cand(i, i - 1, 0, 0, "done", f"h{i}", {}, f"c{i}", "seed" if i == 1 else "knob", fitness=fit)
        c.speedup = speedup
        pop.add(c)
        pop.admit(c)
    assert [c.id for c in finalists(pop, seed_id=1)] == [2, 3, 4, 6, 7, 1]
    assert [c.id for c in finalists(pop, seed_id=2)] == [2, 3, 4, 6, 7]
    assert [c.id for c in finalists(pop, seed_id=1, k_bound=1, k_speedup=1)] == [2, 6, 1]


def _proc(tmp_path, name: str, load: float, total: int, steal: int):
    d = tmp_path / name
    d.mkdir()
    user = total - steal
    (d / "stat").write_text(f"cpu  {user} 0 0 0 0 0 0 {steal} 0 0\ncpu0 1 2 3\n")
    (d / "loadavg").write_text(f"{load} 1.00 1.00 3/200 1234\n")
    return interference.sample(d)


def test_interference_is_read_from_proc_load_and_steal(tmp_path):
    before = _proc(tmp_path, "a", 0.5, 1000, 0)
    quiet = interference.between(before, _proc(tmp_path, "b", 0.6, 2000, 10), job_cpus=2)
    assert quiet is not None and quiet.steal == pytest.approx(0.01) and not quiet.interfered
    stolen = interference.between(before, _proc(tmp_path, "c", 0.6, 2000, 200), job_cpus=2)
    assert stolen is not None and stolen.interfered  # 20 % of the CPU time taken by the hypervisor
    cores = quiet.cores
    crowded = interference.between(before, _proc(tmp_path, "d", 2 + 4.0 * cores, 2000, 0), job_cpus=2)
    assert crowded is not None and crowded.interfered and crowded.as_dict()["interfered"] is True
    assert interference.sample(tmp_path / "missing") is None


def test_a_speedup_is_shown_with_its_spread_wherever_it_is_shown():
    assert format_speedup(1.234, [1.18, 1.29]) == "1.23x [1.18-1.29]"
    assert format_speedup(1.234, None) == "1.23x"  # a result from before intervals: no interval shown
    assert format_speedup(1.234, [None, None]) == "1.23x"
    assert format_speedup(12.345, [11.0, 13.9]) == "12.3x [11.0-13.9]"  # three significant figures
    assert format_speedup(None, [1.0, 1.1]) == ""
    assert narrow(1.0, (0.98, 1.02)) and not narrow(1.0, (0.9, 1.1))


def test_a_bound_one_job_read_high_holds_nothing_and_a_candidate_beyond_in_every_job_is_held():
    def job(comm_ms: float) -> HarnessResult:
        rounds = [[10.0, 8.6 + 0.01 * i, i % 2] for i in range(12)]
        return HarnessResult("benchmark", True, None, [_config("square", rounds, comp_ms=4.3, comm_ms=comm_ms)])

    burst, calm = job(9.9), job(6.7)  # the communication-only samples of one job met a burst
    assert burst.beyond_bound() and not calm.beyond_bound()
    assert held_beyond_bound([burst, calm], pooled([burst, calm])) == []
    fast = [job(9.9), job(9.8)]  # beyond the bound in both jobs: a person judges it
    assert [f["config"] for f in held_beyond_bound(fast, pooled(fast))] == ["square"]
