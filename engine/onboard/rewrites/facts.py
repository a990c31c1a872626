"""What the schedule rewrites need to know about a program, as one typed value.

The analysis says where the repeated region is, on which stream it runs and which macros check calls; this
module reads the region's statements from the user's own text (byte ranges, so a rewrite splices edits
into the files as written) and classifies each: device work enqueued on a stream, a host synchronisation,
host-only code. Statement-like macros without a semicolon (`POP_RANGE`, `PUSH_RANGE(...)`) are masked
before parsing, keeping every byte offset, so they do not merge with the next statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..source import call_args, call_name, cuda_parser, kernel_config, walk

HOST_SYNC_CALLS = {
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaMemcpy",
    "cudaMemcpy2D",
    "cudaMemset",
    "cudaMalloc",
    "cudaFree",
    "cudaMallocHost",
    "cudaFreeHost",
    "cudaStreamQuery",
    "cudaEventQuery",
    "cudaDeviceReset",
}
STREAM_ORDERED = {
    "cudaMemsetAsync",
    "cudaMemcpyAsync",
    "cudaMemcpy2DAsync",
    "cudaMemcpyPeerAsync",
    "cudaEventRecord",
    "cudaStreamWaitEvent",
    "cudaLaunchKernel",
    "cudaGraphLaunch",
    "ncclGroupStart",
    "ncclGroupEnd",
    "ncclSend",
    "ncclRecv",
    "ncclAllReduce",
    "ncclAllGather",
    "ncclReduceScatter",
    "ncclBroadcast",
    "ncclReduce",
    "ncclAlltoAll",
    "ncclBcast",
}
P2P = {"ncclSend", "ncclRecv"}
CONTROL_FLOW = re.compile(rb"\b(break|continue|return|goto)\b")


class FactsError(ValueError):
    """The program's text does not show what the rewrites need (the region, its statements)."""


@dataclass(frozen=True)
class Arg:
    text: str
    start: int
    end: int


@dataclass(frozen=True)
class Call:
    name: str
    args: tuple[Arg, ...]
    start: int
    end: int
    line: int


@dataclass(frozen=True)
class Stmt:
    start: int  # byte range in the region's file (the statement as written)
    end: int
    line: int
    text: str
    calls: tuple[Call, ...]
    device: bool  # enqueues work on a stream (an async call, a launch, a wrapper call)
    host_sync: bool  # waits for the device or for other ranks (MPI), or allocates/frees
    declares: tuple[str, ...]
    writes: tuple[str, ...]  # host names it assigns, increments, swaps, or hands out by address
    names: tuple[str, ...]  # every identifier it mentions
    masked_macro: bool = False
    sync_calls: tuple[str, ...] = ()  # what makes it a host synchronisation (followed into helpers)


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    written: bool  # a pointer to non-const: the launch may write through it
    pointer: bool
    stream: bool


@dataclass(frozen=True)
class Wrapper:
    """A host function of the program that launches a kernel: a launch the rewrites can call again with
    other arguments (a row range), since it computes its own grid from them."""

    name: str
    params: tuple[Param, ...]
    at: str


