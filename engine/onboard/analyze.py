"""`cuco analyze`: from the syntax trees of a host-driven CUDA + NCCL program to its program model.

It follows main() statement by statement (in program order), into the helper functions that communicate
and through the host wrappers that launch kernels (in any given file), records every NCCL, CUDA and MPI
call, the buffers and which operation reads and writes them, picks the region that repeats by evidence
(the timed loop or section around the collectives; warm-ups, sweeps, per-device and capture loops listed
as alternatives), and says what it could not resolve, with file:line. It never guesses: a collective it
cannot see as a call (a function pointer without --entry, a macro body) is an error naming the place and
what to do.

Here: the files read as one program, main() found, and the jobs run in the order each needs the one before,
each in a module of its own: the variables and pointer aliases (variables.py), the operations in program
order (op_collection.py; what each call records: op_details.py), the repeated region (region_choice.py, on
the loop facts of loops.py), the conditions and loops around each op of it (op_context.py), the buffers and
their roles (buffers.py), the communicators and ranks (communicators.py), the status checks
(status_checks.py), what stops cuco init (init_blockers.py), the size parameters (size_params.py) and what
the region cannot take over as it is (region_notes.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from remote.errors import InputError

from . import api
from .buffers import collect_buffers, reads_writes, roles
from .build_flags import diagnose, flags_from_makefile
from .communicators import MainScope, communicators, timed_stream_of
from .dispatch import function_holders, lambda_holders
from .hidden import check_no_hidden_collectives, dispatch_targets, has_comm_call, is_kernel
from .init_blockers import InitFacts, init_blockers
from .kernel_access import kernel_access
from .loops import op_in
from .model import Program, Unresolved
from .op_collection import CallTargets, collect_ops, communicating_helpers
from .op_context import apply_assumptions, record_context
from .opportunities import dataflow, opportunities
from .preprocess import Flags, flag_to_enable, flags_from_compile_commands
from .region_choice import RegionScope, pick_region, region_json
from .region_notes import region_notes
from .size_params import size_params
from .source import SourceFile, call_name, declarator_name, parse_file, parse_text
from .status_checks import check_functions, check_macros
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
    choices = Choices(region, entry, dict(assume or {}), dispatch_targets(sources)[1] if entry else set(), virtuals)
    prog = _Analyzer(sources, main_src, main, functions, macros, globals_, kernels, choices).run()
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


@dataclass(frozen=True)
class Choices:
    """What the command line decides: the region (`--region FILE:LINE`), the target a function-pointer call
    stands for (`--entry`, with the tables it is called through) and the run-time flags taken as given
    (`--assume NAME=VALUE`); with the calls through virtual methods (virtuals.py)."""

    region_at: str | None
    entry: str | None
    assume: dict[str, int]
    dispatch_holders: set[str]
    virtuals: Virtuals


class _Analyzer:
    """The jobs of the analysis in the order each needs the one before: variables, operations, the region,
    what decides each op of it, buffers and roles, communicators, then what init needs to know."""

    def __init__(self, sources, src, main, functions, macros, globals_, kernels, choices: Choices):
        self.sources, self.src, self.main = sources, src, main
        self.functions, self.macros, self.globals = functions, macros, globals_
        self.kernels, self.choices = kernels, choices
        self.body = main.child_by_field_name("body")
        self.unresolved: list[Unresolved] = []
        self.kernel_access = {name: kernel_access(s, f) for name, (s, f) in kernels.items()}
        self.wrappers = find_wrappers(functions, kernels, self.kernel_access)
        self.helpers = communicating_helpers(functions, kernels)
        self.bodies = [(src, self.body)] + [
            (s, f.child_by_field_name("body")) for n, (s, f) in functions.items() if n in self.helpers
        ]

    def run(self) -> Program:
        pointers = collect_variables(self.bodies, self.src, self.body, self.functions, self.helpers)
        targets = CallTargets(
            self.functions,
            self.macros,
            self.helpers,
            self.wrappers,
            lambda_holders(self.sources),
            function_holders(self.sources, self.functions),
            integer_constants(pointers.vars, self.globals),
            self.choices.virtuals,
            self.choices.entry,
            self.choices.dispatch_holders,
        )
        collected = collect_ops(self.src, self.body, targets, pointers, self.unresolved)
        ops = collected.ops
        region = pick_region(
            RegionScope(self.src, self.main, self.bodies, ops), self.choices.region_at, self.unresolved
        )
        for op in ops:
            op.in_region = region.node is not None and op_in(op, region.src, region.node)
            if op.in_region:
                record_context(op, region)
                apply_assumptions(op, self.choices.assume)
        buffers = collect_buffers(ops, pointers, self.sources, self.unresolved)
        reads_writes(ops, buffers, pointers, self.kernel_access, self.unresolved)
        roles(ops, buffers, region, pointers)
        scope = MainScope(self.src, self.body, self.sources, pointers.vars, self.functions)
        comms, ranks = communicators(ops, self.unresolved, scope)
        prog = Program(
            files=[s.path for s in self.sources],
            sources=self.sources,
            main_src=self.src,
            main=self.main,
            vars=pointers.vars,
            ops=ops,
            buffers=buffers,
            communicators=comms,
            ranks=ranks,
            region=region_json(region, self.src, ops, self.functions),
            region_node=region.node,
            params=[],
            check_macros=[],
            kernels=self.kernels,
            kernel_access=self.kernel_access,
            timed_stream=timed_stream_of(ops),
            unresolved=self.unresolved,
        )
        prog.helper_calls = collected.helper_calls
        prog.dispatches = collected.dispatches
        prog.captures = region.captures()
        prog.init_blockers = init_blockers(
            InitFacts(region, self.src, self.main, ops, targets.lambdas, collected.helper_calls, self.functions)
        )
        prog.check_functions = check_functions(self.bodies, self.functions, self.unresolved)
        prog.check_macros = sorted(set(check_macros(self.src, self.body, self.macros)) | set(prog.check_functions))
        prog.params = size_params(buffers, ops, region, scope)
        self.unresolved += region_notes(prog, self.macros, self.kernels, ops, pointers.vars, region.src)
        prog.dataflow = dataflow(prog)
        prog.opportunities = opportunities(prog)
        self.unresolved += _runtime_sizes(prog)
        prog.unresolved.sort(key=lambda u: (u.at.rsplit(":", 1)[0], int(u.at.rsplit(":", 1)[1]), u.what))
        return prog


def _runtime_sizes(prog: Program) -> list[Unresolved]:
    """The opportunities whose bytes are known only at run time: ranked after those with known sizes."""
    return [
        Unresolved(
            o["collective_at"],
            f"the bytes {o['collective']} moves ({o['bytes']}) are known only at run time",
            "the opportunity is ranked after those with known sizes",
        )
        for o in prog.opportunities
        if o["bytes_value"] is None
    ]
