"""Read the program its author compiles: the real C preprocessor (`g++ -E -fdirectives-only`) evaluates
every `#if` with the user's -D/-U/-I, and what it kept is the text the parser reads.

Directives-only mode evaluates conditionals and includes but does not expand macros, so the text of every
active line is the user's own, at its own line (inactive lines and conditional directives become empty
lines: every reported location is the original file:line, and `init` copies the user's text). Headers the
preprocessor cannot find (mpi.h on a machine without MPI) are read as empty files and listed, so their
macros are undefined rather than the run failing; the CUDA toolkit's and NCCL's headers are found where
they are installed (NCCL's version macros decide `#if NCCL_VERSION_CODE >= ...` as the compiler would).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from remote.errors import InputError

CONDITIONALS = ("if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else", "endif")
TIMEOUT_S = 30
_MISSING = re.compile(r"^(?P<at>.+?:\d+):\d+: fatal error: (?P<header>[^:]+): No such file or directory")
_ERROR = re.compile(r"^(?P<at>.+?:\d+):\d+: (?:fatal )?error: (?P<msg>.*)$")
_MARKER = re.compile(rb'^# (\d+) "((?:[^"\\]|\\.)*)"((?: \d)*)$')
_DIRECTIVE = re.compile(r"^\s*#\s*(\w+)\s*(.*)$", re.S)


@dataclass(frozen=True)
class Flags:
    """What the author's compiler is told: -D NAME[=VALUE], -U NAME, -I DIR (in the order given)."""

    defines: tuple[str, ...] = ()
    undefines: tuple[str, ...] = ()
    include_dirs: tuple[str, ...] = ()

    def merged(self, other: Flags) -> Flags:
        return Flags(
            self.defines + other.defines, self.undefines + other.undefines, self.include_dirs + other.include_dirs
        )

    def as_args(self) -> list[str]:
        return (
            [f"-D{d}" for d in self.defines]
            + [f"-U{u}" for u in self.undefines]
            + [f"-I{i}" for i in self.include_dirs]
        )


@dataclass
class Branch:
    at: str  # file:line of the #if / #elif / #else
    directive: str  # its text, e.g. "#if NCCL_UB_SUPPORT"
    taken: bool | None  # None: the branch holds no code, so nothing tells
    end: int = 0  # the branch's last line (before the next #elif / #else / #endif)
    opens: str = ""  # the #if / #ifdef / #ifndef that opens its group

    def as_json(self) -> dict:
        return {"at": self.at, "directive": self.directive, "taken": self.taken}


@dataclass
class Preprocessed:
    path: str
    original: bytes
    text: bytes  # the active lines; every other line empty
    branches: list[Branch] = field(default_factory=list)
    missing_headers: list[str] = field(default_factory=list)  # "file:line: name"
    macros: set[str] = field(default_factory=set)  # the file's own active #defines
    defines: tuple[str, ...] = ()  # the -D NAME[=VALUE] it was read with (its build's, as init keeps them)


def preprocess(path: str, flags: Flags) -> Preprocessed:
    p = Path(path)
    if not p.is_file():
        raise InputError(str(path), "FILE", "no such file; name a .cu or .cpp source of your program")
    original = p.read_bytes()
    lines = original.decode("utf-8", "replace").split("\n")
    directives = _directives(lines)
    with tempfile.TemporaryDirectory(prefix="cuco-pp-") as stubs:
        out, missing = _run_cpp(p.resolve(), path, flags, Path(stubs))
    kept = _kept_lines(out, str(p.resolve()), directives, len(lines))
    text = "\n".join(line if i in kept else "" for i, line in enumerate(lines, 1)).encode()
    macros = {
        word[0]
        for first, _, name, rest in directives
        if name == "define" and first in kept and (word := re.match(r"\w+", rest))
    }
    defines = tuple(d for d in flags.defines if d.split("=", 1)[0] not in flags.undefines)
    return Preprocessed(path, original, text, _branches(path, lines, directives, kept), missing, macros, defines)


# ---------------------------------------------------------------- the preprocessor run


