"""A host MPI collective of the repeated region (NVIDIA's Jacobi: the norm's `MPI_Allreduce` after a
`cudaStreamSynchronize`) as the harness's host collective (cuco_abi.h: `cuco_host_allreduce`, ...): the
same arguments, blocking on the host among the ranks' processes, through the communicator the harness
gives each side (`ctx->host_comm`). The harness owns MPI, so the program's communicator argument becomes
that one (all the job's ranks: MPI_COMM_WORLD), and MPI's datatype and reduction names are defined as the
harness's (a program's own alias, `#define MPI_REAL_TYPE MPI_FLOAT`, then reads as written).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

HOST_COMM = "cuco_c->host_comm"


@dataclass(frozen=True)
class HostCall:
    harness: str  # the harness's function
    nargs: int  # MPI's argument count; the last is the communicator
    typed: tuple[int, ...]  # the arguments that name a datatype or a reduction


HOST_CALLS = {
    "MPI_Allreduce": HostCall("cuco_host_allreduce", 6, (3, 4)),
    "MPI_Reduce": HostCall("cuco_host_reduce", 7, (3, 4)),
    "MPI_Bcast": HostCall("cuco_host_bcast", 5, (2,)),
    "MPI_Barrier": HostCall("cuco_host_barrier", 1, ()),
}

# MPI's names the harness's host collectives take (LP64 Linux: a long is a long long)
MPI_NAMES = {
    "MPI_BYTE": "CUCO_HOST_BYTE",
    "MPI_CHAR": "CUCO_HOST_CHAR",
    "MPI_SIGNED_CHAR": "CUCO_HOST_CHAR",
    "MPI_UNSIGNED_CHAR": "CUCO_HOST_BYTE",
    "MPI_INT": "CUCO_HOST_INT",
    "MPI_INT32_T": "CUCO_HOST_INT",
    "MPI_LONG": "CUCO_HOST_LONG_LONG",
    "MPI_LONG_LONG": "CUCO_HOST_LONG_LONG",
    "MPI_LONG_LONG_INT": "CUCO_HOST_LONG_LONG",
    "MPI_INT64_T": "CUCO_HOST_LONG_LONG",
    "MPI_FLOAT": "CUCO_HOST_FLOAT",
    "MPI_DOUBLE": "CUCO_HOST_DOUBLE",
    "MPI_SUM": "CUCO_HOST_SUM",
    "MPI_MAX": "CUCO_HOST_MAX",
    "MPI_MIN": "CUCO_HOST_MIN",
    "MPI_IN_PLACE": "CUCO_HOST_IN_PLACE",
}
MPI_NAME = re.compile(r"\bMPI_\w+")


def defines() -> list[str]:
    """The file-scope lines that let the region's MPI names read as the harness's."""
    return ["// MPI's datatype and reduction names, as the harness's host collectives (cuco_abi.h) take them"] + [
        f"#define {mpi} {ours}" for mpi, ours in MPI_NAMES.items()
    ]


def unsupported(name: str, args: list[str], macro: Callable[[str], str | None]) -> str | None:
    """Why the call cannot run as the harness's host collective, or None. `macro` gives the body of one of
    the program's macros (`MPI_REAL_TYPE` -> `MPI_FLOAT`), None where the program defines none."""
    call = HOST_CALLS.get(name)
    if call is None:
        return f"{name} is not one of {', '.join(HOST_CALLS)}"
    if len(args) != call.nargs:
        return f"{name} takes {call.nargs} arguments, this call has {len(args)}"
    for i in (*call.typed, 0, 1):
        if i < len(args) - 1:  # the communicator is the harness's whatever it is
            why = _unknown_name(args[i], macro, depth=0)
            if why is not None:
                return why
    return None


def _unknown_name(text: str, macro: Callable[[str], str | None], depth: int) -> str | None:
    for found in MPI_NAME.findall(text):
        if found in MPI_NAMES:
            continue
        body = macro(found) if depth < 8 else None
        if body is None:
            return f"{found} is not a datatype or reduction the harness's host collectives take"
        why = _unknown_name(body, macro, depth + 1)
        if why is not None:
            return why
    return None


def rewrite(name: str, args: list[str]) -> str:
    """The call as the harness's host collective: its arguments as written, the communicator the
    harness's (check `unsupported` first)."""
    return f"{HOST_CALLS[name].harness}({', '.join([*args[:-1], HOST_COMM])})"
