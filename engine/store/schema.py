"""The SQLite schema of a project home (`.cuco/cuco.db`) and its migrations.

Each run's engine writes its own run's rows; several engines (runs, forks) may share one home. Every state
change also appends to `events` (a `seq` the database assigns, rising in commit order), which is what
attached TUIs replay with `hello{since}`.
"""

from __future__ import annotations

# Candidate statuses. `pending` rows exist before evaluation so a crash never loses a proposal.
PENDING, RUNNING, DONE, INCORRECT, FAILED = "pending", "running", "done", "incorrect", "failed"
REFUSED = "refused"  # the symbol policy refused the candidate's object before anything of it ran
FINAL_STATUSES = (DONE, INCORRECT, FAILED, REFUSED)

# Run states (the `cuco report --json` contract).
RUN_STATES = ("running", "paused", "stopped", "finished", "failed")

SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    workload TEXT NOT NULL,
    workload_path TEXT NOT NULL,
    state TEXT NOT NULL,
    parent_run TEXT REFERENCES runs(id),
    fork_candidate INTEGER,
    config_json TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    finished_at REAL,
    stop_reason TEXT,
    baseline_time_ms REAL,
    elapsed_s REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS candidates (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL REFERENCES runs(id),
    number INTEGER NOT NULL,              -- proposal order within the run (0 = seed)
    island INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    parent_id INTEGER,
    inspiration_ids TEXT NOT NULL DEFAULT '[]',
    operator TEXT NOT NULL,               -- seed | variant | knob | cross | llm-diff | llm-full | llm-cross | llm-repair | fork
    mutator TEXT NOT NULL,                -- design-space | llm:<model> | fast-path | fork
    source_hash TEXT NOT NULL,
    descriptor_json TEXT NOT NULL,
    cell TEXT NOT NULL,
    status TEXT NOT NULL,
    correct INTEGER,
    speedup REAL,
    time_ms REAL,
    baseline_ms REAL,
    fitness REAL,
    reason TEXT,
    metrics_json TEXT,
    origin_id INTEGER,                    -- a fork's copy points at the original
    created_at REAL NOT NULL,
    finished_at REAL,
    UNIQUE (run_id, source_hash),
    UNIQUE (run_id, number)
);
CREATE INDEX IF NOT EXISTS candidates_run_status ON candidates(run_id, status);
CREATE INDEX IF NOT EXISTS candidates_run_fitness ON candidates(run_id, fitness);
CREATE TABLE IF NOT EXISTS evaluations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    candidate_id INTEGER NOT NULL REFERENCES candidates(id),
    run_id TEXT NOT NULL,
    stage TEXT NOT NULL,                  -- build | verify | benchmark
    status TEXT NOT NULL,                 -- ok | failed | timeout | incorrect | cancelled | lost
    rc INTEGER,
    duration_s REAL,
    node TEXT,
    attempt INTEGER NOT NULL DEFAULT 1,
    log_hash TEXT,
    result_json TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS evaluations_candidate ON evaluations(candidate_id);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,                  -- stable across restarts: run-candidate-stage
    run_id TEXT NOT NULL,
    candidate_id INTEGER NOT NULL,
    stage TEXT NOT NULL,
    state TEXT NOT NULL,                  -- running | done | cancelled
    node TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    data_json TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_run ON events(run_id, seq);
