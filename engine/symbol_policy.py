"""The symbol policy: a candidate's object file is inspected, before anything runs, for ways to reach the
harness it is linked with.

The candidate is compiled alone to an object (candidate.o) and linked into one executable with the frozen
harness. A global definition there could take the place of a function the harness or its libraries call
(the clock, memcpy, a CUDA or NCCL entry point); a constructor, an ifunc resolver or an init_array entry
runs before `main`; a call to mprotect, dlsym or ptrace could patch the harness. The rules (what may be
defined, which sections, which calls) are data: workloads/_harness/policy.yaml, extended per workload by
a `policy:` section in workload.yaml. The ELF is read with pyelftools (pure Python, pinned): the engine
inspects the object it got back from the build job on any node, with nothing to install there.
"""

from __future__ import annotations

import fnmatch
import functools
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection
from elftools.elf.sections import SymbolTableSection

from remote.errors import InputError

from .blocks import parse_blocks, strip_comments

POLICY_FILE = Path(__file__).resolve().parent.parent / "workloads" / "_harness" / "policy.yaml"
# What nvcc adds to every CUDA translation unit: the static constructor that registers its fatbinary and
# kernels, and the helpers it calls. Recognised by these names in a CUDA object only, and only as local
# functions (a candidate cannot define them: the names clash with nvcc's own in the same unit).
NVCC_REGISTRATION = (
    "__sti____cudaRegisterAll",
    "__nv_cudaEntityRegisterCallback",
    "__cudaUnregisterBinaryUtil",
    "__nv_save_fatbinhandle_for_managed_rt",
    "____nv_dummy_param_ref",
)
NVCC_SECTIONS = (".nv_fatbin", ".nvFatBinSegment", "__nv_module_id", ".nv_module_id", ".rela.nvFatBinSegment")
_MANGLED_NVCC = re.compile(r"^_ZL\d+(" + "|".join(re.escape(n) for n in NVCC_REGISTRATION) + r")")
EXTENSION_KEYS = ("define", "sections", "allow")
# A C++17 inline variable (libcu++'s customization point objects, thrust::seq: any CUB or Thrust header) is a
# GNU "unique" symbol; pyelftools names that binding by its number's range, STB_LOOS.
WEAK_BINDINGS = ("STB_WEAK", "STB_GNU_UNIQUE", "STB_LOOS")


class PolicyError(Exception):
    """The object breaks the symbol policy; the message names the symbol and the rule."""


@dataclass(frozen=True)
class Policy:
    language: str
    define: tuple[str, ...]
    sections: tuple[str, ...]
    deny: tuple[tuple[str, tuple[str, ...]], ...]  # (what it is, patterns)
    allow: tuple[str, ...]
    registration_only: tuple[str, ...] = ()
    deny_cuda: tuple[str, ...] = ()
    workload_allow: tuple[str, ...] = ()  # a workload's own additions: they win over `deny`

    def denied(self, name: str) -> str | None:
        for what, patterns in self.deny:
            if _match(name, patterns):
                return what
        if self.language == "cuda" and _match(name, self.deny_cuda):
            return "a CUDA or NCCL call that reconfigures the device or the communicator under the harness"
        return None


@dataclass
class Verdict:
    ok: bool
    reasons: list[str] = field(default_factory=list)

    @property
    def reason(self) -> str:
        return "; ".join(self.reasons)


def _match(name: str, patterns: tuple[str, ...]) -> bool:
    return _pattern(patterns).match(name) is not None


@functools.lru_cache(maxsize=256)
def _pattern(patterns: tuple[str, ...]) -> re.Pattern:
    """The shell patterns as one regular expression (compiled once per list)."""
    return re.compile("|".join(f"(?:{fnmatch.translate(p)})" for p in patterns) or r"(?!)")