@dataclass
class ScheduleFacts:
    path: str  # the file holding the region
    texts: dict[str, bytes]  # every file of the program, as written
    loop_start: int  # the region's loop statement
    loop_end: int
    body_start: int  # just after the loop body's `{`
    body_end: int  # the loop body's `}`
    indent: str  # the body's statements' indentation
    loop_indent: str
    stream: str  # the region's stream
    stmts: tuple[Stmt, ...]
    cuda_check: str | None  # the user's macro around CUDA calls, if any
    nccl_check: str | None
    wrappers: dict[str, Wrapper]
    setup_at: int  # where set-up code goes: before the timer that precedes the loop
    comm_init: Call | None  # the one ncclCommInitRank of the file, if one
    comm_init_stmt: tuple[int, int] | None
    calls: tuple[Call, ...]  # every call of the region's file (allocation, free, ...)
    call_stmts: dict[int, tuple[int, int]] = field(default_factory=dict)  # call start -> its statement's range
    check_macros: tuple[str, ...] = ()
    members_at: int | None = None  # the harness's Program: where members go (None: the user's program)
    teardown_at: int | None = None
    program: dict[str, bytes] = field(default_factory=dict)  # the user's files (harness target: for wrappers)
    function: tuple[int, int] = (0, 0)  # the function that holds the region (its locals are the region's)
    after_loop_at: int = 0  # where teardown goes: after the loop and the timer's stop
    repeats: bool = True  # a loop; False: a timed straight-line section that runs once

    @property
    def text(self) -> bytes:
        return self.texts[self.path]

    def line_of(self, offset: int) -> int:
        return self.text.count(b"\n", 0, offset) + 1

    def at(self, offset: int) -> str:
        return f"{self.path}:{self.line_of(offset)}"

    def reread(self, texts: dict[str, bytes], edits) -> ScheduleFacts:
        """The facts of the same region in the edited files."""
        if self.members_at is not None:
            return build_harness_facts(texts, self.path, self.stream, list(self.check_macros), self.program)

        def moved(offset: int) -> int:
            shift = sum(
                len(e.text.encode()) - (e.end - e.start) for e in edits if e.path == self.path and e.end <= offset
            )
            return texts[self.path].count(b"\n", 0, offset + shift) + 1

        if not self.repeats:
            return build_section_facts(
                texts, self.path, moved(self.loop_start), moved(self.body_end), self.stream, list(self.check_macros)
            )
        return build_facts(texts, self.path, moved(self.loop_start), self.stream, list(self.check_macros))

    def wrap_cuda(self, call: str) -> str:
        return f"{self.cuda_check}({call});" if self.cuda_check else f"{call};"

    def wrap_nccl(self, call: str) -> str:
        return f"{self.nccl_check}({call});" if self.nccl_check else f"{call};"


# -- masking statement-like macros ------------------------------------------------------------------

_DEFINE = re.compile(rb"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)(\([^)]*\))?[ \t]*(.*?)$", re.M)


def statement_macros(data: bytes) -> set[str]:
    """Macros whose body is a statement or nothing (`{ ... }`, `do ... while (0)`, empty): written without a
    semicolon, they read to the parser as an expression that swallows the next statement."""
    names = set()
    for m in _DEFINE.finditer(data):
        body = m.group(3).strip()
        if not body or body.startswith(b"{") or body.startswith(b"do") or body.endswith(b"();") or body.endswith(b"\\"):
            if body.endswith(b"\\"):
                body = body.rstrip(b"\\").strip()
                if body and not body.startswith(b"{") and not body.startswith(b"do"):
                    continue
            names.add(m.group(1).decode())
    return names


def mask_macros(data: bytes, names: set[str]) -> tuple[bytes, dict[int, int]]:
    """`NAME` or `NAME(...)` not followed by `;`, replaced by `;` and spaces (newlines kept, so every
    offset and line stays). Returns the masked text and the masked ranges (start -> end)."""
    out = bytearray(data)
    masked: dict[int, int] = {}
    for name in names:
        for m in re.finditer(rb"(?<![\w#])" + re.escape(name.encode()) + rb"\b", data):
            line_start = data.rfind(b"\n", 0, m.start()) + 1
            if data[line_start : m.start()].lstrip().startswith(b"#"):
                continue  # its own #define, or an #ifdef
            if b"//" in data[line_start : m.start()]:
                continue  # in a comment (one cut short may leave its parentheses open)
            end = m.end()
            rest = data[end:]
            stripped = rest.lstrip(b" \t")
            if stripped.startswith(b"("):
                depth, i = 0, end + (len(rest) - len(stripped))
                while i < len(data):
                    c = data[i : i + 1]
                    depth += c == b"("
                    depth -= c == b")"
                    i += 1
                    if depth == 0:
                        break
                end = i
            if data[end:].lstrip().startswith(b";"):
                continue
            out[m.start()] = ord(";")
            for i in range(m.start() + 1, end):
                if out[i] != ord("\n"):
                    out[i] = ord(" ")
            masked[m.start()] = end
    return bytes(out), masked


# -- reading the text ---------------------------------------------------------------------------------


def source_text(data: bytes, n) -> str:
    return data[n.start_byte : n.end_byte].decode("utf-8", "replace")


