"""The program model the analysis builds: operations in program order, buffers, communicators, the
repeated region, size parameters, and what could not be resolved. `init` scaffolds from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tree_sitter import Node

    from .source import SourceFile
    from .wrappers import Wrapper


class RegionNode(Protocol):
    """The repeated region: a loop's syntax node, or a timed section of straight-line statements that
    stands where a loop node stands (loops.Section)."""

    @property
    def start_byte(self) -> int: ...

    @property
    def end_byte(self) -> int: ...

    def child_by_field_name(self, name: str, /) -> RegionNode | None: ...


@dataclass
class Var:
    """A local variable of main() (or a file-scope constant)."""

    name: str
    type: str  # the declared type, qualifiers dropped (`size_t`, `float*`, `std::vector<size_t>`)
    base_type: str  # without pointer stars (`float`)
    pointer: bool
    array: str | None  # the array declarator's size text, for `T name[N]`
    init: Node | None  # the initializer node (expression, argument_list, initializer_list) or None
    decl: Node  # the declaration node
    line: int
    top_level: bool  # a direct statement of main's body
    ctor_args: str | None = None  # `T name(args)` (parsed as a function declarator): the args text
    pos: int = 0  # byte offset of the declarator (program order)


@dataclass(eq=False)
class Op:
    id: str
    kind: str  # kernel | collective | p2p | group | memcpy | memset | event | sync | mpi | ...
    name: str
    at: str
    node: Node  # the call node
    stmt: Node  # the statement of main's body (top level) that holds it
    in_region: bool = False
    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    detail: dict = field(default_factory=dict)
    via: Wrapper | None = None  # the host wrapper (wrappers.Wrapper) a kernel is launched through
    chain: tuple = ()  # (SourceFile, call node) from main() down to this call (helpers followed)
    src: SourceFile | None = None  # the SourceFile of `node`


@dataclass
class Buffer:
    name: str
    at: str
    alloc: str
    elem_type: str
    size: str  # bytes expression
    count: str | None  # elements expression, where the bytes are `count * sizeof(T)`
    role: str = "unused"  # input | output | intermediate | carried | unused
    writers: list[str] = field(default_factory=list)
    readers: list[str] = field(default_factory=list)
    alloc_stmt: Node | None = None


@dataclass
class Unresolved:
    at: str
    what: str
    hint: str

    def as_json(self) -> dict:
        return {"at": self.at, "what": self.what, "hint": self.hint}


@dataclass
class Program:
    files: list[str]
    sources: list  # SourceFile objects (main's first)
    main_src: SourceFile
    main: Node  # the function_definition node of main()
    vars: dict[str, Var]
    ops: list[Op]
    buffers: dict[str, Buffer]
    communicators: list[dict]
    ranks: dict
    region: dict | None
    region_node: RegionNode | None
    params: list[dict]
    check_macros: list[str]
    kernels: dict[str, object]  # kernel name -> (SourceFile, function_definition)
    kernel_access: dict[str, list[str]]  # kernel name -> per parameter: "r" | "w" | "rw" | ""
    timed_stream: str | None
    unresolved: list[Unresolved] = field(default_factory=list)
    opportunities: list[dict] = field(default_factory=list)
    dataflow: list[dict] = field(default_factory=list)
    preprocessing: dict = field(default_factory=dict)
    helper_calls: list[dict] = field(default_factory=list)  # calls followed into helper functions
    flag_notes: list[str] = field(default_factory=list)  # build flags init changed or cannot honour
    # the region's host MPI collectives init runs as the harness's: "FILE:LINE: MPI_Allreduce -> cuco_host_allreduce"
    host_collectives: list[str] = field(default_factory=list)
    dispatches: list = field(default_factory=list)  # calls through function pointers and tables (dispatch.py)
    # the program's status-checking functions (in check_macros too): re-defined like its check macros
    check_functions: list[str] = field(default_factory=list)
    captures: list = field(default_factory=list)  # (SourceFile, node) of the captures a replay region launches
    init_blockers: list[str] = field(
        default_factory=list
    )  # why `cuco init` cannot write this one yet   # flags, conditional branches taken, missing headers
