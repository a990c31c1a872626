"""Load and validate a workload folder (`workload.yaml`, the candidate, variants, harness files).

Every problem is an `InputError` naming the file and the field. The format: docs/workload-format.md.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from remote.errors import InputError
from remote.textfiles import read_text

from . import blocks, symbol_policy
from .design_space import DesignSpace, Dimension, Variant
from .stages import STAGES

SHIPPED_DIR = Path(__file__).resolve().parent.parent / "workloads"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


@dataclass(frozen=True)
class ProblemConfig:
    name: str
    public: bool
    bench: bool
    params: dict[str, Any]


@dataclass
class Workload:
    name: str
    description: str
    language: str
    ranks: int
    root: Path
    candidate_file: str
    seed_source: str
    harness_files: dict[str, bytes]  # flat name -> content (sources and headers)
    harness_sources: list[str]  # flat names compiled as translation units
    build_command: str
    build_nccl: bool
    cache_frozen: bool
    harness_nonce: bool
    launch_command: list[str]
    launch_gpus: int
    launch_env: dict[str, str]
    timeouts: dict[str, float]
    warmup: int
    iters: int
    configs: list[ProblemConfig]
    tolerances: dict[str, float]
    design_space: DesignSpace
    task: str = ""
    api_notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    all_configs: list[ProblemConfig] = field(default_factory=list)  # before the ranks filter

    @property
    def candidate_name(self) -> str:
        return Path(self.candidate_file).name

    @property
    def public_configs(self) -> list[ProblemConfig]:
        return [c for c in self.configs if c.public]

    @property
    def bench_configs(self) -> list[ProblemConfig]:
        return [c for c in self.configs if c.bench]

    def with_ranks(self, ranks: int) -> Workload:
        """The same workload for jobs of `ranks` ranks (GPUs for CUDA): configs that name another
        size in `params.ranks` are left out."""
        configs = [c for c in self.all_configs if c.params.get("ranks") in (None, ranks)]
        if not configs or not any(c.bench for c in configs):
            raise InputError(
                str(self.root / "workload.yaml"),
                "configs",
                f"no bench config applies to {ranks} ranks (see params.ranks)",
            )
        return dataclasses.replace(
            self,
            ranks=ranks,
            configs=configs,
            all_configs=self.all_configs,
            launch_gpus=ranks if self.language == "cuda" else self.launch_gpus,
        )


def resolve_workload_path(spec: str, cwd: Path | None = None) -> Path:
    """A path, or the name of a shipped workload, or one under ./workloads/."""
    cwd = cwd or Path.cwd()
    p = Path(spec)
    candidates = [p if p.is_absolute() else cwd / p, cwd / "workloads" / spec, SHIPPED_DIR / spec]
    for c in candidates:
        if (c / "workload.yaml").is_file():
            return c.resolve()
    if p.name == "workload.yaml" and p.is_file():
        return p.parent.resolve()
    shipped = (
        sorted(d.name for d in SHIPPED_DIR.iterdir() if (d / "workload.yaml").is_file()) if SHIPPED_DIR.is_dir() else []
    )
    raise InputError(
        spec,
        "WORKLOAD",
        f"no workload.yaml there, under ./workloads/ or shipped with cuco (shipped: {', '.join(shipped) or 'none'})",
    )


class _Fields:
    """Typed access to a YAML mapping with errors that name the file and the dotted field."""

    def __init__(self, file: Path | str, data: Any, prefix: str = ""):
        self.file, self.prefix = str(file), prefix
        if not isinstance(data, dict):
            raise InputError(self.file, prefix or "(top level)", "must be a mapping of fields")
        self.data = data

    def path(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, key: str, message: str) -> InputError:
        return InputError(self.file, self.path(key), message)

    def get(self, key: str, kind: type | tuple, default: Any = ..., what: str = "") -> Any:
        if key not in self.data or self.data[key] is None:
            if default is ...:
                raise self.error(key, f"is required{': ' + what if what else ''}")
            return default
        value = self.data[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise self.error(key, f"must be a finite number, got {value!r}")
        if isinstance(value, bool) and kind in (int, float):
            raise self.error(key, f"must be a number, got {value!r}")
        if not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.error(key, f"must be {names}, got {type(value).__name__} {value!r}")
        return value

    def refuse_unknown(self, known: Iterable[str]) -> None:
        """A key this section does not have is a typo (`tolerence`, `itres`) that would silently take the
        default: refused, naming it and the nearest known key, as cluster.yaml's unknown fields are."""
        known = sorted(known)
        for key in self.data:
            if key in known:
                continue
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]}? " if close else ""
            raise self.error(str(key), f"unknown field; {hint}(expected one of: {', '.join(known)})")

    def sub(self, key: str, required: bool = True) -> _Fields:
        if key not in self.data or self.data[key] is None:
            if required:
                raise self.error(key, "is required")
            return _Fields(self.file, {}, self.path(key))
        return _Fields(self.file, self.data[key], self.path(key))