def _strings(value: Any, where: str, file: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(file, where, "must be a list of name patterns (strings)")
    return tuple(value)


def load_policy(language: str, extension: Any = None, extension_file: str = "workload.yaml") -> Policy:
    """The shipped policy for `language` (cpp | cuda), plus a workload's `policy:` extension, which may
    only add names: {define: [...], sections: [...], allow: [...]}."""
    data = yaml.safe_load(POLICY_FILE.read_text())
    base = str(POLICY_FILE)
    allow = _strings(data["allow"]["cpp"], "allow.cpp", base)
    if language == "cuda":
        allow += _strings(data["allow"]["cuda"], "allow.cuda", base)
    define = _strings(data["define"], "define", base)
    sections = _strings(data["sections"], "sections", base)
    workload_allow: tuple[str, ...] = ()
    if extension is not None:
        if not isinstance(extension, dict):
            raise InputError(extension_file, "policy", "must be a mapping with define/sections/allow lists")
        unknown = sorted(set(extension) - set(EXTENSION_KEYS))
        if unknown:
            raise InputError(
                extension_file,
                f"policy.{unknown[0]}",
                f"unknown key; a workload may extend only {', '.join(EXTENSION_KEYS)}",
            )
        define += _strings(extension.get("define", []), "policy.define", extension_file)
        sections += _strings(extension.get("sections", []), "policy.sections", extension_file)
        workload_allow = _strings(extension.get("allow", []), "policy.allow", extension_file)
    deny = tuple((what, _strings(p, f"deny.{what}", base)) for what, p in data["deny"].items())
    registration = _strings(data.get("registration_only", {}).get(language, []), "registration_only", base)
    return Policy(
        language,
        define,
        sections,
        deny,
        allow,
        registration,
        _strings(data.get("deny_cuda", []), "deny_cuda", base),
        workload_allow,
    )


def policy_for(workload: Any) -> Policy:
    extension = workload.extra.get("policy")
    return _cached_policy(
        workload.language, json.dumps(extension, sort_keys=True), str(workload.root / "workload.yaml")
    )


@functools.lru_cache(maxsize=32)
def _cached_policy(language: str, extension_json: str, extension_file: str) -> Policy:
    """Read once per (language, extension): the engine checks every candidate against the same policy."""
    return load_policy(language, json.loads(extension_json), extension_file)


# ----- the inspection -----------------------------------------------------------------------------


def _plain(name: str) -> str:
    """A local nvcc helper's plain name (`_ZL24__sti____cudaRegisterAllv` -> `__sti____cudaRegisterAll`)."""
    m = _MANGLED_NVCC.match(name)
    return m.group(1) if m else name


class _Object:
    def __init__(self, data: bytes):
        try:
            self.elf = ELFFile(io.BytesIO(data))
        except ELFError as exc:
            raise PolicyError(f"the candidate's object is not an ELF file ({exc})") from None
        if self.elf["e_type"] != "ET_REL":
            raise PolicyError(f"the candidate's object is {self.elf['e_type']}, not a relocatable object")
        symtab = self.elf.get_section_by_name(".symtab")
        if symtab is not None and not isinstance(symtab, SymbolTableSection):
            raise PolicyError("the candidate's object has a .symtab section that is not a symbol table")
        self.symbols = list(symtab.iter_symbols()) if symtab is not None else []
        self.sections = list(self.elf.iter_sections())
        self._functions: dict[Any, list[tuple[int, int, str]]] | None = None
        self.comdat: set[int] = set()  # indices of sections in a COMDAT group
        for sec in self.sections:
            if sec["sh_type"] == "SHT_GROUP":
                words = sec.data()
                for i in range(4, len(words), 4):
                    self.comdat.add(int.from_bytes(words[i : i + 4], "little"))

    def function_at(self, shndx: int, offset: int) -> str | None:
        """The name of the function (any binding) whose code in section `shndx` covers `offset`."""
        if self._functions is None:
            self._functions = {}
            for s in self.symbols:
                if s["st_info"]["type"] == "STT_FUNC":
                    self._functions.setdefault(s["st_shndx"], []).append(
                        (s["st_value"], s["st_value"] + max(1, s["st_size"]), s.name)
                    )
        for start, end, name in self._functions.get(shndx, ()):
            if start <= offset < end:
                return name
        return None

    def relocations(self):
        """(section the relocation applies to, offset, target symbol name or '', addend, target symbol)."""
        for sec in self.sections:
            if not isinstance(sec, RelocationSection):
                continue
            target_index = sec["sh_info"]
            for r in sec.iter_relocations():
                index = r["r_info_sym"]
                sym = self.symbols[index] if index < len(self.symbols) else None
                yield (
                    target_index,
                    r["r_offset"],
                    (sym.name if sym is not None else ""),
                    r["r_addend"] if r.is_RELA() else 0,
                    sym,
                )


def _defined(sym) -> bool:
    return sym["st_shndx"] not in ("SHN_UNDEF",)


# Replaceable functions: a definition of one anywhere in the program (weak, COMDAT, inline with its address
# taken) replaces it for the harness and every library, and runs before the harness counts its threads.
REPLACEABLE = ("_Znw*", "_Zna*", "_Zdl*", "_Zda*")
# The libraries every candidate is linked with, whose exported names a weak or COMDAT definition in the
# executable would take the place of (the executable comes first in symbol lookup).
LIBRARY_SONAMES = ("libstdc++.so.6", "libgcc_s.so.1", "libc.so.6", "libm.so.6")
LIBRARY_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/lib64",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib",
)


