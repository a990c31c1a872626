"""`cuco init`: a workload folder for the CUDA harness from the analysis of a user's program.

  candidate.cu   the user's kernels (EVOLVE-BLOCK `kernels`) and the repeated region behind the ABI
                 (EVOLVE-BLOCK `schedule`, with the design-space annotation and knobs)
  baseline.cu    the same code, frozen (cuco_baseline_*), plus run_compute (the region without its
                 collectives) and run_comm (without its kernels) for the overlap bound
  problem.cu     the buffers per config, inputs from the harness's seed, and verification of every rank's
                 outputs against the frozen baseline run in the same process (bit-exact for what only
                 data movement produced, the dtype tolerance for computed values)
  workload.yaml  configs from the program's sizes (one hidden at other sizes), tolerances, design space,
                 the LLM's task text written from the analysis
  checks/        two candidates the workload's verification must reject, so that a workload that would
                 accept anything is caught before a search trusts it: do_nothing.cu (run() returns at
                 once) and skip_comm.cu (the region without its collectives); `cuco validate` builds them,
                 and on GPUs both must verify incorrect

The folder is written to a temporary sibling and renamed into place, so an existing folder is never
overwritten and a failure leaves nothing half-written.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.workload import INSTALLED_PREFIX
from remote.errors import InputError

from . import api, workload_text
from .program_text import TODO, ProgramWriter
from .source import call_name, declarator_name, function_declarator, walk
from .virtuals import find_method, free_name, members_todo, specifier_edits

MAX_BUFFERS = 8
CHECKS = {"do_nothing": "checks/do_nothing.cu", "skip_comm": "checks/skip_comm.cu"}  # must verify incorrect


@dataclass
class InitResult:
    name: str
    root: Path
    todos: list[str] = field(default_factory=list)  # CUCO-TODO markers written into the files
    notes: list[str] = field(default_factory=list)  # what the analysis could not resolve (file:line)
    files: dict[str, str] = field(default_factory=dict)


def write_workload(prog, out: Path, name: str, ranks: int) -> InitResult:
    out = Path(out)
    if out.exists():
        raise InputError(
            str(out), "-o", "already exists; init never writes over a folder: remove it or pass another -o DIR"
        )
    if not _valid_name(name):
        raise InputError(name, "--name", "must match [a-z0-9_-]+")
    files, todos = render_workload(prog, name, ranks, out)
    notes = [f"{u.at}: {u.what}" for u in prog.unresolved] + _headers_not_given(prog)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for rel, text in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text)
        os.rename(tmp, out)  # atomic on one file system; fails if out appeared meanwhile
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise InputError(str(out), "-o", f"cannot write the workload there ({exc})") from None
    return InitResult(name, out, todos, notes, files)


def _headers_not_given(prog) -> list[str]:
    """The program's own headers (`#include "x.h"`, found beside the file) that are not among the files
    given: the workload's build does not see the program's folder, so what they declare is missing there."""
    given = {Path(s.path).name for s in prog.sources}
    out = []
    for src in prog.sources:
        for node in src.tree.root_node.named_children:
            text = src.text(node)
            if node.type != "preproc_include" or '"' not in text:
                continue
            name = _included_name(text)
            if name not in given and (Path(src.path).parent / text.split('"')[1]).is_file():
                out.append(
                    f"{src.at(node)}: {name} is your program's header but not among the files given; pass it "
                    "with them (its types and helpers are carried), or the workload does not build"
                )
    return out


def _valid_name(name: str) -> bool:
    return bool(name) and all(c.isdigit() or c in "_-" or "a" <= c <= "z" for c in name)


def render_workload(prog, name: str, ranks: int, out: Path) -> tuple[dict[str, str], list[str]]:
    if not any(o.kind in ("collective", "p2p") for o in prog.ops):
        at = next((c["at"] for c in prog.communicators), prog.main_src.path)
        raise InputError(
            at,
            "NCCL",
            "the program sets up a communicator but makes no NCCL communication call "
            "(ncclAllReduce, ncclSend, ...): there is nothing to overlap and no workload to write",
        )
    if not any(o.kind == "kernel" for o in prog.ops):
        calls = sorted({o.name for o in prog.ops if o.kind in ("collective", "p2p")})
        raise InputError(
            prog.main_src.path,
            "kernels",
            f"no kernel launch: nothing for the communication ({', '.join(calls) or 'none'}) to "
            "overlap with, so there is no workload to write; cuco optimises programs whose kernels "
            "and NCCL calls can overlap",
        )
    if prog.init_blockers:
        raise InputError(
            prog.region["at"] if prog.region else prog.main_src.path, "init", "; ".join(prog.init_blockers)
        )
    if prog.region_node is None:
        raise InputError(
            prog.region and prog.region["at"] or prog.main_src.path,
            "region",
            "no loop around the collectives: init needs the region that repeats; wrap one "
            "iteration of your program in a loop and run cuco init again",
        )
    inputs = [b for b in prog.buffers.values() if b.role == "input"]
    outputs = [b for b in prog.buffers.values() if b.role in ("output", "carried")]
    if not outputs:
        raise InputError(
            prog.region["at"],
            "outputs",
            "the repeated region writes no buffer that outlives it; nothing could be verified",
        )
    for what, bufs in (("inputs", inputs), ("outputs", outputs)):
        if len(bufs) > MAX_BUFFERS:
            raise InputError(prog.region["at"], what, f"{len(bufs)} {what}; the harness takes at most {MAX_BUFFERS}")
        for b in bufs:
            if b.elem_type not in api.ELEM_BYTES:
                raise InputError(
                    b.at,
                    b.name,
                    f"element type {b.elem_type!r} is not one the harness can fill "
                    "and compare (float, double, half, bf16, integers); declare the pointer with one",
                )
    text = ProgramWriter(prog, inputs, outputs).build()
    todos = list(text.todos)
    harness_root = INSTALLED_PREFIX + "_harness"  # found in the installed cuco, wherever either lives
    top = _top_level_code(prog, _called_text(text))
    files = {
        "candidate.cu": workload_text.candidate(prog, text, top, name),
        # a region replaying graphs: the baseline also captures the graphs of its compute-only and
        # communication-only halves, the skip_comm check those of its compute-only one
        "baseline.cu": workload_text.baseline(prog, text.form("bound"), top, name),
        "problem.cu": workload_text.problem(prog, inputs, outputs, top, name),
        "workload.yaml": workload_text.workload_yaml(prog, name, ranks, inputs, outputs, harness_root, text.launch_env),
        CHECKS["do_nothing"]: workload_text.candidate(
            prog, replace(text, run="\n    // does nothing: verification must reject this candidate"), top, name
        ),
        CHECKS["skip_comm"]: workload_text.candidate(
            prog, replace(text.form("compute"), run=text.run_compute), top, name, extra_code=text.compute_helpers
        ),
    }
    return files, todos


@dataclass
class TopLevel:
    includes: list[str]
    macros: list[str]  # #define lines the kernels may need (check macros are re-defined instead)
    check_macros: list[str]
    check_functions: list[str]  # of check_macros: the program's functions, re-defined as macros too
    device_code: list[str]  # kernels, device functions, structs, constants
    constants: list[str]  # file-scope constants (for problem.cu's sizes)


def _called_text(text) -> str:
    """The code the workload runs of main() (setup, the region and its forms, the start, teardown): the
    host functions it calls are carried."""
    parts = [*text.setup, text.run, text.run_compute, text.run_comm, text.start, *text.teardown]
    parts += [line for members, setup, teardown in text.forms.values() for line in setup]
    return "\n".join(parts)


def _top_level_code(prog, called: str = "") -> TopLevel:
    includes, macros, constants = [], [], []
    items: list[tuple[str, set[str], set[str]]] = []  # (text, names it defines, identifiers it uses)

    def add(src, node, text: str) -> None:
        items.append((text, _defined_names(src, node), {src.text(i) for i in walk(node) if i.type in NAME_NODES}))

    given = {Path(s.path).name for s in prog.sources}
    needed = _needed_host_functions(prog, called)
    words = set(re.findall(r"\b[A-Za-z_]\w*\b", called))
    tables = {w for d in prog.dispatches for w in re.findall(r"\b[A-Za-z_]\w*\b", d.through)} - words
    for src in prog.sources:
        for node in src.tree.root_node.named_children:
            t = src.text(node).rstrip()
            if _function_name(src, node) in prog.check_functions or _declares(src, node, prog.check_functions):
                continue  # a check function is re-defined as a macro handing its status to the harness
            if node.type == "declaration" and _declared(src, node) & tables:
                continue  # a table the region called through: the workload calls the chosen function
            if node.type == "preproc_include":
                if _included_name(t) in given:
                    continue  # a header given among the files: its code is carried with theirs
                if "mpi.h" not in t and t not in includes:
                    includes.append(t)
            elif node.type in ("preproc_def", "preproc_function_def"):
                name = src.text(node.child_by_field_name("name"))
                if name not in prog.check_macros:
                    macros.append(t)
            elif node.type == "comment":
                continue
            elif node.type == "function_definition" and (method := _method_name(src, node)) is not None:
                # a method defined out of its class: an override a virtual call ran is carried as a free
                # function (the workload calls it directly); the others run on no object of the workload's
                if method in {d.target for d in prog.dispatches}:
                    add(src, node, _free_form(src, node, method, prog.sources))
            elif node.type in ("function_definition", "template_declaration"):
                if node == prog.main or _is_host_helper(src, node, needed):
                    continue
                host = not any(q in src.text(node).split("{", 1)[0] for q in ("__global__", "__device__"))
                text = _pragmas_as_operators(src, node, prog.check_macros if host else ())
                add(src, node, _static(text) if host else text)
            elif (
                node.type == "declaration"
                and ("const" in t.split("=")[0] or "constexpr" in t)
                and not any(
                    c.type == "function_declarator" for d in node.children_by_field_name("declarator") for c in walk(d)
                )
            ):
                add(src, node, t)
                constants.append(t)
            elif node.type == "declaration" and any(
                c.type == "function_declarator" for d in node.children_by_field_name("declarator") for c in walk(d)
            ):
                # a host function's prototype: static like its carried definition (internal linkage: the
                # symbol policy lets a candidate define only the ABI)
                add(src, node, _static(t))
            elif node.type in ("type_definition", "alias_declaration"):
                add(src, node, t)  # the constants' types too (`typedef float real;` before `const real`)
                if t not in constants:
                    constants.append(t)
            elif node.type in (
                "struct_specifier",
                "class_specifier",
                "type_definition",
                "alias_declaration",
                "enum_specifier",
                "declaration",
                "namespace_definition",
            ):
                if "ncclUniqueId" in t or "MPI_" in t:
                    continue
                if node.type.endswith("_specifier") and not t.endswith(";"):
                    t += ";"  # the parser leaves a type definition's `;` out of its node
                add(src, node, t)
            else:
                add(
                    src,
                    node,
                    f"// {TODO}: top-level {node.type} at {src.at(node)} left out; add it if the "
                    f"kernels need it\n// {t.splitlines()[0][:100]}",
                )
    for method in dict.fromkeys(d.target for d in prog.dispatches if d.target and "::" in d.target):
        found = find_method(prog.sources, method)
        if found is not None and found[1].parent is not None and found[1].parent.type == "field_declaration_list":
            msrc, mdef = found  # defined in its class: its free form too
            add(msrc, mdef, _free_form(msrc, mdef, method, prog.sources))
    code = _dependency_order(items)
    # the build's -D defines the code uses (`SCALE` from -DSCALE=3): the workload's build line has none
    # of them, so they are written into its files, after the headers (a define cannot change those)
    macros = _build_defines(prog) + macros
    # <iostream> runs a static initialiser (std::ios_base::Init) the harness's symbol policy rejects:
    # kept only when the carried code uses the standard streams
    carried = "\n".join(code + macros)
    if not any(w in carried for w in ("cout", "cerr", "clog", "cin")):
        includes = [i for i in includes if "<iostream>" not in i]
    return TopLevel(includes, macros, list(prog.check_macros), list(prog.check_functions), code, constants)


NAME_NODES = ("identifier", "type_identifier", "namespace_identifier")


def _included_name(line: str) -> str:
    """The file name an `#include "dir/x.h"` line names (its last part)."""
    m = re.search(r'["<]([^">]+)[">]', line)
    return Path(m.group(1)).name if m else ""


def _defined_names(src, node) -> set[str]:
    """What a top-level item declares: a function, a type (struct, class, enum, typedef, alias), variables."""
    name = _function_name(src, node)
    if name:
        return {name}
    out = set()
    for n in walk(node):
        if n.type in ("struct_specifier", "class_specifier", "enum_specifier", "union_specifier"):
            tag = n.child_by_field_name("name")
            if tag is not None and n.child_by_field_name("body") is not None:
                out.add(src.text(tag))
        if n.type in ("type_definition", "alias_declaration", "declaration"):
            for d in n.children_by_field_name("declarator"):
                declared = declarator_name(d, src) if d.type != "type_identifier" else src.text(d)
                if declared:
                    out.add(declared)
            if n.type == "alias_declaration" and n.child_by_field_name("name") is not None:
                out.add(src.text(n.child_by_field_name("name")))
    return out


def _dependency_order(items: list[tuple[str, set[str], set[str]]]) -> list[str]:
    """The items in the files' order, except that one using a name a later item defines (a type from a file
    given after it) comes after that item: each file's own order is what its compiler accepted."""
    first: dict[str, int] = {}
    for k, (_, defines, _) in enumerate(items):
        for name in defines:
            first.setdefault(name, k)
    placed: list[int] = []
    state: dict[int, int] = {}  # 1 visiting, 2 placed

    def visit(k: int) -> None:
        if state.get(k):
            return  # placed, or a cycle (prototypes break those): keep the files' order
        state[k] = 1
        for name in sorted(items[k][2] - items[k][1]):
            d = first.get(name)
            if d is not None and d != k and not state.get(d):  # defined by an item not placed yet
                visit(d)
        state[k] = 2
        placed.append(k)

    for k in range(len(items)):
        visit(k)
    return [items[k][0] for k in placed]


