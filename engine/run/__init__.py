"""Run: one run's evolutionary loop (`engine.Engine`) and what it hands its jobs to: the ledger that writes a result,
the control operations (accept, reject, fork, run state), the finalists step and the proposal tasks. It sits
above the stages (onboard/, search/, evaluation/) it drives and below the daemon that serves it.

No re-exports: import each module by its own name."""