@functools.lru_cache(maxsize=1)
def library_exports() -> frozenset[str]:
    """The names this machine's C and C++ runtime libraries export (their .dynsym), read once. Empty when
    none is found: then only the REPLACEABLE patterns and the `_Z` rule stand (docs/threat-model.md)."""
    names: set[str] = set()
    for soname in LIBRARY_SONAMES:
        for d in LIBRARY_DIRS:
            path = Path(d) / soname
            if not path.is_file():
                continue
            try:
                with open(path, "rb") as f:
                    dynsym = ELFFile(f).get_section_by_name(".dynsym")
                    if isinstance(dynsym, SymbolTableSection):
                        names.update(
                            sym.name.split("@")[0]
                            for sym in dynsym.iter_symbols()
                            if sym.name and sym["st_shndx"] != "SHN_UNDEF"
                        )
            except (OSError, ELFError):
                continue
            break
    return frozenset(names)


def _executable(sec) -> bool:
    return bool(sec["sh_flags"] & 0x4)  # SHF_EXECINSTR


def check_object(data: bytes, policy: Policy) -> Verdict:
    """Every rule the object breaks, each naming its symbol or section (empty when it passes)."""
    try:
        obj = _Object(data)
    except PolicyError as exc:
        return Verdict(False, [str(exc)])
    reasons: list[str] = []
    cuda = policy.language == "cuda"
    is_nvcc = cuda and any(s.name in NVCC_SECTIONS for s in obj.sections)
    registration_funcs = {
        s.name
        for s in obj.symbols
        if is_nvcc
        and s["st_info"]["bind"] == "STB_LOCAL"
        and s["st_info"]["type"] == "STT_FUNC"
        and _plain(s.name) in NVCC_REGISTRATION
    }

    # 1. Sections of its own.
    for sec in obj.sections:
        if _match(sec.name, policy.sections) or (is_nvcc and sec.name in NVCC_SECTIONS):
            continue
        if sec.name in (".ctors", ".dtors", ".fini_array", ".preinit_array", ".init", ".fini") or sec.name.startswith(
            (".ctors.", ".dtors.", ".fini_array.", ".init_array.", ".preinit_array.")
        ):
            reasons.append(f"candidate has a `{sec.name}` section: code that runs at load or exit time is not allowed")
        elif sec.name.startswith((".gnu.version", ".symver")):
            reasons.append(f"candidate has symbol versioning (`{sec.name}`): not allowed")
        else:
            reasons.append(
                f"candidate has a section of its own, `{sec.name}`: only the compiler's ordinary sections are allowed"
            )

    # 2. Load-time code: every init_array entry must be nvcc's registration constructor.
    for sec_index, _off, name, addend, sym in obj.relocations():
        target = obj.elf.get_section(sec_index)
        if not target.name.startswith(".init_array"):
            continue
        func = name
        if sym is not None and sym["st_info"]["type"] == "STT_SECTION":
            func = obj.function_at(sym["st_shndx"], addend) or ""
        if func not in registration_funcs:
            reasons.append(
                f"candidate has a constructor (`{func or '?'}` in .init_array): code that runs before "
                "the harness is not allowed"
            )

    # 2b. Data in an executable section: bytes of its own that run as code (a syscall stub) with no `asm`.
    for s in obj.symbols:
        if s["st_info"]["type"] in ("STT_OBJECT", "STT_TLS", "STT_COMMON") and isinstance(s["st_shndx"], int):
            sec = obj.elf.get_section(s["st_shndx"])
            if _executable(sec):
                reasons.append(
                    f"candidate puts data (`{s.name}`) in an executable section (`{sec.name}`): bytes "
                    "that run as code are not allowed"
                )

    # 3. What it defines.
    kernels = _kernel_stubs(obj) if is_nvcc else set()
    exports = library_exports()
    seen_at: dict[tuple, str] = {}
    for s in obj.symbols:
        bind, kind = s["st_info"]["bind"], s["st_info"]["type"]
        if "@" in s.name:
            reasons.append(f"candidate uses symbol versioning (`{s.name}`): not allowed")
            continue
        if kind == "STT_GNU_IFUNC" or kind == "STT_LOOS":
            reasons.append(f"candidate defines `{s.name}` as an ifunc: a resolver runs at load time; not allowed")
            continue
        if bind == "STB_LOCAL" or not _defined(s):
            continue
        if _match(s.name, REPLACEABLE):
            reasons.append(
                f"candidate defines `{s.name}` (operator new or delete): a replaceable function would "
                "take their place for the harness and every library; not allowed, inline or not"
            )
            continue
        if s["st_shndx"] == "SHN_COMMON":
            reasons.append(f"candidate defines `{s.name}` (a common symbol): only the ABI may be defined")
            continue
        if bind in WEAK_BINDINGS:
            if s.name in exports:
                reasons.append(
                    f"candidate defines `{s.name}`, a name the C or C++ runtime exports: its definition "
                    "would take the library's place for the harness; not allowed, weak or COMDAT"
                )
                continue
            if s["st_shndx"] in obj.comdat and (s.name.startswith("_Z") or s.name.startswith("DW.ref.")):
                continue  # inline or template code the compiler emits (the harness's own copy wins the link)
            reasons.append(f"candidate defines `{s.name}` as a weak symbol: only the ABI may be defined, strongly")
            continue
        key = (s["st_shndx"], s["st_value"], kind)
        if kind == "STT_FUNC" and key in seen_at:
            reasons.append(f"candidate defines `{s.name}` as an alias of `{seen_at[key]}`: not allowed")
            continue
        seen_at[key] = s.name
        if _match(s.name, policy.define) or s.name in kernels:
            continue
        reasons.append(
            f"candidate defines `{s.name}`: only the ABI "
            f"({', '.join(policy.define)}) may be defined (make helpers and globals `static`)"
        )

    # 4. What it calls or reads.
    called_at: dict[str, list[tuple[int, int]]] = {}  # name -> (section, offset) of each reference
    for sec_index, offset, name, _addend, sym in obj.relocations():
        if sym is not None and not _defined(sym) and name:
            called_at.setdefault(name, []).append((sec_index, offset))
    for s in obj.symbols:
        if s.name and not _defined(s) and s["st_info"]["type"] != "STT_SECTION":
            called_at.setdefault(s.name, [])
    for name in sorted(called_at):
        what = policy.denied(name)
        if _match(name, policy.workload_allow):
            continue
        if _match(name, policy.registration_only):
            sites = {obj.function_at(sec, off) or obj.elf.get_section(sec).name for sec, off in called_at[name]}
            outside = sorted(site for site in sites if site not in registration_funcs)
            if outside:
                reasons.append(f"candidate calls `{name}` from `{outside[0]}`: only nvcc's registration code may")
        elif what is not None:
            reasons.append(f"candidate calls `{name}` ({what}): not allowed")
        elif not _match(name, policy.allow):
            reasons.append(
                f"candidate calls `{name}`, which is not on the {policy.language} allow-list "
                "(workloads/_harness/policy.yaml; a workload may extend it under `policy.allow`)"
            )
    return Verdict(not reasons, reasons)


