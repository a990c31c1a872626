"""The operations of a program in program order: main()'s calls statement by statement, followed into the
helper functions and lambdas that communicate (their pointer parameters bound to the caller's buffers) and
through the tables and virtual methods that dispatch to them, every NCCL, CUDA and MPI call recorded with
the chain of calls that reaches it. A collective called through an expression the analysis cannot follow is
an error naming the place and what to do."""

from __future__ import annotations

from dataclasses import dataclass, field

from remote.errors import InputError

from . import api
from .dispatch import Dispatch, inside_lambda, lambda_parameters, resolve, unresolved_message
from .hidden import WHAT_TO_DO, has_comm_call
from .model import Op, Unresolved
from .op_details import describe
from .source import SourceFile, call_args, call_name, identifiers, kernel_config
from .variables import Pointers
from .virtuals import Virtuals
from .wrappers import param_names

MAX_CALL_DEPTH = 8
FREES = {"cudaFree", "ncclMemFree", "cudaFreeHost", "ncclCommDestroy", "ncclCommFinalize"}
# the kind of a call by its name, in the order asked (cudaGraphLaunch is a launch API too); MPI's come between
KINDS_BEFORE_MPI = (
    (api.GRAPH_LAUNCH, "graph_launch"),  # what it launches is the capture's (followed there)
    (api.LAUNCH_API, "launch_api"),
    ({"ncclSend", "ncclRecv"} & set(api.NCCL_COMM), "p2p"),
    (set(api.NCCL_COMM) - {"ncclSend", "ncclRecv"}, "collective"),
    (api.NCCL_GROUP, "group"),
    (api.NCCL_INIT | {"ncclGetUniqueId"}, "comm_init"),
    ({*api.DEVICE_ALLOC, *api.HOST_ALLOC}, "alloc"),
    (set(api.MEMCPY), "memcpy"),
    (api.MEMSET, "memset"),
    (api.SYNCS - {"cudaEventSynchronize", "cudaStreamWaitEvent"}, "sync"),
    (api.EVENTS, "event"),
    (api.STREAM_CREATE, "stream"),
)
KINDS_AFTER_MPI = ((FREES, "free"), (api.DEVICE_SELECT, "device"))


@dataclass(frozen=True)
class CallTargets:
    """What a call of the program may reach, and how the analysis follows it."""

    functions: dict  # name -> (source, definition), `Class::method` for overrides
    macros: dict
    helpers: set[str]  # host functions that communicate: followed into
    wrappers: dict  # host functions that launch a kernel: the launch of that kernel
    lambdas: dict  # variables holding lambdas: followed where they are called
    holders: dict  # variables and tables holding functions
    constants: dict[str, int]  # integer constants: a table's index
    virtuals: Virtuals | None
    entry: str | None  # --entry: the target a function-pointer call stands for
    dispatch_holders: set[str]  # the tables --entry's target is called through


@dataclass
class CollectedOps:
    """The operations in program order, the helper calls followed and the calls resolved through a table."""

    ops: list[Op] = field(default_factory=list)
    helper_calls: list[dict] = field(default_factory=list)
    dispatches: list[Dispatch] = field(default_factory=list)


def communicating_helpers(functions: dict, kernels: dict) -> set[str]:
    """Host functions (not main, not kernels) that communicate, directly or through another such function:
    the analysis follows calls into them."""
    found = {n for n, (s, f) in functions.items() if n != "main" and n not in kernels and has_comm_call(s, f)}
    changed = True
    while changed:
        changed = False
        for n, (s, f) in functions.items():
            if n in found or n == "main" or n in kernels:
                continue  # a launch wrapper that also communicates (through a helper) is followed too
            if any(call_name(c, s) in found for c in s.nodes("call_expression", f)):
                found.add(n)
                changed = True
    return found


def collect_ops(
    main_src: SourceFile, main_body, targets: CallTargets, pointers: Pointers, unresolved: list[Unresolved]
) -> CollectedOps:
    """main()'s operations in program order (pointer parameters of followed calls bound in `pointers`)."""
    collector = _Collector(targets, pointers, unresolved)
    collector.collect_in(main_src, main_body.named_children, (), 0, None)
    return collector.out


def op_kind(call, name: str, wrappers: dict, macros: dict) -> str | None:
    """What kind of operation a call is (None: not one the analysis records)."""
    if kernel_config(call) is not None or name in wrappers:
        return "kernel"
    kind = next((k for names, k in KINDS_BEFORE_MPI if name in names), None)
    if kind is None and name.startswith("MPI_") and name not in macros:
        return "mpi"
    return kind or next((k for names, k in KINDS_AFTER_MPI if name in names), None)


