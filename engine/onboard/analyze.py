"""`cuco analyze`: from the syntax trees of a host-driven CUDA + NCCL program to its program model.

It follows main() statement by statement (in program order), into the helper functions that communicate
and through the host wrappers that launch kernels (in any given file), records every NCCL, CUDA and MPI
call, the buffers and which operation reads and writes them, picks the region that repeats by evidence
(the timed loop or section around the collectives; warm-ups, sweeps, per-device and capture loops listed
as alternatives), and says what it could not resolve, with file:line. It never guesses: a collective it
cannot see as a call (a function pointer without --entry, a macro body) is an error naming the place and
what to do.

Jobs of their own beside it: what each call records (op_details.py), the communicators and ranks
(communicators.py), what the region cannot take over as it is (region_notes.py), a node's text (node_text.py).
"""

from __future__ import annotations

from remote.errors import InputError

from . import api
from .buffers import collect_buffers, reads_writes, roles
from .build_flags import diagnose, flags_from_makefile
from .command_line import ENV_CALLS, default_of, reads_command_line
from .communicators import MainScope, calls_any, communicators, timed_stream_of
from .dispatch import (
    function_holders,
    lambda_holders,
)
from .evaluate import evaluate
from .hidden import check_no_hidden_collectives, dispatch_targets, has_comm_call, is_kernel
from .kernel_access import kernel_access
from .loops import op_in
from .model import Program, Unresolved
from .node_text import text_or_none
from .op_collection import CallTargets, collect_ops, communicating_helpers
from .op_context import apply_assumptions, record_context
from .opportunities import dataflow, opportunities
from .preprocess import Flags, flag_to_enable, flags_from_compile_commands
from .region_choice import RegionScope, pick_region, region_json
from .region_notes import region_notes
from .source import (
    SourceFile,
    call_args,
    call_name,
    declarator_name,
    identifiers,
    names_in,
    parse_file,
    parse_text,
    walk,
)
from .variables import collect_variables, integer_constants
from .virtuals import Virtuals
from .wrappers import find_wrappers


def analyze_files(
    paths: list[str],
    flags: Flags | None = None,
    compile_commands: str | None = None,
    region: str | None = None,
    entry: str | None = None,
    assume: dict[str, int] | None = None,
    makefile: str | None = None,
    for_harness: bool = False,
) -> Program:
    """All the files are one program, each read as its compiler reads it: the flags of its entry in
    `compile_commands` (a compile_commands.json) or of its recipe line in `makefile`, then `flags` (-D/-U/-I
    given on the command line). `for_harness` (cuco init): flags that cannot work in the harness are
    diagnosed first (build_flags.py), and the program read as the workload will build it."""
    if not paths:
        raise InputError("cuco analyze", "FILE", "name at least one .cu file")
    flags = flags or Flags()
    per_file: dict[str, Flags] = {}
    libraries: list[str] = []
    if makefile:
        build = flags_from_makefile(makefile, paths)
        per_file, libraries = build.per_file, build.libraries
    if compile_commands:
        per_file = {**per_file, **flags_from_compile_commands(compile_commands, paths)}
    flag_notes: list[str] = []
    if for_harness:
        diagnosis = diagnose(paths, flags, per_file, libraries)
        flags, per_file, flag_notes = diagnosis.flags, diagnosis.per_file, diagnosis.notes
    sources = [parse_file(p, per_file[p].merged(flags) if p in per_file else flags) for p in paths]
    prog = analyze_sources(sources, region, entry, assume)
    prog.flag_notes = flag_notes
    prog.preprocessing = {
        "flags": {
            "defines": list(flags.defines),
            "undefines": list(flags.undefines),
            "include_dirs": list(flags.include_dirs),
        },
        "compile_commands": compile_commands,
        **({"makefile": makefile} if makefile else {}),
        **({"per_file": {p: f.as_args() for p, f in per_file.items()}} if per_file else {}),
        "branches": [b.as_json() for s in sources if s.pre for b in s.pre.branches],
        "missing_headers": [m for s in sources if s.pre for m in s.pre.missing_headers],
    }
    return prog


