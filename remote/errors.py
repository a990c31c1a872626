"""The one error type for bad input (workload.yaml, cluster.yaml, run config, CLI arguments).

It names the file and the field and says what to do; the CLI prints it and exits 2.
"""

from __future__ import annotations


class InputError(Exception):
    def __init__(self, file: str, field: str, message: str):
        super().__init__(f"{file}: {field}: {message}")
        self.file = str(file)
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message}"
