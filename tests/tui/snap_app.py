"""The app on a deterministically filled store, for snapshot tests (pytest-textual-snapshot loads this file)."""

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from storefill import fill_store  # noqa: E402

from cuco_tui.app import CucoApp  # noqa: E402
from cuco_tui.settings import TuiSettings  # noqa: E402

RUN = "demo-20261122-1"


def make_app(theme: str = "cuco-dark", long_line: bool = False) -> CucoApp:
    home = Path(tempfile.mkdtemp(prefix="cuco-snap-"))
    fill_store(home, run_id=RUN, n=40, long_line=long_line)
    return CucoApp(home, RUN, settings=TuiSettings(theme=theme))


app = make_app(os.environ.get("CUCO_SNAP_THEME", "cuco-dark"))