def calls_in(data: bytes, node) -> list[Call]:
    out = []
    for n in walk(node):
        if n.type != "call_expression":
            continue
        name = call_name(n, _Src(data))
        if name is None:
            continue
        args = tuple(Arg(source_text(data, a), a.start_byte, a.end_byte) for a in call_args(n))
        out.append(Call(name, args, n.start_byte, n.end_byte, n.start_point[0] + 1))
    return out


class _Src:
    """The little of SourceFile that call_name needs."""

    def __init__(self, data: bytes):
        self.data = data

    def text(self, node) -> str:
        return source_text(self.data, node)


def _written_names(data: bytes, node) -> list[str]:
    out = []
    for n in walk(node):
        if n.type == "assignment_expression":
            left = n.child_by_field_name("left")
            if left is not None and left.type == "identifier":
                out.append(source_text(data, left))
        elif n.type == "update_expression":
            arg = n.child_by_field_name("argument")
            if arg is not None and arg.type == "identifier":
                out.append(source_text(data, arg))
        elif n.type == "pointer_expression" and source_text(data, n).startswith("&"):
            arg = n.child_by_field_name("argument")
            if arg is not None and arg.type == "identifier":
                out.append(source_text(data, arg))
        elif n.type == "call_expression" and call_name(n, _Src(data)) == "swap":
            out += [source_text(data, a) for a in call_args(n) if a.type == "identifier"]
    return out


def _declared(data: bytes, node) -> list[str]:
    if node.type != "declaration":
        return []
    out = []
    for d in node.children_by_field_name("declarator"):
        n = d
        while n is not None and n.type != "identifier":
            n = n.child_by_field_name("declarator")
        if n is not None:
            out.append(source_text(data, n))
    return out


def _wrappers(texts: dict[str, bytes]) -> dict[str, Wrapper]:
    out: dict[str, Wrapper] = {}
    for path, data in texts.items():
        tree = cuda_parser().parse(data)
        for fn in walk(tree.root_node):
            if fn.type != "function_definition":
                continue
            body = fn.child_by_field_name("body")
            head = source_text(data, fn)[:200]
            if (
                body is None
                or "__global__" in head
                or not any(kernel_config(c) is not None for c in walk(body) if c.type == "call_expression")
            ):
                continue
            decl = fn.child_by_field_name("declarator")
            while decl is not None and decl.type != "function_declarator":
                decl = decl.child_by_field_name("declarator")
            if decl is None:
                continue
            name_node = decl.child_by_field_name("declarator")
            params = []
            plist = decl.child_by_field_name("parameters")
            for p in plist.named_children if plist is not None else []:
                if p.type != "parameter_declaration":
                    continue
                ptext = source_text(data, p)
                ids = [source_text(data, i) for i in walk(p) if i.type == "identifier"]
                pointer = "*" in ptext
                const_pointee = pointer and "const" in ptext.split("*")[0]
                params.append(
                    Param(
                        ids[-1] if ids else "", ptext, pointer and not const_pointee, pointer, "cudaStream_t" in ptext
                    )
                )
            name = source_text(data, name_node)
            out[name] = Wrapper(name, tuple(params), f"{path}:{fn.start_point[0] + 1}")
    return out


def _helper_calls(texts: dict[str, bytes]) -> dict[str, set[str]]:
    """Every function of the program with the names it calls, transitively (a helper that calls a
    helper that allocates, allocates)."""
    direct: dict[str, set[str]] = {}
    for data in texts.values():
        tree = cuda_parser().parse(data)
        for fn in walk(tree.root_node):
            if fn.type != "function_definition" or fn.child_by_field_name("body") is None:
                continue
            decl = fn.child_by_field_name("declarator")
            while decl is not None and decl.type != "function_declarator":
                decl = decl.child_by_field_name("declarator")
            if decl is None or decl.child_by_field_name("declarator") is None:
                continue
            name = source_text(data, decl.child_by_field_name("declarator")).split("::")[-1]
            direct.setdefault(name, set()).update(c.name for c in calls_in(data, fn.child_by_field_name("body")))
    closed = {}
    for name in direct:
        seen, todo = set(), [name]
        while todo:
            for callee in direct.get(todo.pop(), ()):
                if callee not in seen:
                    seen.add(callee)
                    if callee in direct and callee != name:
                        todo.append(callee)
        closed[name] = seen
    return closed


