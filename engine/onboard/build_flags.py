"""The program's own build flags, read from its Makefile, and diagnosed for the harness before a workload
is written: a define that turns on profiler ranges (NVTX) or pulls in MPI, a library the harness's build
does not link. `cuco init` says for each what it is, why it cannot work in the harness, and what it did.

The Makefile is read, not run: its variable assignments (`=`, `:=`, `?=`, `+=`, `ifdef`/`ifndef`/`else`
on variables it or the environment sets), expanded into the recipe lines that name each source file; the
-D/-U/-I/-l of those lines are that file's flags."""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from remote.errors import InputError

from .preprocess import Flags

# libraries a harness job links (its build line: the CUDA runtime, NCCL) or that every Linux host has
LINKED = {"cudart", "cudart_static", "cuda", "nccl", "nccl_static", "dl", "pthread", "rt", "m", "stdc++", "gcc_s"}
PROFILER_HEADERS = ("nvToolsExt", "nvtx3/", "nvtx.h")
ASSIGN = re.compile(r"^\s*(?:override\s+|export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*(\?=|:=|::=|\+=|=)\s*(.*)$")
VAR_REF = re.compile(r"\$[({]([A-Za-z_][A-Za-z0-9_]*)[)}]")


@dataclass
class BuildFlags:
    """Per source file, the flags its own build passes; the libraries the link names."""

    per_file: dict[str, Flags]
    libraries: list[str] = field(default_factory=list)


@dataclass
class Diagnosis:
    flags: Flags  # the command line's flags as the workload reads the program
    per_file: dict[str, Flags]
    notes: list[str] = field(default_factory=list)  # "where: what, why, what init did"


