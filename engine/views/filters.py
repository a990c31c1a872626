"""The candidates table's filter language and sort columns, as SQL over `candidates c` and its last mark `m`
(values always bound parameters)."""

from __future__ import annotations

import re
from typing import Any


class FilterError(ValueError):
    pass


_FIELDS = {
    "id": "c.id",
    "island": "c.island",
    "isl": "c.island",
    "gen": "c.generation",
    "generation": "c.generation",
    "op": "c.operator",
    "operator": "c.operator",
    "status": "c.status",
    "speedup": "c.speedup",
    "mutator": "c.mutator",
    "cell": "c.cell",
    "parent": "c.parent_id",
    "time": "c.time_ms",
    "mark": "m.verdict",
    "verdict": "m.verdict",
}
# The candidates table's columns (widgets/candidates.py COLUMNS keys) as SQL sort expressions.
SORT_COLUMNS = {
    "id": "c.id",
    "island": "c.island",
    "generation": "c.generation",
    "operator": "c.operator",
    "status": "c.status",
    "speedup": "c.speedup",
    "verdict": "(c.status || COALESCE(c.reason, ''))",
    "mark": "m.verdict",
}
_TERM = re.compile(r"^(?P<field>[a-z]+)(?P<op>>=|<=|!=|=|>|<|~)(?P<value>.+)$")


def parse_filter(text: str) -> tuple[str, list[Any]]:
    """`status=done island=1 speedup>1.2 op~llm mark=accept` (terms ANDed) -> SQL and parameters.

    A bare word matches operator, mutator, status or reason. Values are always bound parameters.
    """
    clauses: list[str] = []
    params: list[Any] = []
    for term in text.split():
        match = _TERM.match(term)
        if match is None:
            clauses.append("(c.operator LIKE ? OR c.mutator LIKE ? OR c.status LIKE ? OR c.reason LIKE ?)")
            params += [f"%{term}%"] * 4
            continue
        name, op, value = match["field"], match["op"], match["value"]
        column = _FIELDS.get(name)
        if column is None:
            raise FilterError(f"unknown field {name!r} (known: {', '.join(sorted(_FIELDS))})")
        if op == "~":
            clauses.append(f"{column} LIKE ?")
            params.append(f"%{value}%")
            continue
        if value.lower() in ("none", "null"):
            clauses.append(f"{column} IS {'NOT ' if op == '!=' else ''}NULL")
            continue
        try:
            bound: Any = (
                float(value)
                if column in ("c.speedup", "c.time_ms")
                else (int(value) if column in ("c.id", "c.island", "c.generation", "c.parent_id") else value)
            )
        except ValueError:
            raise FilterError(f"{name}: {value!r} is not a number") from None
        clauses.append(f"{column} {op} ?")
        params.append(bound)
    return (" AND ".join(clauses) or "1=1"), params
