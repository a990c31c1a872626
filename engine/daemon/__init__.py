"""The daemon: a run served to viewers over a Unix socket, its wire protocol, whether a run is
still alive, and the control operations (accept, reject, fork, run state).

No re-exports: import each module by its own name."""
