"""The app on a deterministically filled store, for snapshot tests (pytest-textual-snapshot loads this file)."""

import json
import os
import sqlite3
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from storefill import fill_store  # noqa: E402

from cuco_tui.app import CucoApp  # noqa: E402
from cuco_tui.settings import TuiSettings  # noqa: E402

RUN = "demo-20261122-1"


def make_app(theme: str = "cuco-dark", long_line: bool = False, marked: bool = False) -> CucoApp:
    home = Path(tempfile.mkdtemp(prefix="cuco-snap-"))
    fill_store(home, run_id=RUN, n=40, long_line=long_line)
    if marked:
        mark_newest(home)
    return CucoApp(home, RUN, settings=TuiSettings(theme=theme))


REVIEWED, ACCEPTED, REJECTED, TENFOLD = 38, 36, 33, 35


def mark_newest(home: Path) -> None:
    """Among the newest rows (those an 80x24 screen shows): one held for review (a flag beyond the overlap
    bound), one accepted and one rejected by a person, and one speedup of two digits before the point."""
    db = sqlite3.connect(home / "cuco.db")
    with db:
        flags = [{"kind": "beyond_overlap_bound", "config": "small", "candidate_ms": 1.1, "bound_ms": 3.0}]
        (metrics,) = db.execute("SELECT metrics_json FROM candidates WHERE id=?", (REVIEWED,)).fetchone()
        db.execute(
            "UPDATE candidates SET review='needs_review', metrics_json=? WHERE id=?",
            (json.dumps({**json.loads(metrics), "flags": flags}), REVIEWED),
        )
        db.execute("UPDATE candidates SET speedup=12.345, time_ms=0.81, fitness=5524.862 WHERE id=?", (TENFOLD,))
        for cid, verdict, text in ((ACCEPTED, "accept", "clean overlap"), (REJECTED, "reject", "reads past the end")):
            db.execute(
                "INSERT INTO marks (run_id, candidate_id, verdict, text, at) VALUES (?,?,?,?,?)",
                (RUN, cid, verdict, text, 1.8e9 + cid),
            )
    db.close()


app = make_app(os.environ.get("CUCO_SNAP_THEME", "cuco-dark"))