def _run_cpp(real: Path, shown: str, flags: Flags, stubs: Path) -> tuple[bytes, list[str]]:
    cmd = [
        _compiler(),
        "-E",
        "-fdirectives-only",
        "-x",
        "c++",
        "-std=c++17",
        *_cuda_defines(real),
        *flags.as_args(),
        *[a for d in default_include_dirs() for a in ("-idirafter", d)],
        "-idirafter",
        str(stubs),
        str(real),
    ]
    missing: list[str] = []
    for _ in range(64):  # one run per header that is not installed here
        try:
            done = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise InputError(shown, "preprocessor", f"the preprocessor ran over {TIMEOUT_S} s") from None
        if done.returncode == 0:
            return done.stdout, missing
        err = done.stderr.decode("utf-8", "replace")
        first = next((m for m in map(_MISSING.match, err.splitlines()) if m), None)
        if first is None:
            absent = (
                f" (not found here, read as empty: {', '.join(m.rsplit(': ', 1)[1] for m in missing)}; "
                "pass their folders with -I)"
                if missing
                else ""
            )
            raise InputError(
                _shown_at(first_error_at(err), real, shown),
                "preprocessor",
                f"the preprocessor stops here: {first_error_msg(err)}; it is the error your "
                f"compiler gives with these flags (-D/-U/-I){absent}",
            )
        header = first["header"]
        stub = stubs / header
        if stub.exists() or ".." in Path(header).parts or Path(header).is_absolute():
            raise InputError(
                _shown_at(first["at"], real, shown), "#include", f"{header} is not found; pass its folder with -I"
            )
        stub.parent.mkdir(parents=True, exist_ok=True)
        stub.write_bytes(b"")
        missing.append(f"{_shown_at(first['at'], real, shown)}: {header}")
    raise InputError(shown, "#include", "more than 64 headers are not found; pass their folders with -I")


def first_error_at(err: str) -> str | None:
    m = next((m for m in map(_ERROR.match, err.splitlines()) if m), None)
    return m["at"] if m else None


def first_error_msg(err: str) -> str:
    m = next((m for m in map(_ERROR.match, err.splitlines()) if m), None)
    return m["msg"] if m else (err.strip().splitlines() or ["(no message)"])[0]


def _shown_at(at: str | None, real: Path, shown: str) -> str:
    """A compiler location in the user's file, as the user named that file."""
    if at is None:
        return shown
    file, line = at.rsplit(":", 1)
    return f"{shown}:{line}" if Path(file).resolve() == real else at


@lru_cache(maxsize=1)
def _compiler() -> str:
    for name in ("g++", "c++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    raise InputError(
        "cuco",
        "preprocessor",
        "no C++ compiler (g++) on PATH: cuco reads your program through the real preprocessor; install g++",
    )


def _cuda_defines(real: Path) -> list[str]:
    """A .cu file is compiled by nvcc, which defines these for its host pass."""
    if real.suffix not in (".cu", ".cuh"):
        return []
    major, minor = _cuda_version()
    return ["-D__CUDACC__", "-D__NVCC__", f"-D__CUDACC_VER_MAJOR__={major}", f"-D__CUDACC_VER_MINOR__={minor}"]


@lru_cache(maxsize=1)
def _cuda_version() -> tuple[int, int]:
    for inc in default_include_dirs():
        header = Path(inc) / "cuda.h"
        if header.is_file():
            m = re.search(rb"#define CUDA_VERSION (\d+)", header.read_bytes())
            if m:
                v = int(m[1])
                return v // 1000, (v % 1000) // 10
    return 12, 0


@lru_cache(maxsize=1)
def default_include_dirs() -> tuple[str, ...]:
    """The CUDA toolkit's and NCCL's headers, searched after the user's -I (as nvcc and a usual NCCL
    install would find them)."""
    dirs = []
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            dirs.append(Path(os.environ[env]) / "include")
    nvcc = shutil.which("nvcc")
    if nvcc:
        dirs.append(Path(nvcc).resolve().parent.parent / "include")
    dirs.append(Path("/usr/local/cuda/include"))
    if os.environ.get("NCCL_HOME"):
        dirs.append(Path(os.environ["NCCL_HOME"]) / "include")
    try:  # the NCCL wheel is optional
        import nvidia.nccl

        dirs += [Path(p) / "include" for p in nvidia.nccl.__path__]
    except ImportError:
        pass
    seen, out = set(), []
    for d in dirs:
        if d.is_dir() and str(d) not in seen:
            seen.add(str(d))
            out.append(str(d))
    return tuple(out)


