"""Evaluation: the cascade a candidate goes through (build -> symbol policy -> verify ->
benchmark) on an executor, and what its result, its faults and its numbers mean.

No re-exports: import each module by its own name."""
