"""A filled store where different designs win different configs and two LLMs were used (the per-config view,
the LLM panel and their snapshots)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from storefill import fill_store

RUN = "demo-20261122-1"


def _configs(small: float, large: float) -> str:
    return json.dumps(
        {
            "benchmark": {
                "mode": "benchmark",
                "configs": [
                    {"name": "small", "baseline_ms": 5.0, "candidate_ms": round(5.0 / small, 4), "speedup": small},
                    {"name": "large", "baseline_ms": 15.0, "candidate_ms": round(15.0 / large, 4), "speedup": large},
                ],
            }
        }
    )


def make_insight_store(home: Path) -> dict[str, int]:
    fill_store(home, run_id=RUN, n=40)
    con = sqlite3.connect(home / "cuco.db")
    # #12 wins the small shapes, #30 the large ones; neither beats the other everywhere
    con.execute("UPDATE candidates SET metrics_json=? WHERE id=12", (_configs(2.40, 0.90),))
    con.execute("UPDATE candidates SET metrics_json=? WHERE id=30", (_configs(1.05, 1.95),))
    con.execute(
        "INSERT INTO llm_calls (run_id, candidate_id, model, purpose, status, input_tokens, output_tokens, "
        "cost_usd, at) VALUES (?,?,?,?,?,?,?,?,?)",
        (RUN, 8, "openai:gpt-5-mini", "mutate", "ok", 3000, 800, 0.0040, 1_790_000_010.0),
    )
    con.execute(
        "INSERT INTO llm_calls (run_id, candidate_id, model, purpose, status, input_tokens, output_tokens, "
        "cost_usd, error, at) VALUES (?,?,?,?,?,?,?,?,?,?)",
        (RUN, 9, "openai:gpt-5-mini", "mutate", "timeout", 3000, 0, 0.0, "timed out after 60 s", 1_790_000_011.0),
    )
    bandit = {
        "models": ["fake-model", "openai:gpt-5-mini"],
        "exploration": 1.0,
        "credited": [3, 8],
        "arms": {
            "fake-model": {"pulls": 1, "rewarded": 1, "reward": 0.12, "cost_usd": 0.0125},
            "openai:gpt-5-mini": {"pulls": 2, "rewarded": 1, "reward": 0.05, "cost_usd": 0.004},
        },
    }
    con.execute("INSERT INTO run_state (run_id, key, value_json) VALUES (?,?,?)", (RUN, "bandit", json.dumps(bandit)))
    con.execute(
        "INSERT INTO run_state (run_id, key, value_json) VALUES (?,?,?)",
        (
            RUN,
            "recommendations",
            json.dumps(["per-chunk flags beat the global barrier", "stop growing chunk sizes past 256 KiB"]),
        ),
    )
    con.execute("INSERT INTO run_state (run_id, key, value_json) VALUES (?,?,?)", (RUN, "meta", '{"at": 32}'))
    strategies = {
        "next_id": 4,
        "exploration": 0.5,
        "marks_seen": 0,
        "strategies": [
            {
                "id": "s1",
                "text": "Send finished chunks while computing the next",
                "pulls": 3,
                "children": 3,
                "successes": 2,
                "failures": 0,
                "reward": 0.3,
            },
            {
                "id": "s2",
                "text": "Flags per chunk instead of the barrier",
                "pulls": 2,
                "children": 2,
                "successes": 1,
                "failures": 1,
                "reward": 0.1,
            },
            {
                "id": "s3",
                "text": "Stagger the ranks",
                "status": "retired",
                "why": "its last 3 children failed",
                "pulls": 3,
                "children": 3,
                "failures": 3,
                "streak": 3,
            },
        ],
    }
    con.execute(
        "INSERT INTO run_state (run_id, key, value_json) VALUES (?,?,?)", (RUN, "strategies", json.dumps(strategies))
    )
    # the operator pinned s2 (a mark the mutator has not folded in yet: the panel shows it all the same)
    con.execute(
        "INSERT INTO strategy_marks (run_id, strategy, verdict, text, at) VALUES (?,?,?,?,?)",
        (RUN, "s2", "pin", "", 1_790_000_012.0),
    )
    config = json.loads(con.execute("SELECT config_json FROM runs WHERE id=?", (RUN,)).fetchone()[0])
    config["budget_usd"] = 0.02
    con.execute("UPDATE runs SET config_json=? WHERE id=?", (json.dumps(config), RUN))
    con.commit()
    con.close()
    return {"small": 12, "large": 30}