# ---------------------------------------------------------------- what the preprocessor kept


def _directives(lines: list[str]) -> list[tuple[int, int, str, str]]:
    """Every directive as (first line, last line, name, rest), continuation lines joined."""
    out = []
    i = 0
    in_comment = False
    while i < len(lines):
        line = lines[i]
        start = i
        if not in_comment:
            m = _DIRECTIVE.match(line)
            if m:
                text = line
                while text.endswith("\\") and i + 1 < len(lines):
                    i += 1
                    text = text[:-1] + " " + lines[i]
                m = _DIRECTIVE.match(text)
                assert m is not None  # the joined text begins with the line that matched
                rest = re.sub(r"/\*.*?\*/|//.*$", "", m[2]).strip()
                out.append((start + 1, i + 1, m[1], rest))
                i += 1
                continue
        # track block comments so that a '#' inside one is not a directive
        code = re.sub(r'"(?:[^"\\]|\\.)*"', '""', line)
        pos = 0
        while True:
            if in_comment:
                end = code.find("*/", pos)
                if end < 0:
                    break
                in_comment, pos = False, end + 2
            else:
                sl, bl = code.find("//", pos), code.find("/*", pos)
                if bl < 0 or (0 <= sl < bl):
                    break
                in_comment, pos = True, bl + 2
        i += 1
    return out


def _kept_lines(out: bytes, real: str, directives, n_lines: int) -> set[int]:
    """Line numbers of the user's file that the preprocessor kept (code and the directives that matter to
    the program: #define, #undef, #pragma, #include)."""
    printed: set[int] = set()
    included_from: set[int] = set()
    cur, line = None, 0
    for raw in out.split(b"\n"):
        m = _MARKER.match(raw)
        if m:
            num, name, flags = int(m[1]), m[2].decode("utf-8", "replace"), m[3].split()
            if cur == real and b"1" in flags:
                included_from.add(line)  # the #include at the line before the header starts
            cur, line = name, num
            if name == real and b"2" in flags:
                included_from.add(num - 1)
            continue
        if cur == real and raw.strip():
            printed.add(line)
        line += 1
    kept = set(printed)
    for first, last, name, _ in directives:
        if name in CONDITIONALS:
            kept.discard(first)
            continue
        active = first in printed or (name in ("include", "include_next") and first in included_from)
        for ln in range(first, last + 1):
            if active:
                kept.add(ln)
            else:
                kept.discard(ln)
    return {ln for ln in kept if 1 <= ln <= n_lines}


def _branches(path: str, lines: list[str], directives, kept: set[int]) -> list[Branch]:
    cond_lines = {d[0] for d in directives if d[2] in CONDITIONALS}
    directive_lines = {ln for d in directives for ln in range(d[0], d[1] + 1)}
    stack: list[list] = []
    branches: list[Branch] = []

    def decide(start: int, end: int) -> bool | None:
        code = [
            ln
            for ln in range(start, end + 1)
            if ln not in cond_lines and (ln in directive_lines or _is_code(lines[ln - 1]))
        ]
        if not code:
            return None
        return any(ln in kept for ln in code)

    for first, last, name, rest in directives:
        if name not in CONDITIONALS:
            continue
        text = f"#{name} {rest}".strip()
        if name in ("if", "ifdef", "ifndef"):
            stack.append([(first, text, last + 1)])
        elif not stack:
            continue  # an unbalanced directive: the preprocessor has already said so
        elif name == "endif":
            group = stack.pop()
            bounds = [b[0] for b in group[1:]] + [first]
            for (at, t, body), stop in zip(group, bounds):
                branches.append(Branch(f"{path}:{at}", t, decide(body, stop - 1), stop - 1, group[0][1]))
        else:
            stack[-1].append((first, text, last + 1))
    branches.sort(key=lambda b: int(b.at.rsplit(":", 1)[1]))
    return branches


def _is_code(line: str) -> bool:
    s = line.strip()
    return bool(s) and not s.startswith(("//", "/*", "*"))


# ---------------------------------------------------------------- compile_commands.json


