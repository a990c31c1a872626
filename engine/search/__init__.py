"""Search: where a candidate is born. Mutators propose, selection picks parents among an island's
eligible members, the MAP-Elites archive and the best keep what counts.

No re-exports: import each module by its own name."""