def _read_text(file: Path, yaml_file: Path, field_name: str) -> str:
    if not file.is_file():
        raise InputError(str(yaml_file), field_name, f"file {file} does not exist")
    return read_text(file, field_name)


# A harness path written `cuco:_harness/cuda/harness.cu` names a file of the installed cuco (its workloads
# package), wherever that and the workload folder live: what `cuco init` writes.
INSTALLED_PREFIX = "cuco:"


def harness_file(root: Path, rel: str) -> Path:
    """A harness entry of workload.yaml as a file: relative to the workload folder, or in the installed
    cuco (`cuco:...`)."""
    if rel.startswith(INSTALLED_PREFIX):
        return (SHIPPED_DIR / rel[len(INSTALLED_PREFIX) :]).resolve()
    return (root / rel).resolve()


def load_workload(spec: str | Path, cwd: Path | None = None) -> Workload:
    root = resolve_workload_path(str(spec), cwd)
    yaml_file = root / "workload.yaml"
    try:
        data = yaml.safe_load(read_text(yaml_file))  # unreadable or not UTF-8: an InputError naming it
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)  # one line: where, and what the parser expected
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise InputError(
            str(yaml_file), "(syntax)", f"not valid YAML{where}: {getattr(exc, 'problem', None) or exc}"
        ) from None
    f = _Fields(yaml_file, data)
    f.refuse_unknown(_KNOWN_KEYS | set(_EXTENSION_KEYS))

    name = f.get("name", str)
    if not NAME_RE.match(name):
        raise f.error("name", f"must match {NAME_RE.pattern} (got {name!r})")
    language = f.get("language", str)
    if language not in ("cpp", "cuda"):
        raise f.error("language", f"must be cpp or cuda (got {language!r})")
    ranks = f.get("ranks", int)
    if ranks < 1:
        raise f.error("ranks", f"must be >= 1 (got {ranks})")

    candidate_file = f.get("candidate", str)
    seed_source = _read_text(root / candidate_file, yaml_file, "candidate")
    try:
        seed_blocks = blocks.parse_blocks(seed_source)
        blocks.check_block_bodies(seed_source)
    except blocks.BlockError as exc:
        raise InputError(str(root / candidate_file), "EVOLVE-BLOCK", str(exc)) from None
    if not seed_blocks:
        raise InputError(
            str(root / candidate_file),
            "EVOLVE-BLOCK",
            "the candidate has no EVOLVE-BLOCK-START/EVOLVE-BLOCK-END region to evolve",
        )

    h = f.sub("harness")
    h.refuse_unknown(("sources", "headers", "nonce"))
    harness_files: dict[str, bytes] = {}
    harness_sources: list[str] = []
    for key in ("sources", "headers"):
        entries = h.get(key, list, default=[] if key == "headers" else ...)
        for i, rel in enumerate(entries):
            field_name = h.path(f"{key}[{i}]")
            if not isinstance(rel, str):
                raise InputError(str(yaml_file), field_name, "must be a file path")
            file = harness_file(root, rel)
            if not file.is_file():
                raise InputError(str(yaml_file), field_name, f"file {file} does not exist")
            flat = file.name
            if flat in harness_files or flat == Path(candidate_file).name:
                raise InputError(str(yaml_file), field_name, f"two files named {flat}: basenames must be unique")
            harness_files[flat] = file.read_bytes()
            if key == "sources":
                harness_sources.append(flat)

    harness_nonce = h.get("nonce", bool, default=False)

    b = f.sub("build")
    b.refuse_unknown(("command", "nccl", "cache_frozen"))
    build_command = b.get("command", str, what="a shell command using {sources} and {binary}")
    for token in ("{sources}", "{binary}"):
        if token not in build_command:
            raise b.error("command", f"must contain {token}")
    build_nccl = b.get("nccl", bool, default=False)
    cache_frozen = b.get("cache_frozen", bool, default=False)

    la = f.sub("launch")
    la.refuse_unknown(("command", "gpus", "env"))
    launch_command = la.get("command", list)
    if not launch_command or not all(isinstance(x, str) for x in launch_command):
        raise la.error("command", "must be a non-empty list of strings (argv)")
    joined = " ".join(launch_command)
    for token in ("{spec}", "{result}"):
        if token not in joined:
            raise la.error("command", f"must pass {token} to the harness")
    launch_gpus = la.get("gpus", int, default=ranks if language == "cuda" else 0)
    if launch_gpus < 0:
        raise la.error("gpus", "must be >= 0")
    launch_env = la.get("env", dict, default={})
    if not all(isinstance(k, str) and isinstance(v, (str, int, float)) for k, v in launch_env.items()):
        raise la.error("env", "must map names to strings")
    launch_env = {k: str(v) for k, v in launch_env.items()}

    t = f.sub("timeouts")
    t.refuse_unknown(STAGES)
    timeouts = {}
    for stage in STAGES:
        value = t.get(stage, float)
        if value <= 0:
            raise t.error(stage, f"must be a positive number of seconds (got {value:g})")
        timeouts[stage] = value

    bench = f.sub("benchmark", required=False)
    bench.refuse_unknown(("warmup", "iters"))
    warmup = bench.get("warmup", int, default=2)
    iters = bench.get("iters", int, default=9)
    if warmup < 0:
        raise bench.error("warmup", "must be >= 0")
    if iters < 1:
        raise bench.error("iters", "must be >= 1")

    configs = _load_configs(f, yaml_file)
    tolerances_raw = f.get("tolerances", dict, default={})
    tolerances = {}
    for k, v in tolerances_raw.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise InputError(str(yaml_file), f"tolerances.{k}", f"must be a non-negative number (got {v!r})")
        tolerances[str(k)] = float(v)

    space = _load_design_space(f, yaml_file, root, seed_source)
    llm = f.sub("llm", required=False)
    llm.refuse_unknown(("task", "api_notes"))
    workload = Workload(
        name=name,
        description=f.get("description", str, default=""),
        language=language,
        ranks=ranks,
        root=root,
        candidate_file=candidate_file,
        seed_source=seed_source,
        harness_files=harness_files,
        harness_sources=harness_sources,
        build_command=build_command,
        build_nccl=build_nccl,
        cache_frozen=cache_frozen,
        harness_nonce=harness_nonce,
        launch_command=launch_command,
        launch_gpus=launch_gpus,
        launch_env=launch_env,
        timeouts=timeouts,
        warmup=warmup,
        iters=iters,
        configs=configs,
        tolerances=tolerances,
        design_space=space,
        task=llm.get("task", str, default=""),
        api_notes=llm.get("api_notes", str, default=""),
        extra={k: data[k] for k in _EXTENSION_KEYS if k in data},
        all_configs=configs,
    )
    symbol_policy.policy_for(workload)  # a bad `policy:` section is an input error now, not at the first build
    return workload.with_ranks(ranks)


