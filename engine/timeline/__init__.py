"""Timelines: where the time of one profiled call per benchmarked config goes, per rank.

No re-exports: import each module by its own name."""
