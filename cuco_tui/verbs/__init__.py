"""The verbs of the `cuco` command, one module per verb or per small group of related verbs; `registry`
lists them in the order `cuco --help` shows, and `cuco_tui/cli.py` builds the parser from it."""
