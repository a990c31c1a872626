"""The program's own ways of checking a CUDA or NCCL status: function-like macros that wrap a call
(`CUDACHECK(cudaMalloc(...))`) and functions whose first parameter is a status (`check(cudaMalloc(...), "what")`).
The analysis sees through both; the workload maps them to the harness's error return."""

from __future__ import annotations

from .model import Unresolved
from .source import SourceFile, call_args, call_name

STATUS_TYPES = ("cudaError_t", "cudaError", "ncclResult_t", "CUresult", "cublasStatus_t", "cusparseStatus_t")


def check_macros(main_src: SourceFile, main_body, macros: dict) -> list[str]:
    """Function-like macros of one parameter that wrap a call in main(): the workload re-defines them to
    return the error to the harness."""
    used: set[str] = set()
    for n in main_src.nodes("call_expression", main_body):
        name = call_name(n, main_src)
        args = call_args(n)
        if name is not None and name in macros and len(args) == 1 and args[0].type == "call_expression":
            used.add(name)
    return sorted(used)


def check_functions(bodies: list, functions: dict, unresolved: list[Unresolved]) -> list[str]:
    """The status-checking functions called with a call as their status in the bodies followed, each noted
    as mapped to the harness's error return."""
    found: list[str] = []
    for src, body in bodies:
        for n in src.nodes("call_expression", body):
            name = call_name(n, src)
            args = call_args(n)
            if name is None or name in found or not args or args[0].type != "call_expression":
                continue
            fn = functions.get(name)
            if fn is not None and _checks_a_status(*fn):
                found.append(name)
                unresolved.append(
                    Unresolved(
                        fn[0].at(fn[1]),
                        f"{name}() checks a CUDA/NCCL status",
                        "mapped to the harness's error return: in the workload a failed call it checks ends "
                        "the call with that error instead of running its body",
                    )
                )
    return found


def _checks_a_status(src: SourceFile, fn) -> bool:
    """A function whose first parameter is a CUDA/NCCL/library status (`void check(cudaError_t e, ...)`)."""
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    params = decl.child_by_field_name("parameters") if decl is not None else None
    first = next((p for p in params.named_children if p.type == "parameter_declaration"), None) if params else None
    kind = first.child_by_field_name("type") if first is not None else None
    return kind is not None and src.text(kind) in STATUS_TYPES