class _Collector:
    def __init__(self, targets: CallTargets, pointers: Pointers, unresolved: list[Unresolved]):
        self.t, self.pointers, self.unresolved = targets, pointers, unresolved
        self.out = CollectedOps()

    def collect_in(self, src, stmts, chain: tuple, depth: int, top) -> None:
        """The calls of these statements in program order; a helper function that communicates is
        followed into its body (in any given file), its pointer parameters bound to the caller's
        buffers, every operation keeping the chain of calls that reaches it."""
        for stmt in stmts:
            for n in src.nodes("call_expression", stmt):
                if inside_lambda(n, stmt):
                    continue  # a lambda's calls run where it is called (followed there)
                through, name = self._callee(src, n)
                if name is None or self._followed(src, n, name, chain, depth, top or stmt):
                    continue
                self._record(src, n, name, through, chain, top or stmt)

    def _callee(self, src, n) -> tuple[str | None, str | None]:
        """(what the call goes through, if a table or pointer; the function it runs)."""
        name = call_name(n, src)
        fn = n.child_by_field_name("function")
        through = None
        if self.t.entry and fn is not None and any(i.text.decode() in self.t.dispatch_holders for i in identifiers(fn)):
            through, name = fn.text.decode(), self.t.entry  # a call through the table: --entry's target
        if through is None and (name is None or name in self.t.holders):
            dispatch = self._dispatch(src, n, name)
            if dispatch is not None:
                through, name = dispatch.through, dispatch.target
        if name is None and any(i.text.decode() in api.NCCL_COMM for i in identifiers(n)):
            raise InputError(
                src.at(n),
                "call",
                f"a call through an expression ({src.text(n)[:50]!r}) the analysis cannot follow; {WHAT_TO_DO}",
            )
        return through, name

    def _dispatch(self, src, n, name) -> Dispatch | None:
        """A call through a table, pointer or virtual method that may reach a communicating helper."""
        dispatch = resolve(src, n, self.t.holders, self.t.constants, self.t.entry)
        if dispatch is None and name is None and self.t.virtuals is not None:
            dispatch = self.t.virtuals.resolve(src, n, self.t.entry)
        if dispatch is None or not any(c in self.t.helpers for c, _ in dispatch.candidates):
            return None
        if dispatch.target is None:
            raise InputError(dispatch.at, "call", unresolved_message(dispatch))
        self.out.dispatches.append(dispatch)
        self.unresolved.append(
            Unresolved(
                dispatch.at,
                f"a call through {dispatch.through}",
                f"runs {dispatch.target} ({dispatch.how}); the workload calls it directly",
            )
        )
        return dispatch

    def _followed(self, src, call, name: str, chain: tuple, depth: int, top) -> bool:
        """Follow a call of a lambda or communicating helper (not recursively, not too deep)."""
        if name not in self.t.lambdas and name not in self.t.helpers:
            return False
        if depth >= MAX_CALL_DEPTH or any(call_name(c, s) == name for s, c in chain):
            return False
        if name in self.t.lambdas:
            fsrc, fn = self.t.lambdas[name]
            params, pointers = lambda_parameters(fsrc, fn)
        else:
            fsrc, fn = self.t.functions[name]
            params, pointers = param_names(fsrc, fn)
        self.pointers.bind(params, pointers, call_args(call))
        self.out.helper_calls.append(
            {
                "name": name,
                "at": src.at(call),
                "defined_at": fsrc.at(fn),
                "args": [a.text.decode() for a in call_args(call)],
            }
        )
        body = fn.child_by_field_name("body")
        self.collect_in(fsrc, body.named_children if body is not None else [], chain + ((src, call),), depth + 1, top)
        return True

    def _record(self, src, n, name: str, through: str | None, chain: tuple, top) -> None:
        kind = op_kind(n, name, self.t.wrappers, self.t.macros)
        if kind is None:
            return
        wrapper = self.t.wrappers.get(name) if kernel_config(n) is None else None
        if wrapper is not None:  # a host wrapper: the launch of the kernel it wraps
            kernels_launched = {launch.kernel for launch in wrapper.launches}
            name = wrapper.launches[0].kernel if len(kernels_launched) == 1 else wrapper.name
        op = Op(f"op{len(self.out.ops)}", kind, name, src.at(n), n, top)
        op.via = wrapper
        op.chain = chain + ((src, n),)
        op.src = src
        describe(op)
        if through is not None:
            op.detail["through"] = through
        self.out.ops.append(op)