def _build_defines(prog) -> list[str]:
    out: dict[str, str] = {}
    for src in prog.sources:
        for d in src.pre.defines if src.pre is not None else ():
            name, _, value = d.partition("=")
            if name.isidentifier() and name not in prog.check_macros:
                out.setdefault(name, value or "1")
    return [f"#ifndef {n}\n#define {n} {v}\n#endif" for n, v in out.items()]


def _declared(src, node) -> set[str]:
    return {n for d in node.children_by_field_name("declarator") if (n := declarator_name(d, src))}


def _declares(src, node, names) -> bool:
    """A top-level prototype of one of `names` (`static void check(cudaError_t, const char*);`)."""
    if node.type != "declaration" or not names:
        return False
    return any(
        c.type == "function_declarator" and declarator_name(c, src) in names
        for d in node.children_by_field_name("declarator")
        for c in walk(d)
    )


def _is_host_helper(src, node, needed: set[str]) -> bool:
    """A host function (not a kernel, not __device__) the workload does not need: the id exchange, the
    environment readers. The kept code never calls one (setup drops those statements). A host wrapper
    the region launches its kernels through (and what it calls) is needed: it is carried."""
    text = src.text(node)
    head = text.split("{", 1)[0]
    if "__global__" in head or "__device__" in head:
        return False
    return _function_name(src, node) not in needed


