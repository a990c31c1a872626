"""The store: one SQLite database per project home, the blobs beside it, and what is read back
from it (run ids, `cuco report`).

No re-exports: import each module by its own name."""
