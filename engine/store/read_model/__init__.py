"""The read model: the queries viewers run against a project's store, returning the contract's types
(engine/contract.py). `views.ReadModel` is the entry point; `summary`, `filters`, `lineage` and `insight`
hold the queries it gathers (docs/contract.md)."""
