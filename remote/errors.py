"""Errors shared by every layer for bad input (a file and the field in it that is wrong)."""

from __future__ import annotations


class InputError(Exception):
    """Bad input from the user: names the file, the field and what is wrong with it.

    `str(err)` is `"<file>: <field>: <message>"`; the CLI prints it and exits with code 2.
    """

    def __init__(self, file: str, field: str, message: str):
        self.file = str(file)
        self.field = field
        self.message = message
        super().__init__(self.file, field, message)

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.message}"
