"""What a CUDA candidate may call, as declarations: generated from the frozen headers themselves (the ones
the candidate includes) and from the NCCL device headers, so a model sees exact struct fields and
signatures instead of names.

`declarations(text)` keeps a header's types, fields, prototypes, `#define` constants and the comments
right above or beside them, and drops function bodies (a signature ends with `;`) and other preprocessor
lines. NCCL's declarations come from the headers installed here (`$NCCL_HOME/include` or the
`nvidia-nccl` wheel) when their `NCCL_VERSION_CODE` is the one the workload names; otherwise from the
snapshot shipped for that version (`engine/llm/reference/`), so a prompt is the same on every machine.
`python -m engine.llm.declarations --snapshot` rewrites the snapshot from the installed headers.
"""

from __future__ import annotations

import argparse
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..workload import Workload

REFERENCE = Path(__file__).parent / "reference"
# The device API and the host calls that make its windows, in the order a model reads them.
NCCL_DEVICE_HEADERS = ("nccl_device/core.h", "nccl_device/ptr.h", "nccl_device/lsa_barrier.h", "nccl_device/coop.h")
NCCL_DEVCOMM = "nccl_device/impl/comm__types.h"
NCCL_HOST_CALLS = (
    "ncclMemAlloc",
    "ncclMemFree",
    "ncclCommWindowRegister",
    "ncclCommWindowDeregister",
    "ncclGetVersion",
    "ncclAllGather",
    "ncclGroupStart",
    "ncclGroupEnd",
)
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)
NCCL_VERSION = re.compile(r"\bNCCL\s+(\d+)\.(\d+)\.(\d+)")
AGGREGATE = re.compile(r"^(?:template\s*<[^>]*>\s*)?(?:typedef\s+)?(?:struct|class|union|enum|namespace)\b")
EXTERN_C = re.compile(r'^extern\s+"C"\s*$')


def _strip_block_comments(text: str) -> str:
    return re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.DOTALL)