def _method_name(src, node) -> str | None:
    """`Class::method` of a method defined out of its class (`void Class::method(...) {...}`), or None."""
    decl = function_declarator(node) if node.type == "function_definition" else None
    ident = decl.child_by_field_name("declarator") if decl is not None else None
    return src.text(ident) if ident is not None and ident.type == "qualified_identifier" else None


def _free_form(src, node, method: str, sources) -> str:
    """The override as a static free function named free_name(method), its specifiers taken out."""
    ident = function_declarator(node).child_by_field_name("declarator")
    edits = sorted([*specifier_edits(src, node), (ident.start_byte, ident.end_byte, free_name(method))])
    out, pos = [], node.start_byte
    for a, b, repl in edits:
        out += [src.data[pos:a].decode(), repl]
        pos = b
    text = "".join(out) + src.data[pos : node.end_byte].decode()
    why = members_todo(sources, method)
    return (f"// {TODO}: {why}\n" if why else "") + _static(text)


def _static(text: str) -> str:
    """The same host function with internal linkage (nvcc gives an anonymous namespace's functions
    external names)."""
    if text.startswith("template"):
        head, sep, rest = text.partition(">")
        return f"{head}{sep} static {rest.lstrip()}" if not rest.lstrip().startswith("static") else text
    return text if text.startswith(("static", "inline static")) else f"static {text}"