def flags_from_makefile(path: str, files: list[str]) -> BuildFlags:
    """Each file's -D/-U/-I from the Makefile recipe line that compiles it (by its name), and every -l."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InputError(path, "--makefile", f"cannot read it ({exc.strerror or exc})") from None
    variables = _variables(text)
    recipes = [_expand(line.strip(), variables) for line in _recipe_lines(text)]
    directory = Path(path).resolve().parent
    per_file: dict[str, Flags] = {}
    libraries: list[str] = []
    for f in files:
        line = next((r for r in recipes if re.search(rf"(^|[\s/]){re.escape(Path(f).name)}(\s|$)", r)), None)
        if line is None:
            raise InputError(
                path, f, f"no recipe line of the Makefile compiles {Path(f).name}; pass its flags with -D/-I"
            )
        args = shlex.split(line)
        per_file[f] = _flags(args, directory)
        libraries += [a[2:] for a in args if _library(a) and a[2:] not in libraries]
    return BuildFlags(per_file, libraries)


def _recipe_lines(text: str) -> list[str]:
    """The tab-indented lines that follow a rule (`target: prerequisites`): its recipe. A tab-indented
    line elsewhere (inside an `ifdef` of assignments) is not one."""
    out, in_rule = [], False
    for raw in text.splitlines():
        if raw.startswith("\t") and in_rule:
            out.append(raw)
        elif raw.strip() and not raw.lstrip().startswith("#"):
            line = raw.split("#", 1)[0]
            in_rule = ":" in line and not ASSIGN.match(line) and not raw.startswith("\t")
    return out


def _library(arg: str) -> bool:
    """`-lNAME`, not an nvcc option that starts the same way (-lineinfo, -lto)."""
    return arg.startswith("-l") and len(arg) > 2 and arg != "-lineinfo" and not arg.startswith("-lto")


def _variables(text: str) -> dict[str, str]:
    """The Makefile's variables after its assignments, in order, taking `ifdef`/`ifndef` branches as make
    would with the variables set so far (and the environment's)."""
    values: dict[str, str] = {}
    active = [True]
    recipes = set(_recipe_lines(text))
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        words = line.split()
        if words[:1] in (["ifdef"], ["ifndef"]) and len(words) > 1:
            defined = bool(values.get(words[1]) or os.environ.get(words[1]))
            active.append(active[-1] and (defined if words[0] == "ifdef" else not defined))
            continue
        if words[:1] in (["ifeq"], ["ifneq"]):
            active.append(False)  # not evaluated: neither branch taken
            continue
        if words[:1] == ["else"] and len(active) > 1:
            active[-1] = active[-2] and not active[-1]
            continue
        if words[:1] == ["endif"] and len(active) > 1:
            active.pop()
            continue
        m = ASSIGN.match(line)
        if not active[-1] or m is None or raw in recipes:
            continue
        name, op, value = m.groups()
        if op == "?=" and (name in values or name in os.environ):
            continue
        value = _expand(value, values) if op in (":=", "::=") else value
        values[name] = f"{values.get(name, '')} {value}".strip() if op == "+=" else value
    return values


def _expand(text: str, values: dict[str, str], depth: int = 0) -> str:
    if depth > 10:
        return text
    out = VAR_REF.sub(lambda m: values.get(m.group(1), os.environ.get(m.group(1), "")), text)
    return _expand(out, values, depth + 1) if VAR_REF.search(out) else out


def _flags(args: list[str], directory: Path) -> Flags:
    defines, undefines, includes = [], [], []
    for a in args:
        if a.startswith("-D") and len(a) > 2:
            defines.append(a[2:])
        elif a.startswith("-U") and len(a) > 2:
            undefines.append(a[2:])
        elif a.startswith("-I") and len(a) > 2:
            d = a[2:]
            includes.append(d if os.path.isabs(d) else str((directory / d).resolve()))
    return Flags(tuple(defines), tuple(undefines), tuple(includes))


def diagnose(files: list[str], flags: Flags, per_file: dict[str, Flags], libraries: list[str]) -> Diagnosis:
    """The flags as the workload can use them: a define whose branch turns on profiler ranges is undefined
    (ranges only name time for a profiler: the iteration is the same, and NVTX's loader is outside the
    harness's symbol policy); a define whose branch pulls in MPI is noted (the harness owns MPI's set-up;
    an MPI collective in the region runs as the harness's host collective); a library the harness's build does not link
    is named (code that calls it does not link in a job)."""
    notes: list[str] = []
    drop: set[str] = set()
    for f in files:
        mine = per_file.get(f, Flags()).merged(flags)
        for d in dict.fromkeys(mine.defines):
            name = d.split("=", 1)[0]
            found = _guarded(f, name)
            if found is None:
                continue
            at, body = found
            header = next((h for h in PROFILER_HEADERS if h in body), None)
            if header is not None and name not in drop:
                drop.add(name)
                notes.append(
                    f"{at}: -D{d} turns on NVTX profiler ranges (its branch includes {header}...): NVTX's "
                    "injection loader (dlopen, getenv) is outside the harness's symbol policy, and ranges only "
                    f"name time for a profiler; init read the program with -U{name} (the same iteration)"
                )
            elif ("mpi.h" in body or re.search(r"\bMPI_[A-Z]", body)) and name not in drop:
                notes.append(
                    f"{at}: -D{d} pulls in MPI (its branch uses mpi.h or MPI calls): the harness runs the ranks "
                    "and owns MPI's set-up; kept, and an MPI collective in the repeated region runs as the "
                    "harness's host collective (a note at its line)"
                )
    for lib in libraries:
        if lib in LINKED or lib.startswith("mpi"):
            continue
        if lib.startswith("nvToolsExt") or lib.startswith("nvtx"):
            notes.append(f"-l{lib}: NVTX's library; not linked (the ranges are left out with their define)")
            continue
        notes.append(
            f"-l{lib}: the harness's build links the CUDA runtime and NCCL only, so a job cannot link "
            f"lib{lib}: code of the region that calls it will not build; init could not add it (write the "
            "workload's build command by hand to link it, docs/workload-format.md)"
        )
    if not drop:
        return Diagnosis(flags, per_file, notes)

    def without(fl: Flags) -> Flags:
        kept = tuple(d for d in fl.defines if d.split("=", 1)[0] not in drop)
        return Flags(kept, fl.undefines + tuple(sorted(drop - set(fl.undefines))), fl.include_dirs)

    return Diagnosis(without(flags), {f: without(fl) for f, fl in per_file.items()}, notes)


def _guarded(path: str, name: str) -> tuple[str, str] | None:
    """(file:line, text) of the first `#ifdef NAME` / `#if defined(NAME)` / `#if NAME` branch of the file,
    up to its `#else`, `#elif` or `#endif` at the same depth."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return None
    opener = re.compile(rf"^\s*#\s*(ifdef\s+{name}\b|if\s+(defined\s*\(?\s*)?{name}\b)")
    for i, line in enumerate(lines):
        if not opener.match(line):
            continue
        depth, body = 0, []
        for text in lines[i + 1 :]:
            d = text.strip()
            if re.match(r"#\s*if", d):
                depth += 1
            elif re.match(r"#\s*endif", d):
                if depth == 0:
                    break
                depth -= 1
            elif re.match(r"#\s*(else|elif)", d) and depth == 0:
                break
            body.append(text)
        return f"{path}:{i + 1}", "\n".join(body)
    return None