def _check_macro(stmts_calls: list[Call], family: str, macros: list[str]) -> str | None:
    for c in stmts_calls:
        if c.name in macros and len(c.args) == 1 and c.args[0].text.lstrip().startswith(family):
            return c.name
    return None


_TIMER_STOPS = re.compile(
    r"\b(MPI_Wtime|MPI_Barrier|cudaEventRecord|cudaEventSynchronize|cudaDeviceSynchronize|"
    r"cudaStreamSynchronize|cudaEventElapsedTime|chrono|clock_gettime|gettimeofday)\b"
)
_TIMER_STARTS = re.compile(r"\b(MPI_Wtime|MPI_Barrier|cudaEventRecord|chrono|clock_gettime|gettimeofday)\b")


def _indent_of(data: bytes, offset: int) -> str:
    line_start = data.rfind(b"\n", 0, offset) + 1
    seg = data[line_start:offset]
    return seg[: len(seg) - len(seg.lstrip(b" \t"))].decode()


def build_facts(
    texts: dict[str, bytes], path: str, region_line: int, stream: str | None, check_macros: list[str]
) -> ScheduleFacts:
    """The facts for the loop that starts on `region_line` of `path` (the analysis's region)."""
    data = texts[path]
    masked, masked_at = mask_macros(data, statement_macros(b"".join(texts.values())))
    tree = cuda_parser().parse(masked)
    loop = next(
        (
            n
            for n in walk(tree.root_node)
            if n.type in ("for_statement", "while_statement", "do_statement") and n.start_point[0] + 1 == region_line
        ),
        None,
    )
    if loop is None:
        raise FactsError(f"{path}:{region_line}: no loop starts on this line")
    body = loop.child_by_field_name("body")
    if body is None or body.type != "compound_statement":
        raise FactsError(f"{path}:{region_line}: the loop's body is not a block")
    if not stream:
        raise FactsError(f"{path}:{region_line}: the analysis names no stream for the region")
    setup_at, after_at = _around(data, masked, masked_at, loop, loop)
    facts = _facts(texts, path, masked, masked_at, tree, loop, body, stream, check_macros, setup_at=setup_at)
    facts.after_loop_at = after_at
    return facts


def _around(data: bytes, masked: bytes, masked_at: dict[int, int], first, last) -> tuple[int, int]:
    """Where set-up and teardown go around the region from `first` to `last` (statements of one block)."""
    # Set-up goes before the statements just above the loop that start its timer (so the timer does not
    # count it): a barrier, a clock read, a timing event.
    siblings = [c for c in first.parent.named_children if c.type != "comment"] if first.parent else []
    setup_node = first
    idx = next((i for i, c in enumerate(siblings) if c.start_byte == first.start_byte), None)
    end = next((i for i, c in enumerate(siblings) if c.start_byte == last.start_byte), None)
    if idx is not None:
        j = idx - 1
        while j >= 0 and (
            siblings[j].start_byte in masked_at or _TIMER_STARTS.search(source_text(masked, siblings[j]))
        ):
            setup_node = siblings[j]
            j -= 1
    # Teardown goes after the statements just below the loop that stop its timer (the device is idle
    # there, and the timer does not count it).
    teardown_node = last
    if end is not None:
        j = end + 1
        while j < len(siblings) and (
            siblings[j].start_byte in masked_at or _TIMER_STOPS.search(source_text(masked, siblings[j]))
        ):
            teardown_node = siblings[j]
            j += 1
    return data.rfind(b"\n", 0, setup_node.start_byte) + 1, masked_at.get(
        teardown_node.start_byte, teardown_node.end_byte
    )