def _skip_body(text: str, i: int) -> int:
    """The index after the `}` matching the `{` at `i`."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == "/" and text.startswith("//", i):
            i = text.find("\n", i)
            if i < 0:
                return len(text)
        i += 1
    return len(text)


def declarations(text: str) -> str:
    """The header's declarations (see the module's docstring)."""
    text = _strip_block_comments(text)
    out: list[str] = []
    indent = 0
    stmt = ""  # the statement being read, on one line
    parens = 0  # open parentheses in it: a `{` inside them is a default argument, not a body
    comments: list[str] = []  # comment lines right above it

    def emit(line: str) -> None:
        out.extend(comments)
        comments.clear()
        out.append("  " * indent + line)

    i = 0
    while i < len(text):
        line_end = text.find("\n", i)
        line_end = len(text) if line_end < 0 else line_end
        if not stmt.strip() and (i == 0 or text[i - 1] == "\n"):  # a line of its own
            line = text[i:line_end].strip()
            if line.startswith("#"):
                if re.match(r"#\s*define\s+[A-Z_][A-Z0-9_]*\s+\S", line) and not line.endswith("\\"):
                    emit(line)
                i = line_end + 1
                continue
            if line.startswith("//"):
                comments.append("  " * indent + line)
                i = line_end + 1
                continue
            if not line:
                comments.clear()
                i = line_end + 1
                continue
        c = text[i]
        if c == "/" and text.startswith("//", i):  # a comment after code: kept beside a finished declaration
            if out and not stmt.strip():
                out[-1] += "  " + text[i:line_end].strip()
            i = line_end
            continue
        if c in "()":
            parens += 1 if c == "(" else -1
        if parens > 0 or c not in ";{}":
            stmt += " " if c == "\n" else c
            i += 1
            continue
        head = " ".join(stmt.split())
        stmt, parens = "", 0
        if c == ";":
            emit(head + ";")
            i += 1
        elif c == "{" and (AGGREGATE.match(head) or EXTERN_C.match(head)):
            emit(head + " {")
            indent += 1
            i += 1
        elif c == "{":  # a function: its signature only (an initialiser list dropped)
            emit(re.sub(r"\)\s*:\s*[A-Za-z_].*$", ")", head) + ";")
            i = _skip_body(text, i)
            rest = text[i:line_end]
            if rest.strip().startswith(";"):
                i += rest.index(";") + 1
        else:  # `}`: an aggregate ends (an enum's last values first)
            if head:
                emit(head)
            indent = max(0, indent - 1)
            close = text[i:line_end]
            semi = close.find(";")
            tail = close[: semi + 1] if semi >= 0 else "}"
            emit(" ".join(tail.split()))
            i += len(tail)
    return "\n".join(line for line in out if line.strip() not in ("", ";"))


@dataclass(frozen=True)
class NcclHeaders:
    version: str  # "2.28.9"
    text: str  # the declarations
    source: str  # where they were read from, for the prompt


def included_frozen(workload: Workload) -> list[tuple[str, str]]:
    """(name, text) of every frozen header the seed includes, in its include order (transitively)."""
    files = workload.harness_files
    out: list[tuple[str, str]] = []
    pending = INCLUDE.findall(workload.seed_source)
    seen: set[str] = set()
    while pending:
        name = pending.pop(0).rsplit("/", 1)[-1]
        if name in seen or name not in files or not name.endswith((".h", ".cuh", ".hpp")):
            continue
        seen.add(name)
        text = files[name].decode("utf-8", "replace")
        out.append((name, text))
        pending += INCLUDE.findall(text)
    return out


def expected_nccl(workload: Workload) -> str | None:
    """The NCCL version the workload is written for (its API notes say `NCCL X.Y.Z`), if any."""
    m = NCCL_VERSION.search(workload.api_notes or "")
    return ".".join(m.groups()) if m else None


def installed_nccl_include() -> Path | None:
    """The include directory of the NCCL this machine builds with (`$NCCL_HOME`, else the wheel)."""
    candidates = []
    if os.environ.get("NCCL_HOME"):
        candidates.append(Path(os.environ["NCCL_HOME"]) / "include")
    try:
        import nvidia.nccl  # the wheel (optional)

        candidates += [Path(p) / "include" for p in nvidia.nccl.__path__]
    except ImportError:
        pass
    return next((c for c in candidates if (c / "nccl.h").is_file() and (c / "nccl_device").is_dir()), None)


def header_version(include: Path) -> str | None:
    text = (include / "nccl.h").read_text(errors="replace")
    parts = [re.search(rf"#define NCCL_{k}\s+(\d+)", text) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(p.group(1) for p in parts) if all(parts) else None  # type: ignore[union-attr]


def nccl_declarations(include: Path) -> str:
    """The device API's declarations and the host calls that set it up, from an NCCL include directory."""
    parts = []
    for rel in NCCL_DEVICE_HEADERS:
        parts.append(f"// {rel}\n" + declarations((include / rel).read_text(errors="replace")))
    devcomm = declarations((include / NCCL_DEVCOMM).read_text(errors="replace"))
    m = re.search(r"^struct ncclDevComm \{.*?^\};", devcomm, flags=re.MULTILINE | re.DOTALL)
    if m:
        parts.append(f"// {NCCL_DEVCOMM} (fields a kernel may read)\n" + m.group(0))
    host_decls = declarations((include / "nccl.h").read_text(errors="replace")).splitlines()
    calls = re.compile(rf"^\s*ncclResult_t\s+({'|'.join(NCCL_HOST_CALLS)})\(")
    host = [line.strip() for line in host_decls if calls.match(line) or "NCCL_WIN_COLL_SYMMETRIC" in line]
    parts.append("// nccl.h (host: memory, windows, the collectives the seeds use)\n" + "\n".join(host))
    # GIN (network), multimem (NVLS: never used here) and the rail team do not apply to one NVLink node
    off = re.compile(r"[Gg]in|[Mm]ultimem|LLA2A|Rail")
    return "\n\n".join("\n".join(x for x in part.splitlines() if not off.search(x)) for part in parts)


def snapshot_path(version: str) -> Path:
    return REFERENCE / f"nccl-{version}-device.h.txt"


def nccl_headers(workload: Workload) -> NcclHeaders | None:
    """NCCL's declarations for this workload's version: the installed headers' when they are that version,
    else the shipped snapshot; None for a workload that names no version or a version with neither."""
    version = expected_nccl(workload)
    if version is None:
        return None
    include = installed_nccl_include()
    if include is not None and header_version(include) == version:
        return NcclHeaders(version, nccl_declarations(include), f"NCCL {version}'s headers")
    snap = snapshot_path(version)
    if snap.is_file():
        return NcclHeaders(version, snap.read_text(), f"NCCL {version}'s headers")
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description="NCCL device-API declarations as cuco's CUDA prompts show them")
    parser.add_argument("--snapshot", action="store_true", help="write the snapshot for the installed NCCL")
    args = parser.parse_args()
    include = installed_nccl_include()
    if include is None:
        print("no NCCL headers here: set NCCL_HOME or pip install nvidia-nccl-cu13")
        return 1
    version = header_version(include)
    text = nccl_declarations(include)
    if args.snapshot and version:
        snapshot_path(version).parent.mkdir(exist_ok=True)
        snapshot_path(version).write_text(text + "\n")
        print(f"wrote {snapshot_path(version)}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