def analyze_sources(
    sources: list[SourceFile],
    region: str | None = None,
    entry: str | None = None,
    assume: dict[str, int] | None = None,
    main_name: str = "main",
) -> Program:
    """`main_name`: the function read as the program's main() (cuco init reads a helper that holds the
    whole timed program as main, its parameters bound to what main() passes it)."""
    functions, macros, globals_ = _top_level(sources)
    virtuals = Virtuals(sources, functions)
    functions = {**functions, **virtuals.methods}  # an override is followed as `Class::method`
    mains = [(s, f) for (name, (s, f)) in functions.items() if name == main_name]
    if not mains:
        _refuse_inactive_main(sources)
        raise InputError(
            ", ".join(s.path for s in sources),
            "main",
            "no main() found: name the file that holds your program's main()",
        )
    main_src, main = mains[0]
    check_no_hidden_collectives(sources, functions, macros, entry)
    kernels = {n: sf for n, sf in functions.items() if is_kernel(*sf)}
    sets_up_nccl = any(
        call_name(n, s) in api.NCCL_INIT for (s, f) in functions.values() for n in s.nodes("call_expression", f)
    )
    if not sets_up_nccl and not any(has_comm_call(s, f) for (s, f) in functions.values()):
        raise InputError(
            main_src.path,
            "NCCL",
            "no NCCL communication call (ncclAllReduce, ncclAllGather, ncclSend, ...) found; "
            "cuco optimises programs whose GPUs communicate through NCCL",
        )
    analyzer = _Analyzer(sources, main_src, main, functions, macros, globals_, kernels)
    analyzer.region_at = region
    analyzer.entry = entry
    analyzer.virtuals = virtuals
    analyzer.assume = dict(assume or {})
    analyzer.dispatch_holders = dispatch_targets(sources)[1] if entry else set()
    prog = analyzer.run()
    if entry and entry not in dispatch_targets(sources)[0] and not any(d.target == entry for d in prog.dispatches):
        raise InputError(
            "--entry",
            entry,
            "no call of the program goes through a table or function pointer that holds it; pass --entry only "
            "where the analysis lists candidates (file:line) for a call",
        )
    return prog


def _refuse_inactive_main(sources: list[SourceFile]) -> None:
    """main() is in the file but the preprocessor left it out: say which #if and the flag to set."""
    for src in sources:
        if src.pre is None:
            continue
        original = parse_text(src.pre.original.decode("utf-8", "replace"), src.path)
        for fn in original.nodes("function_definition"):
            if declarator_name(fn.child_by_field_name("declarator"), original) != "main":
                continue
            line = fn.start_point[0] + 1
            around = [b for b in src.pre.branches if b.taken is False and int(b.at.rsplit(":", 1)[1]) < line <= b.end]
            if around:
                b = max(around, key=lambda b: int(b.at.rsplit(":", 1)[1]))
                raise InputError(
                    f"{src.path}:{line}",
                    "main",
                    f"main() sits under an inactive `{b.directive}` ({b.at}): set "
                    f"{flag_to_enable(b)} (cuco analyze/init take -D, -U and -I as your compiler does)",
                )


# ---------------------------------------------------------------- top level


def _top_level(sources):
    functions, macros, globals_ = {}, {}, {}
    for src in sources:
        for node in src.tree.root_node.named_children:
            target = node
            if node.type == "template_declaration":
                target = next((c for c in node.named_children if c.type == "function_definition"), node)
            if target.type == "function_definition":
                name = declarator_name(target.child_by_field_name("declarator"), src)
                if name:
                    functions[name] = (src, target)
            elif node.type in ("preproc_function_def", "preproc_def"):
                name = src.text(node.child_by_field_name("name"))
                macros[name] = (src, node)
            elif node.type == "declaration":
                for d in node.children_by_field_name("declarator"):
                    name = declarator_name(d, src)
                    if name:
                        globals_[name] = (src, node, d)
    return functions, macros, globals_