def flags_from_compile_commands(db_path: str, files: list[str]) -> dict[str, Flags]:
    """The -D/-U/-I that a compile_commands.json (CMake, Bear) gives each of the files."""
    try:
        entries = json.loads(Path(db_path).read_text())
    except FileNotFoundError:
        raise InputError(
            db_path,
            "--compile-commands",
            "no such file; name the compile_commands.json your "
            "build writes (CMake: -DCMAKE_EXPORT_COMPILE_COMMANDS=ON; Bear: bear -- make)",
        ) from None
    except (OSError, ValueError) as exc:
        raise InputError(db_path, "--compile-commands", f"not a JSON compilation database ({exc})") from None
    if not isinstance(entries, list):
        raise InputError(db_path, "--compile-commands", "not a JSON compilation database (a list of entries)")
    by_file: dict[str, Flags] = {}
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or "file" not in e or "directory" not in e:
            raise InputError(db_path, f"[{i}]", 'each entry needs "directory", "file" and "command" or "arguments"')
        directory = Path(e["directory"])
        args = e.get("arguments") or shlex.split(e.get("command", ""))
        by_file[str((directory / e["file"]).resolve())] = _flags_of(args, directory)
    out = {}
    for f in files:
        found = by_file.get(str(Path(f).resolve()))
        if found is None:
            raise InputError(db_path, f, f"no entry compiles {f}; name a file the database lists")
        out[f] = found
    return out


def _flags_of(args: list[str], directory: Path) -> Flags:
    defines: list[str] = []
    undefines: list[str] = []
    includes: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        for opt, target in (("-D", defines), ("-U", undefines), ("-I", includes), ("-isystem", includes)):
            if a == opt and i + 1 < len(args):
                i += 1
                target.append(args[i])
                break
            if a.startswith(opt) and len(a) > len(opt) and not (opt == "-I" and a.startswith("-isystem")):
                target.append(a[len(opt) :])
                break
        i += 1
    includes = [str((directory / d).resolve()) if not os.path.isabs(d) else d for d in includes]
    return Flags(tuple(defines), tuple(undefines), tuple(includes))


def flag_to_enable(branch: Branch) -> str:
    """The flag that would make an inactive branch the one compiled."""
    words = branch.directive.split(None, 1)
    kind, cond = words[0], (words[1] if len(words) > 1 else "")
    if kind == "#ifdef" and cond.isidentifier():
        return f"-D{cond}"
    if kind == "#ifndef" and cond.isidentifier():
        return f"-U{cond}"
    if kind in ("#if", "#elif") and cond.isidentifier():
        return f"-D{cond}=1"
    if kind in ("#if", "#elif") and cond.startswith("defined") and cond[7:].strip(" ()").isidentifier():
        return f"-D{cond[7:].strip(' ()')}"
    if kind == "#else" and branch.opens:
        first = branch.opens.split(None, 1)
        if first[0] == "#ifdef" and len(first) > 1:
            return f"-U{first[1]}"
        if first[0] == "#ifndef" and len(first) > 1:
            return f"-D{first[1]}"
        if first[0] == "#if" and len(first) > 1 and first[1].isidentifier():
            return f"-D{first[1]}=0"
    return f"the -D/-U flags that make `{branch.directive}` hold"


def terminate_statement_macros(text: bytes, macros: set[str]) -> bytes:
    """A statement macro used as its author wrote it (`PUSH_RANGE("solve", 0)` or `POP_RANGE` alone on a
    line, its expansion bringing the `;` or nothing) gets the `;` the parser needs; the line's text and
    every position before it are unchanged."""
    out = []
    for line in text.split(b"\n"):
        m = re.match(rb"^\s*([A-Za-z_]\w*)\s*(\(.*\))?\s*$", line)
        if m and m[1].decode() in macros:
            line = line.rstrip() + b";"
        out.append(line)
    return b"\n".join(out)


def brace_launch_configs(text: bytes) -> bytes:
    """`k<<<grid, {32, 32, 1}, smem, stream>>>` (a braced dim3, which nvcc accepts) is read as the same
    launch with `dim3(32, 32, 1)`: the parser's grammar has no braced list there. Lines do not move."""
    out, pos = [], 0
    while True:
        start = text.find(b"<<<", pos)
        end = text.find(b">>>", start + 3) if start >= 0 else -1
        if start < 0 or end < 0:
            break
        config = text[start:end]
        if b"{" in config:
            config = config.replace(b"{", b"dim3(").replace(b"}", b")")
        out += [text[pos:start], config]
        pos = end
    out.append(text[pos:])
    return b"".join(out)
