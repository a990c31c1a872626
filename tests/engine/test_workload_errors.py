"""A broken workload folder is refused with an InputError naming the exact file and field, both from
`engine.workload.load_workload` and through the `cuco` CLI (exit 2, message on stderr)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from engine.workload import load_workload
from remote.errors import InputError


def edit_yaml(root: Path, change: Callable[[dict], None]) -> None:
    f = root / "workload.yaml"
    data = yaml.safe_load(f.read_text())
    change(data)
    f.write_text(yaml.safe_dump(data, sort_keys=False))


def test_the_copy_itself_loads(demo_copy: Path):
    w = load_workload(demo_copy)
    assert w.name == "demo" and w.ranks == 2 and len(w.design_space.variants) == 4


def _set(path: str, value):
    """A change that sets data[a][b]... = value ('.'-separated; integers index lists)."""

    def change(data):
        keys = path.split(".")
        node = data
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = keys[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return change


def _delete(key: str):
    def change(data):
        del data[key]

    return change


def _dup_config(data):
    data["configs"][2]["name"] = data["configs"][0]["name"]


def _add_knob_dim(data):
    data["design_space"]["dimensions"]["unroll"] = {"values": [1, 2, 4], "default": 1, "knob": True}


def _bad_archive(data):
    data["design_space"]["archive"] = ["placement", "nonexistent"]


def _variant_missing_file(data):
    data["variants"][1]["file"] = "variants/does_not_exist.cpp"


# (id, change to the yaml dict, expected field, message fragment)
YAML_CASES = [
    ("missing-name", _delete("name"), "name", "required"),
    ("bad-name", _set("name", "Demo Workload"), "name", "must match"),
    ("bad-language", _set("language", "rust"), "language", "cpp or cuda"),
    ("ranks-0", _set("ranks", 0), "ranks", ">= 1"),
    ("ranks-string", _set("ranks", "two"), "ranks", "must be int"),
    ("missing-candidate-file", _set("candidate", "nope.cpp"), "candidate", "does not exist"),
    ("negative-build-timeout", _set("timeouts.build", -1), "timeouts.build", "positive number of seconds"),
    ("zero-verify-timeout", _set("timeouts.verify", 0), "timeouts.verify", "positive"),
    ("missing-benchmark-timeout", lambda d: d["timeouts"].pop("benchmark"), "timeouts.benchmark", "required"),
    ("build-without-binary", _set("build.command", "g++ -O2 {sources} -o a.out"), "build.command", "{binary}"),
    ("build-without-sources", _set("build.command", "g++ -O2 x.cpp -o {binary}"), "build.command", "{sources}"),
    ("launch-without-spec", _set("launch.command", ["./{binary}", "--result", "{result}"]), "launch.command", "{spec}"),
    (
        "launch-not-a-list",
        _set("launch.command", "./{binary} --spec {spec} --result {result}"),
        "launch.command",
        "list",
    ),
    ("launch-negative-gpus", _set("launch.gpus", -1), "launch.gpus", ">= 0"),
    (
        "missing-harness-source",
        _set("harness.sources.1", "missing_baseline.cpp"),
        "harness.sources[1]",
        "does not exist",
    ),
    ("knob-without-line", _add_knob_dim, "design_space.dimensions.unroll", "cuco:knob unroll"),
    (
        "default-not-a-value",
        _set("design_space.dimensions.sync.default", "fence"),
        "design_space.dimensions.sync.default",
        "not one of",
    ),
    ("archive-unknown-dim", _bad_archive, "design_space.archive[1]", "nonexistent"),
    ("variant-missing-file", _variant_missing_file, "variants[1].file", "does not exist"),
    (
        "variant-unknown-dim",
        _set("variants.0.point", {"placement": "chunked", "color": "red"}),
        "variants[0].point.color",
        "not a design-space dimension",
    ),
    (
        "variant-bad-value",
        _set("variants.0.point", {"placement": "diagonal"}),
        "variants[0].point.placement",
        "not one of",
    ),
    ("duplicate-config-name", _dup_config, "configs[2].name", "repeats"),
    ("no-bench-config", _set("configs", [{"name": "x", "public": False, "bench": False}]), "configs", "bench"),
    ("negative-tolerance", _set("tolerances.fp32", -1e-3), "tolerances.fp32", "non-negative"),
    ("iters-0", _set("benchmark.iters", 0), "benchmark.iters", ">= 1"),
]


@pytest.mark.parametrize("change,field,fragment", [c[1:] for c in YAML_CASES], ids=[c[0] for c in YAML_CASES])
def test_broken_yaml_names_file_and_field(demo_copy: Path, change, field, fragment):
    edit_yaml(demo_copy, change)
    with pytest.raises(InputError) as exc:
        load_workload(demo_copy)
    err = exc.value
    assert Path(err.file) == demo_copy / "workload.yaml"
    assert err.field == field
    assert fragment in err.message
    assert str(err).startswith(f"{err.file}: {field}: ")


def test_invalid_yaml_syntax(demo_copy: Path):
    f = demo_copy / "workload.yaml"
    f.write_text(f.read_text().replace("ranks: 2", "ranks: [2", 1))
    with pytest.raises(InputError) as exc:
        load_workload(demo_copy)
    assert Path(exc.value.file) == f
    assert exc.value.field == "(syntax)"
    assert "not valid YAML" in exc.value.message and "line" in exc.value.message


def test_top_level_not_a_mapping(demo_copy: Path):
    (demo_copy / "workload.yaml").write_text("- just\n- a list\n")
    with pytest.raises(InputError) as exc:
        load_workload(demo_copy)
    assert Path(exc.value.file) == demo_copy / "workload.yaml"
    assert exc.value.field == "(top level)"


def test_variant_with_unknown_block_names_the_variant_file(demo_copy: Path):
    vfile = demo_copy / "variants" / "fused.cpp"
    vfile.write_text(vfile.read_text().replace("EVOLVE-BLOCK-START schedule", "EVOLVE-BLOCK-START mystery"))
    with pytest.raises(InputError) as exc:
        load_workload(demo_copy)
    assert Path(exc.value.file) == vfile
    assert exc.value.field == "EVOLVE-BLOCK"
    assert "mystery" in exc.value.message and "schedule" in exc.value.message


def test_preprocessor_line_in_seed_block_names_candidate_and_line(demo_copy: Path):
    cand = demo_copy / "candidate.cpp"
    lines = cand.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "cuco:knob stagger" in line) + 1
    lines.insert(at, "#define kSneaky 1\n")
    cand.write_text("".join(lines))
    with pytest.raises(InputError) as exc:
        load_workload(demo_copy)
    assert Path(exc.value.file) == cand
    assert exc.value.field == "EVOLVE-BLOCK"
    assert f"line {at + 1}" in exc.value.message and "preprocessor" in exc.value.message


def test_seed_without_blocks_is_refused(demo_copy: Path):
    cand = demo_copy / "candidate.cpp"
    cand.write_text("".join(line for line in cand.read_text().splitlines(keepends=True) if "EVOLVE-BLOCK" not in line))
    with pytest.raises(InputError) as exc:
        load_workload(demo_copy)
    assert Path(exc.value.file) == cand and exc.value.field == "EVOLVE-BLOCK"


def test_missing_workload_names_what_was_asked(tmp_path: Path):
    with pytest.raises(InputError) as exc:
        load_workload(str(tmp_path / "nowhere"), cwd=tmp_path)
    assert exc.value.field == "WORKLOAD" and "demo" in exc.value.message  # it lists the shipped ones


# ----- through the CLI ------------------------------------------------------------------------------


def cuco(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("CUCO_HOME", None)
    return subprocess.run(
        [sys.executable, "-m", "cuco_tui.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


CLI_CASES = [
    ("validate", _set("timeouts.build", -1), "timeouts.build"),
    ("validate", _set("launch.command", ["./{binary}", "--result", "{result}"]), "launch.command"),
    ("run", _set("ranks", 0), "ranks"),
]


@pytest.mark.parametrize("verb,change,field", CLI_CASES, ids=[f"{c[0]}-{c[2]}" for c in CLI_CASES])
def test_cli_exits_2_naming_file_and_field(demo_copy: Path, tmp_path: Path, verb, change, field):
    edit_yaml(demo_copy, change)
    home = tmp_path / "home"
    if verb == "validate":
        proc = cuco("validate", str(demo_copy), "--no-compile", cwd=tmp_path)
    else:
        proc = cuco("run", str(demo_copy), "--headless", "--home", str(home), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{demo_copy / 'workload.yaml'}: {field}:" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (home / "cuco.db").exists()  # bad input starts nothing


def test_cli_run_rejects_max_evals_0(tmp_path: Path):
    home = tmp_path / "home"
    proc = cuco("run", "demo", "--headless", "--max-evals", "0", "--home", str(home), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "max_evals" in proc.stderr and "Traceback" not in proc.stderr
    assert not (home / "cuco.db").exists()


def test_nan_timeout_is_refused(demo_copy: Path):
    f = demo_copy / "workload.yaml"
    f.write_text(f.read_text().replace("verify: 30", "verify: .nan", 1))
    with pytest.raises(InputError) as exc:
        load_workload(demo_copy)
    assert exc.value.field == "timeouts.verify"


TYPOS = [
    ("tolerence", None, "tolerence", "tolerances"),  # a top-level key
    ("itres", "benchmark", "benchmark.itres", "iters"),
    ("verfy", "timeouts", "timeouts.verfy", "verify"),
    ("comand", "build", "build.comand", "command"),
    ("publc", "configs.0", "configs[0].publc", "public"),
]


@pytest.mark.parametrize("key,section,field,nearest", TYPOS, ids=[t[2] for t in TYPOS])
def test_an_unknown_key_is_refused_naming_it_and_the_nearest(
    demo_copy: Path, tmp_path: Path, key, section, field, nearest
):
    """A typo would otherwise take the default in silence (`itres: 50` runs 9 iterations): refused, as
    cluster.yaml refuses an unknown field, by `cuco validate` and `cuco run` alike."""

    def change(data):
        node = data
        for k in section.split(".") if section else []:
            node = node[int(k)] if isinstance(node, list) else node[k]
        node[key] = 1

    edit_yaml(demo_copy, change)
    with pytest.raises(InputError) as exc:
        load_workload(demo_copy)
    assert exc.value.field == field and f"did you mean {nearest}?" in exc.value.message, str(exc.value)
    home = tmp_path / "home"
    for verb in (
        ("validate", str(demo_copy), "--no-compile"),
        ("run", str(demo_copy), "--headless", "--home", str(home)),
    ):
        proc = cuco(*verb, cwd=tmp_path)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"{demo_copy / 'workload.yaml'}: {field}: unknown field; did you mean {nearest}?" in proc.stderr
        assert "spec OK" not in proc.stdout and "Traceback" not in proc.stderr
    assert not (home / "cuco.db").exists()