_KNOWN_KEYS = {
    "name",
    "description",
    "language",
    "ranks",
    "candidate",
    "harness",
    "build",
    "launch",
    "timeouts",
    "benchmark",
    "configs",
    "tolerances",
    "design_space",
    "variants",
    "llm",
    "program",
}  # program: the user's files a workload made by `cuco init` came from (export --patch)
_EXTENSION_KEYS = ("policy",)  # sections another module reads from Workload.extra (symbol_policy.py)


def _load_configs(f: _Fields, yaml_file: Path) -> list[ProblemConfig]:
    raw = f.get("configs", list)
    if not raw:
        raise f.error("configs", "needs at least one problem config")
    configs, names = [], set()
    for i, item in enumerate(raw):
        c = _Fields(yaml_file, item, f"configs[{i}]")
        c.refuse_unknown(("name", "public", "bench", "params"))
        name = c.get("name", str)
        if name in names:
            raise c.error("name", f"repeats config name {name!r}")
        names.add(name)
        public = c.get("public", bool, default=True)
        configs.append(
            ProblemConfig(name, public, c.get("bench", bool, default=public), c.get("params", dict, default={}))
        )
    if not any(c.bench for c in configs):
        raise f.error("configs", "at least one config must have bench: true (or be public)")
    return configs


