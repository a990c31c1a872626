"""Views: every query a viewer runs against a project's store (the TUI, headless mode, `cuco report`, `cuco serve`),
returning the contract's types (engine/contract.py). The top floor of engine/: nothing in the engine imports it.
`read_model.ReadModel` is the entry point; `summary`, `filters`, `lineage`, `insight`, `best`, `liveness` and
`report` hold the queries it and the CLI gather (docs/contract.md).

No re-exports: import each module by its own name."""