class _Analyzer:
    def __init__(self, sources, src, main, functions, macros, globals_, kernels):
        self.sources, self.src, self.main = sources, src, main
        self.functions, self.macros, self.globals = functions, macros, globals_
        self.kernels = kernels
        self.body = main.child_by_field_name("body")
        self.unresolved: list[Unresolved] = []
        self.kernel_access = {name: kernel_access(s, f) for name, (s, f) in kernels.items()}
        self.wrappers = find_wrappers(functions, kernels, self.kernel_access)
        self.region_at: str | None = None
        self.entry: str | None = None  # --entry: the target a function-pointer call stands for
        self.assume: dict[str, int] = {}  # --assume NAME=VALUE: run-time flags taken as given
        self.dispatch_holders: set[str] = set()
        self.virtuals: Virtuals | None = None  # calls through virtual methods (virtuals.py)
        self.helpers = communicating_helpers(functions, kernels)
        self.bodies = [(src, self.body)] + [
            (s, f.child_by_field_name("body")) for n, (s, f) in functions.items() if n in self.helpers
        ]

    def scope(self) -> MainScope:
        return MainScope(self.src, self.body, self.sources, self.vars, self.functions)

    def run(self) -> Program:
        self.pointers = collect_variables(self.bodies, self.src, self.body, self.functions, self.helpers)
        self.vars = self.pointers.vars
        self.constants = integer_constants(self.vars, self.globals)
        targets = CallTargets(
            self.functions,
            self.macros,
            self.helpers,
            self.wrappers,
            lambda_holders(self.sources),
            function_holders(self.sources, self.functions),
            self.constants,
            self.virtuals,
            self.entry,
            self.dispatch_holders,
        )
        collected = collect_ops(self.src, self.body, targets, self.pointers, self.unresolved)
        self.ops, self.lambdas, self.helper_calls = collected.ops, targets.lambdas, collected.helper_calls
        self.region = pick_region(
            RegionScope(self.src, self.main, self.bodies, self.ops), self.region_at, self.unresolved
        )
        region_node = self.region.node
        for op in self.ops:
            op.in_region = region_node is not None and op_in(op, self.region.src, region_node)
            if op.in_region:
                record_context(op, self.region)
                apply_assumptions(op, self.assume)
        buffers = collect_buffers(self.ops, self.pointers, self.sources, self.unresolved)
        reads_writes(self.ops, buffers, self.pointers, self.kernel_access, self.unresolved)
        roles(self.ops, buffers, self.region, self.pointers)
        comms, ranks = communicators(self.ops, self.unresolved, self.scope())
        timed_stream = timed_stream_of(self.ops)
        prog = Program(
            files=[s.path for s in self.sources],
            sources=self.sources,
            main_src=self.src,
            main=self.main,
            vars=self.vars,
            ops=self.ops,
            buffers=buffers,
            communicators=comms,
            ranks=ranks,
            region=region_json(self.region, self.src, self.ops, self.functions),
            region_node=region_node,
            params=[],
            check_macros=[],
            kernels=self.kernels,
            kernel_access=self.kernel_access,
            timed_stream=timed_stream,
            unresolved=self.unresolved,
        )
        prog.helper_calls = self.helper_calls
        prog.dispatches = collected.dispatches
        prog.captures = self.region.captures()
        prog.init_blockers = self._init_blockers()
        prog.check_functions = self._check_functions()
        prog.check_macros = sorted(set(self._check_macros()) | set(prog.check_functions))
        prog.params = self._params(buffers)
        self.unresolved += region_notes(prog, self.macros, self.kernels, self.ops, self.vars, self.region.src)
        prog.dataflow = dataflow(prog)
        prog.opportunities = opportunities(prog)
        self._runtime_sizes(prog)
        prog.unresolved.sort(key=lambda u: (u.at.rsplit(":", 1)[0], int(u.at.rsplit(":", 1)[1]), u.what))
        return prog

    def _init_blockers(self) -> list[str]:
        out = []
        if self.region.replays() and not self.region.captures():
            out.append(
                f"the repeated region ({self.region.src.at(self.region.node)}) replays CUDA graphs whose "
                "capture (cudaStreamBeginCapture ... cudaStreamEndCapture) the analysis does not find in "
                "the given files: pass the file that captures them, or write the workload by hand "
                "(docs/workload-format.md)"
            )
        for s, node in self.region.captures():
            if not (s is self.src and self.main.start_byte <= node.start_byte < self.main.end_byte):
                out.append(
                    f"the graphs the region replays are captured outside main() ({s.at(node)}, in "
                    f"{self._function_at(s, node) or 'another function'}); cuco init writes a capture "
                    "made in main() before the region: move it there, or write the workload by hand "
                    "(docs/workload-format.md)"
                )
        through_lambdas = sorted(
            {
                f"{call_name(c, s)} at {s.at(c)}"
                for o in self.ops
                if o.in_region and o.kind in ("collective", "p2p")
                for s, c in o.chain[:-1]
                if call_name(c, s) in self.lambdas
            }
        )
        if through_lambdas:
            out.append(
                f"the repeated region's collectives run inside a lambda ({', '.join(through_lambdas)}); cuco init "
                "carries functions, not lambdas: make it a function (it may take main()'s variables as "
                "parameters) and run cuco init again"
            )
        for op in self.ops:
            if op.name == "ncclCommInitAll":
                out.append(
                    f"one process drives every GPU (ncclCommInitAll at {op.at}); the harness runs one "
                    "process per GPU: give each GPU its own process and ncclCommInitRank"
                )
        # the helpers the region in main() calls (and their helpers) are carried with compute-only and
        # comm-only forms; a region inside a helper is not written yet
        in_main = (
            self.region.node is None
            or self.region.src is self.src
            and self.main.start_byte <= self.region.node.start_byte < self.main.end_byte
        )
        if not in_main:
            names = ", ".join(sorted({c["name"] for c in self.helper_calls}))
            where = (
                f"the region ({self.region.src.at(self.region.node)}) is not in main() but inside the helper "
                f"{self._function_at(self.region.src, self.region.node) or 'function'}"
            )
            out.append(
                f"the repeated region runs inside helper functions ({names}): {where}; cuco init "
                "writes a region in main() and carries the helpers it calls: move the timed "
                "section into main(), or write the workload by hand (docs/workload-format.md) from this "
                "analysis"
            )
        return out

    def _function_at(self, src, node) -> str | None:
        """The name of the function definition holding `node`."""
        for name, (fsrc, fn) in self.functions.items():
            if fsrc is src and fn.start_byte <= node.start_byte < fn.end_byte:
                return name
        return None

    # -- communicators and ranks
    def _check_macros(self) -> list[str]:
        """Function-like macros of one parameter that wrap a call (CUDACHECK(cudaMalloc(...))): the
        analysis sees through them; the workload re-defines them to return the error to the harness."""
        used: set[str] = set()
        for n in self.src.nodes("call_expression", self.body):
            name = call_name(n, self.src)
            args = call_args(n)
            if name is not None and name in self.macros and len(args) == 1 and args[0].type == "call_expression":
                used.add(name)
        return sorted(used)

    def _check_functions(self) -> list[str]:
        """The program's own status-checking functions (`check(cudaMalloc(...), "what")`: a function whose
        first parameter is a CUDA or NCCL status, called with a call as that argument): the workload maps
        them to the harness's error return, as it does the check macros (a note says so)."""
        found: list[str] = []
        for src, body in self.bodies:
            for n in src.nodes("call_expression", body):
                name = call_name(n, src)
                args = call_args(n)
                if name is None or name in found or not args or args[0].type != "call_expression":
                    continue
                fn = self.functions.get(name)
                if fn is not None and _checks_a_status(*fn):
                    found.append(name)
                    self.unresolved.append(
                        Unresolved(
                            fn[0].at(fn[1]),
                            f"{name}() checks a CUDA/NCCL status",
                            "mapped to the harness's error return: in the workload a failed call it checks ends "
                            "the call with that error instead of running its body",
                        )
                    )
        return found

    # -- size parameters
    def _params(self, buffers) -> list[dict]:
        roots: list[str] = []
        exprs = [b.size for b in buffers.values() if b.role != "unused"]
        exprs += [op.detail.get("count") for op in self.ops if op.in_region and op.kind in ("collective", "p2p")]
        seen: set[str] = set()
        todo = [i for e in exprs if e for i in names_in(e)]
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            var = self.vars.get(name)
            if var is not None and var.top_level and var.init is None:  # `T v; if (c) v = a; else v = b;`
                todo.extend(
                    i.text.decode()
                    for st in self._assigning_statements(name)
                    for i in identifiers(st)
                    if i.text.decode() != name
                )
                continue
            if var is None or not var.top_level or var.init is None:
                continue
            if var.init is not None:
                value = self._default(var)
                if value is not None and isinstance(value, int) and not var.pointer:
                    roots.append(name)
                    continue
                todo.extend(self.src.text(i) for i in identifiers(var.init))
        params = []
        for name in sorted(set(roots), key=lambda n: self.vars[n].pos):
            var = self.vars[name]
            param = {"name": name, "type": var.type, "default": self._default(var), "at": f"{self.src.path}:{var.line}"}
            if evaluate(var.init, self.src, {}) is None:  # the program's default when its command line is empty
                param["from"] = "command line"
            params.append(param)
        return params

    def _assigning_statements(self, name: str) -> list:
        """main()'s top-level statements before the region that assign `name` (no calls in them)."""
        out = []
        for st in self.body.named_children:
            in_main_region = self.region.node is not None and self.region.src is self.src
            if in_main_region and st.start_byte >= self.region.node.start_byte:
                break
            if st.type not in ("expression_statement", "if_statement"):
                continue
            targets = {
                text_or_none(a.child_by_field_name("left")) for a in walk(st) if a.type == "assignment_expression"
            }
            if name in targets and not any(n.type == "call_expression" for n in walk(st)):
                out.append(st)
        return out

    def _default(self, var):
        value = evaluate(var.init, self.src, {})
        if value is None and reads_command_line(var.init, self.src, lambda n: calls_any(self.functions, n, ENV_CALLS)):
            value = default_of(var.init, self.src)
        return value

    def _runtime_sizes(self, prog: Program) -> None:
        for o in prog.opportunities:
            if o["bytes_value"] is None:
                self.unresolved.append(
                    Unresolved(
                        o["collective_at"],
                        f"the bytes {o['collective']} moves ({o['bytes']}) are known only at run time",
                        "the opportunity is ranked after those with known sizes",
                    )
                )


STATUS_TYPES = ("cudaError_t", "cudaError", "ncclResult_t", "CUresult", "cublasStatus_t", "cusparseStatus_t")


def _checks_a_status(src, fn) -> bool:
    """A function whose first parameter is a CUDA/NCCL/library status (`void check(cudaError_t e, ...)`)."""
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    params = decl.child_by_field_name("parameters") if decl is not None else None
    first = next((p for p in params.named_children if p.type == "parameter_declaration"), None) if params else None
    kind = first.child_by_field_name("type") if first is not None else None
    return kind is not None and src.text(kind) in STATUS_TYPES