def _function_name(src, node) -> str | None:
    fn = node
    if fn.type == "template_declaration":
        fn = next((c for c in fn.named_children if c.type == "function_definition"), None)
    if fn is None or fn.type != "function_definition":
        return None
    return declarator_name(fn.child_by_field_name("declarator"), src)


def _needed_host_functions(prog, called: str = "") -> set[str]:
    """The host functions the workload runs: the launch wrappers and helpers the region goes through, the
    functions the code kept of main() calls (`called`: its text), and what they call."""
    defs = {}
    for src in prog.sources:
        for node in src.tree.root_node.named_children:
            name = _function_name(src, node)
            if name:
                defs[name] = (src, node)
    for d in prog.dispatches:  # an override the region runs: its free function (what it calls is needed too)
        found = find_method(prog.sources, d.target)
        if found is not None and d.target is not None:
            defs[free_name(d.target)] = found
    carried = {b.name for b in prog.buffers.values() if b.role == "carried"}
    replayed = {
        id(o)
        for o in prog.ops
        for s, node in prog.captures  # what the region's graphs run
        if any(cs is s and node.start_byte <= n.start_byte < node.end_byte for cs, n in o.chain)
    }
    needed = {
        o.via.name
        for o in prog.ops
        if getattr(o, "via", None) is not None and (o.in_region or id(o) in replayed or set(o.writes) & carried)
    }  # + the carried buffers' init
    needed |= {
        call_name(o.chain[0][1], o.chain[0][0])
        for o in prog.ops  # the helpers the region calls
        if (o.in_region or id(o) in replayed) and len(o.chain) > 1
    }
    if called:
        words = set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", called))
        needed |= {n for n in defs if n in words and n != "main" and n not in prog.check_functions}
    todo = list(needed)
    while todo:
        src, node = defs.get(todo.pop(), (None, None))
        if node is None:
            continue
        for call in src.nodes("call_expression", node):
            name = call_name(call, src)
            if name in defs and name not in needed and name != "main" and name not in prog.check_functions:
                needed.add(name)
                todo.append(name)
    return needed


def _pragmas_as_operators(src, node, unchecked=()) -> str:
    """The function's text as written (a `#pragma unroll` stays: candidate.cu keeps such code outside the
    evolvable block, where the block rules allow directives). In a carried host function
    (a launch wrapper, which has no harness context to report to), the program's check macros named in
    `unchecked` become CUCO_UNCHECKED (the call is made, its status left to the harness's own checks)."""
    edits = []
    for n in walk(node):
        if n.type == "call_expression" and call_name(n, src) in unchecked:
            fn = n.child_by_field_name("function")
            edits.append((fn.start_byte, fn.end_byte, "CUCO_UNCHECKED"))
    text, pos, base = [], node.start_byte, node.start_byte
    for a, b, r in sorted(edits):
        text.append(src.data[pos:a].decode())
        text.append(r)
        pos = b
    text.append(src.data[pos : node.end_byte].decode())
    del base
    return "".join(text)