def _kernel_stubs(obj: _Object) -> set[str]:
    """The host side of a CUDA candidate's kernels, recognised by nvcc's pairing: a kernel `K` (a C++
    name) has a stub `_Z<n>__device_stub__<K without its leading underscore>...`. Both may be defined."""
    names = {s.name for s in obj.symbols if _defined(s) and s["st_info"]["bind"] != "STB_LOCAL"}
    stubs = {n for n in names if re.match(r"^_Z\d+__device_stub__", n)}
    inner = [re.sub(r"^_Z\d+__device_stub__", "", n) for n in stubs]
    kernels = {n for n in names if n.startswith("_Z") and any(i.startswith(n[1:]) for i in inner)}
    return stubs | kernels


def check(data: bytes, workload: Any) -> Verdict:
    return check_object(data, policy_for(workload))


# ----- the block rule for inline assembly ----------------------------------------------------------

_ASM_RE = re.compile(r"\b(asm|__asm__|__asm)\b")
_DEVICE_RE = re.compile(r"\b(__device__|__global__)\b")


def _enclosing_headers(code: str, pos: int) -> list[str]:
    """The text before each `{` still open at `pos` (a function's or a type's head), outermost first."""
    stack: list[str] = []
    start = 0
    for i, ch in enumerate(code[:pos]):
        if ch == "{":
            stack.append(code[start:i])
            start = i + 1
        elif ch == "}":
            if stack:
                stack.pop()
            start = i + 1
        elif ch == ";":
            start = i + 1
    return stack


def check_source(source: str, language: str) -> list[str]:
    """Inline assembly in an EVOLVE-BLOCK is refused unless it is device PTX (inside a __device__ or
    __global__ function of a CUDA candidate): host assembly could make system calls the object's symbol
    table never shows."""

    reasons = []
    for block in parse_blocks(source):
        code, _ = strip_comments(block.body)
        code = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', code)  # asm inside a string is no asm
        for m in _ASM_RE.finditer(code):
            line = block.start + 2 + code.count("\n", 0, m.start())
            if language == "cuda" and any(_DEVICE_RE.search(h) for h in _enclosing_headers(code, m.start())):
                continue
            where = "host code" if language == "cuda" else "a C++ candidate"
            reasons.append(
                f"line {line}: inline assembly (`{m.group(1)}`) in {where} is not allowed "
                f"(EVOLVE-BLOCK '{block.name}'): only device PTX may use asm"
            )
    return reasons