def build_section_facts(
    texts: dict[str, bytes], path: str, start_line: int, end_line: int, stream: str | None, check_macros: list[str]
) -> ScheduleFacts:
    """The facts for a timed straight-line section: the statements of one block between the timer statement
    on `start_line` and the one on `end_line` (the analysis's region of kind `section`). It runs once."""
    data = texts[path]
    masked, masked_at = mask_macros(data, statement_macros(b"".join(texts.values())))
    tree = cuda_parser().parse(masked)
    block = next(
        (
            n
            for n in walk(tree.root_node)
            if n.type == "compound_statement"
            and any(c.start_point[0] + 1 == start_line for c in n.named_children)
            and any(c.start_point[0] + 1 == end_line for c in n.named_children)
        ),
        None,
    )
    if block is None:
        raise FactsError(f"{path}:{start_line}: no block holds statements on lines {start_line} and {end_line}")
    if not stream:
        raise FactsError(f"{path}:{start_line}: the analysis names no stream for the region")
    kids = [c for c in block.named_children if c.type != "comment"]
    first = next(c for c in kids if c.start_point[0] + 1 == start_line)
    last = next(c for c in kids if c.start_point[0] + 1 == end_line)
    inner = [c for c in kids if first.start_byte < c.start_byte < last.start_byte]
    if not inner:
        raise FactsError(f"{path}:{start_line}: the timed section holds no statement")
    setup_at, after_at = _around(data, masked, masked_at, first, last)
    facts = _facts(
        texts,
        path,
        masked,
        masked_at,
        tree,
        first,
        block,
        stream,
        check_macros,
        setup_at=setup_at,
        children=inner,
        span=(
            first.start_byte,
            masked_at.get(last.start_byte, last.end_byte),
            masked_at.get(first.start_byte, first.end_byte),
            last.start_byte,
        ),
    )
    facts.after_loop_at = after_at
    facts.repeats = False
    return facts


def _function(tree, data: bytes, name: str):
    for fn in walk(tree.root_node):
        if fn.type == "function_definition":
            decl = fn.child_by_field_name("declarator")
            while decl is not None and decl.type != "function_declarator":
                decl = decl.child_by_field_name("declarator")
            if decl is not None and source_text(data, decl.child_by_field_name("declarator")) == name:
                return fn
    return None


def build_harness_facts(
    texts: dict[str, bytes], path: str, stream: str, check_macros: list[str], program: dict[str, bytes] | None = None
) -> ScheduleFacts:
    """The facts for a workload's candidate: its Program's run() is one iteration of the region; state
    goes in as members, set-up at the end of setup(), teardown at the start of teardown(). `program`: the
    user's files, where the launch wrappers the candidate declares are defined."""
    data = texts[path]
    masked, masked_at = mask_macros(data, statement_macros(b"".join(texts.values())))
    tree = cuda_parser().parse(masked)
    run, setup, teardown = (_function(tree, masked, n) for n in ("run", "setup", "teardown"))
    if run is None or setup is None or teardown is None:
        raise FactsError(f"{path}: no Program with setup(), run() and teardown()")
    body = run.child_by_field_name("body")
    rets = [c for c in setup.child_by_field_name("body").named_children if c.type == "return_statement"]
    if not rets:
        raise FactsError(f"{path}: setup() does not end in a return")
    setup_at = data.rfind(b"\n", 0, rets[-1].start_byte) + 1
    facts = _facts(
        texts, path, masked, masked_at, tree, run, body, stream, check_macros, setup_at=setup_at, program=program or {}
    )
    facts.program = dict(program or {})
    facts.members_at = data.rfind(b"\n", 0, setup.start_byte) + 1
    facts.teardown_at = teardown.child_by_field_name("body").start_byte + 1
    return facts