CREATE TABLE IF NOT EXISTS marks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    candidate_id INTEGER NOT NULL,
    verdict TEXT NOT NULL,                -- accept | reject | clear
    text TEXT NOT NULL DEFAULT '',
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS marks_candidate ON marks(candidate_id);
CREATE TABLE IF NOT EXISTS archive (
    run_id TEXT NOT NULL,
    cell TEXT NOT NULL,
    candidate_id INTEGER NOT NULL,
    fitness REAL NOT NULL,
    PRIMARY KEY (run_id, cell)
);
CREATE TABLE IF NOT EXISTS migrations_log (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    src_island INTEGER NOT NULL,
    dst_island INTEGER NOT NULL,
    candidate_id INTEGER NOT NULL,
    at_evaluation INTEGER NOT NULL,
    at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS llm_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT,
    candidate_id INTEGER,
    model TEXT NOT NULL,
    purpose TEXT NOT NULL,                -- mutate | meta | judge | transform | embed
    status TEXT NOT NULL,                 -- ok | error | timeout | cancelled | in_flight
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    latency_s REAL,
    prompt_hash TEXT,                     -- blob: the prompt as sent (never a key)
    response_hash TEXT,                   -- blob: the raw answer
    error TEXT,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS llm_calls_run ON llm_calls(run_id);
CREATE TABLE IF NOT EXISTS run_state (
    run_id TEXT NOT NULL,
    key TEXT NOT NULL,                    -- e.g. bandit, recommendations
    value_json TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
);
CREATE TABLE IF NOT EXISTS nodes (
    name TEXT PRIMARY KEY,
    state_json TEXT NOT NULL,
    updated_at REAL NOT NULL
);
"""

# v2: per-island queries (the TUI's islands pane) without a scan of the run.
SCHEMA_V2 = """
CREATE INDEX IF NOT EXISTS candidates_run_island ON candidates(run_id, island, status, speedup);
"""

# v3: what a failure was due to, external job ids (a scheduler's), per-config timelines, human review.
SCHEMA_V3 = """
ALTER TABLE evaluations ADD COLUMN fault TEXT;          -- candidate | environment (NULL: the stage passed)
ALTER TABLE candidates ADD COLUMN fault TEXT;           -- why a final failure was the candidate's, or NULL
ALTER TABLE jobs ADD COLUMN external_id TEXT;           -- e.g. a Slurm job id, for re-adoption after restart
ALTER TABLE jobs ADD COLUMN executor TEXT;              -- local | ssh | slurm
ALTER TABLE candidates ADD COLUMN review TEXT;          -- NULL | needs_review | accepted | rejected
CREATE TABLE IF NOT EXISTS timelines (
    candidate_id INTEGER NOT NULL REFERENCES candidates(id),
    config TEXT NOT NULL,
    figures_json TEXT NOT NULL,                         -- derived figures per rank (small)
    data BLOB NOT NULL,                                 -- zlib-compressed JSON of the raw per-rank records
    PRIMARY KEY (candidate_id, config)
);
"""

# v8: a candidate's children by index (the TUI's lineage tree opens one parent at a time in a big run), and
# a run's candidates by speedup (the TUI's table sorted by speedup reads its top rows without a sort).
SCHEMA_V8 = """
CREATE INDEX IF NOT EXISTS candidates_parent ON candidates(parent_id);
CREATE INDEX IF NOT EXISTS candidates_run_speedup ON candidates(run_id, speedup);
"""

# v9: several engines write one home at once (runs and forks side by side): candidate ids are reserved in
# blocks from this counter inside a write transaction, never numbered by one engine from what it last read.
SCHEMA_V9 = """
CREATE TABLE IF NOT EXISTS id_counters (
    name TEXT PRIMARY KEY,                -- candidates
    next INTEGER NOT NULL                 -- the first id no writer has reserved
);
"""

# v10: operator marks on a run's mutation strategies (pin, unpin, retire, add), folded in order by the LLM
# mutator's strategy population (engine/llm/strategies.py), like accept and reject marks on candidates.
SCHEMA_V10 = """
CREATE TABLE IF NOT EXISTS strategy_marks (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    strategy TEXT,                        -- a strategy id (s3); NULL for add
    verdict TEXT NOT NULL,                -- pin | unpin | retire | add
    text TEXT NOT NULL DEFAULT '',        -- add: the strategy; retire: the reason
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS strategy_marks_run ON strategy_marks(run_id, id);
"""

# v12: the measurement's spread. A speedup's 95 % interval (its lower end is what candidates rank by:
# engine/search/ranking.py), and whether the numbers come from the side-by-side re-measurement of the run's
# finalists; the raw A/B rounds stay in metrics_json (the harness's result) and evaluations.result_json.
SCHEMA_V12 = """
ALTER TABLE candidates ADD COLUMN speedup_low REAL;
ALTER TABLE candidates ADD COLUMN speedup_high REAL;
ALTER TABLE candidates ADD COLUMN remeasured INTEGER NOT NULL DEFAULT 0;
"""

# Migrations by version. Numbers may leave gaps (a migration is only ever added, never renumbered); the
# store applies every one above the database's version, in order.
MIGRATIONS: dict[int, str] = {
    1: SCHEMA_V1,
    2: SCHEMA_V2,
    3: SCHEMA_V3,
    8: SCHEMA_V8,
    9: SCHEMA_V9,
    10: SCHEMA_V10,
    12: SCHEMA_V12,
}
SCHEMA_VERSION = max(MIGRATIONS)


def pending_migrations(version: int) -> list[tuple[int, str]]:
    """The migrations a store at `version` still needs, in order, each script ending by recording its number
    (to be run inside one transaction each)."""
    return [
        (v, MIGRATIONS[v] + f"INSERT OR REPLACE INTO meta VALUES ('schema_version', '{v}');")
        for v in sorted(m for m in MIGRATIONS if m > version)
    ]
