"""The TUI's candidate detail gives each config the same efficiency verdict as `cuco report`: an overlap
efficiency, or "compute changed" with the candidate's own compute time, never an efficiency above 1."""

from __future__ import annotations

import json
import sqlite3

from cuco_tui.data import StoreView
from tests.engine.test_efficiency import config, figures
from tests.gpu.test_efficiency_table import _make_store


def test_detail_shows_compute_changed_instead_of_an_efficiency_above_one(tmp_path):
    db = _make_store(tmp_path)
    metrics = {
        "benchmark": {"configs": [config(2.0, 1.6, 1.5, 0.4, "big"), config(0.1, 0.03, 0.08, 0.02, "small")]},
        "timeline": {"small": figures(0.021, 0.024)},
    }
    con = sqlite3.connect(db)
    cid = con.execute("select id from candidates where number = 1").fetchone()[0]
    con.execute("update candidates set metrics_json = ? where id = ?", (json.dumps(metrics), cid))
    con.commit()
    con.close()
    view = StoreView(tmp_path)
    text = view.detail(cid).metrics.plain
    assert "overlap efficiency 0.80" in text  # big: (2.0 - 1.6) / (2.0 - 1.5)
    assert "compute changed, own compute 0.024 ms" in text  # small: raw (0.1 - 0.03) / 0.02 = 3.5
    assert "3.50" not in text and "overlap efficiency 3" not in text