def _facts(
    texts,
    path,
    masked,
    masked_at,
    tree,
    loop,
    body,
    stream,
    check_macros,
    setup_at,
    program: dict[str, bytes] | None = None,
    children=None,
    span=None,
) -> ScheduleFacts:
    """`children`, `span`: a section's statements and (start, end, body start, body end), instead of the
    loop's body."""
    data = texts[path]
    children = body.named_children if children is None else children
    loop_start, loop_end, body_start, body_end = span or (
        loop.start_byte,
        loop.end_byte,
        body.start_byte + 1,
        body.end_byte - 1,
    )
    wrappers = {**_wrappers(program or {}), **_wrappers(texts)}
    helpers = {**_helper_calls(program or {}), **_helper_calls(texts)}
    stmts = []
    for n in children:
        if n.type == "comment" or (n.type == "return_statement" and n == children[-1]):
            continue
        calls = calls_in(masked, n)
        names = tuple(sorted({source_text(masked, i) for i in walk(n) if i.type == "identifier"}))
        is_masked = n.start_byte in masked_at
        launches = any(kernel_config(c) is not None for c in walk(n) if c.type == "call_expression")
        device = (
            launches
            or any(c.name in STREAM_ORDERED or c.name in wrappers for c in calls)
            or bool(stream and ({stream, "cuco_comm_stream"} & set(names)) and not is_masked)
        )
        reached = {c.name for c in calls}
        for c in calls:
            reached |= helpers.get(c.name, set())
        syncs = tuple(sorted(n for n in reached if n in HOST_SYNC_CALLS or n.startswith("MPI_")))
        host_sync = bool(syncs)
        end = masked_at.get(n.start_byte, n.end_byte)
        local = {x for d in walk(n) if d.type == "declaration" and d is not n for x in _declared(masked, d)}
        stmts.append(
            Stmt(
                n.start_byte,
                end,
                n.start_point[0] + 1,
                data[n.start_byte : end].decode(),
                tuple(calls),
                device and not is_masked,
                host_sync,
                tuple(_declared(masked, n)),
                tuple(sorted(set(_written_names(masked, n)) - local)),
                tuple(sorted(set(names) - local)),
                is_masked,
                syncs,
            )
        )
    file_calls = calls_in(masked, tree.root_node)
    macros = list(check_macros)
    all_calls = [c for s in stmts for c in s.calls] + file_calls
    inits = [c for c in file_calls if c.name == "ncclCommInitRank"]
    call_stmts = {}
    for n in walk(tree.root_node):
        if n.type == "call_expression":
            s = n
            while s is not None and s.type not in ("expression_statement", "declaration"):
                s = s.parent
            if s is not None:
                call_stmts[n.start_byte] = (s.start_byte, s.end_byte)
    first = next((c for c in children if c.type != "comment"), None)
    init = inits[0] if len(inits) == 1 else None
    fn = loop
    while fn is not None and fn.type != "function_definition":
        fn = fn.parent
    return ScheduleFacts(
        path=path,
        texts=dict(texts),
        loop_start=loop_start,
        loop_end=loop_end,
        body_start=body_start,
        body_end=body_end,
        indent=_indent_of(data, first.start_byte) if first is not None else _indent_of(data, loop.start_byte) + "    ",
        loop_indent=_indent_of(data, loop.start_byte),
        stream=stream,
        stmts=tuple(stmts),
        cuda_check=_check_macro(all_calls, "cuda", macros),
        nccl_check=_check_macro(all_calls, "nccl", macros),
        wrappers=wrappers,
        setup_at=setup_at,
        comm_init=init,
        comm_init_stmt=call_stmts.get(init.start) if init else None,
        calls=tuple(file_calls),
        call_stmts=call_stmts,
        check_macros=tuple(macros),
        function=(fn.start_byte, fn.end_byte) if fn is not None else (0, len(data)),
    )


def facts_from_analysis(prog) -> ScheduleFacts:
    """The narrow seam to the analysis: its region (file:line), the region's stream and the checking
    macros it saw through; everything else is read from the files as written."""
    if not prog.region:
        raise FactsError(f"{prog.files[0]}: the analysis found no repeated region")
    kind = prog.region.get("kind")
    if kind not in ("for", "while", "do", "section"):
        raise FactsError(
            f"{prog.region['at']}: the region is a {kind or 'non-loop'} that runs once; the schedule "
            "rewrites transform a loop that repeats"
        )
    if prog.region.get("replays"):
        raise FactsError(
            f"{prog.region['at']}: the region replays CUDA graphs captured at "
            f"{prog.region['replays'][0]['at']}; the schedule rewrites transform the work as launched"
        )
    path, line = prog.region["at"].rsplit(":", 1)
    # The files as the user wrote them (the analysis may read a preprocessed text): edits land in these.
    texts = {f: Path(f).read_bytes() for f in prog.files}
    if path not in texts:
        raise FactsError(f"{prog.region['at']}: the region is not in one of the files given")
    macros = list(prog.check_macros)
    for data in texts.values():  # the analysis lists the macros it saw in main(); the text may have more
        macros += [m.decode() for m in re.findall(rb"#\s*define\s+(\w+)\(\w+\)", data)]
    if kind == "section":
        end_path, end_line = prog.region["end"].rsplit(":", 1)
        return build_section_facts(texts, path, int(line), int(end_line), prog.timed_stream, sorted(set(macros)))
    return build_facts(texts, path, int(line), prog.timed_stream, sorted(set(macros)))