def _load_design_space(f: _Fields, yaml_file: Path, root: Path, seed_source: str) -> DesignSpace:
    ds = f.sub("design_space")
    ds.refuse_unknown(("dimensions", "archive"))
    dims_raw = ds.get("dimensions", dict)
    dims: dict[str, Dimension] = {}
    for name, spec in dims_raw.items():
        d = _Fields(yaml_file, spec, f"design_space.dimensions.{name}")
        d.refuse_unknown(("values", "default", "knob"))
        values = d.get("values", list)
        if not values:
            raise d.error("values", "needs at least one value")
        values_t = tuple(str(v) for v in values)
        default = str(d.get("default", (str, int, float), default=values_t[0]))
        if default not in values_t:
            raise d.error("default", f"{default!r} is not one of {list(values_t)}")
        dims[name] = Dimension(name, values_t, default, d.get("knob", bool, default=False))
    archive = ds.get("archive", list, default=[d.name for d in dims.values() if not d.knob])
    for i, a in enumerate(archive):
        if a not in dims:
            raise InputError(str(yaml_file), f"design_space.archive[{i}]", f"{a!r} is not a dimension")

    seed_names = {b.name for b in blocks.parse_blocks(seed_source)}
    variants: list[Variant] = []
    for i, item in enumerate(f.get("variants", list, default=[])):
        v = _Fields(yaml_file, item, f"variants[{i}]")
        v.refuse_unknown(("name", "file", "point"))
        vname, vfile = v.get("name", str), v.get("file", str)
        text = _read_text(root / vfile, yaml_file, v.path("file"))
        try:
            bodies = blocks.block_bodies(text)
            blocks.check_block_bodies(text)
        except blocks.BlockError as exc:
            raise InputError(str(root / vfile), "EVOLVE-BLOCK", str(exc)) from None
        if not bodies:
            raise InputError(str(root / vfile), "EVOLVE-BLOCK", "the variant has no EVOLVE-BLOCK to swap in")
        unknown = set(bodies) - seed_names
        if unknown:
            raise InputError(
                str(root / vfile),
                "EVOLVE-BLOCK",
                f"blocks {sorted(unknown)} do not exist in the candidate (it has {sorted(seed_names)})",
            )
        point = {str(k): str(val) for k, val in v.get("point", dict).items()}
        for k, val in point.items():
            if k not in dims:
                raise InputError(str(yaml_file), v.path(f"point.{k}"), "is not a design-space dimension")
            if val not in dims[k].values:
                raise InputError(str(yaml_file), v.path(f"point.{k}"), f"{val!r} is not one of {list(dims[k].values)}")
        declared = blocks.design_annotations(text)
        for k, val in point.items():
            if k in declared and declared[k] != val:
                raise InputError(
                    str(yaml_file),
                    v.path(f"point.{k}"),
                    f"says {val!r} but {vfile} declares `cuco:design {k}={declared[k]}`: make them agree",
                )
        variants.append(Variant(vname, vfile, point, bodies))
    # A knob must have a line to rewrite somewhere: in the seed or in a variant.
    knob_lines = set(blocks.knob_values(seed_source))
    for variant in variants:
        knob_lines |= set(
            blocks.knob_values(
                "\n".join(f"// EVOLVE-BLOCK-START {n}\n{b}// EVOLVE-BLOCK-END" for n, b in variant.bodies.items())
            )
        )
    for dim in dims.values():
        if dim.knob and dim.name not in knob_lines:
            raise InputError(
                str(yaml_file),
                f"design_space.dimensions.{dim.name}",
                f"is a knob but neither the candidate nor a variant has a `// cuco:knob {dim.name}` line in a block",
            )
    return DesignSpace(dims, tuple(archive), variants)
