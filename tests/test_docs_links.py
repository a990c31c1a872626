"""Every file the README and docs/ point a reader to exists: relative links, project paths they cite
(`engine/store/store.py`, docs/cluster.md) and the Markdown files they name. A doc that cites a file the
project lacks sends a newcomer looking for something that is not there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]  # the measurement logs too

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# a path under one of the project's folders, not part of a longer path (`../x/engine/`, `$OUT/docs/`, `~/docs`)
PROJECT_PATH = re.compile(
    r"(?<![\w./~$<>-])((?:engine|remote|cuco_tui|tests|docs|workloads|themes|\.ci)/[\w./-]*[\w/])"
)
MARKDOWN_NAME = re.compile(r"(?<![\w./~$<>-])([A-Za-z_][\w-]*\.md)\b")
CODE_SPAN = re.compile(r"`[^`\n]*`")  # `impls[k](...)` is code, not a link
# above the checkout: a workload's `../_harness/` files are the project's, anything else is not
UPWARD = re.compile(r"(?<![\w.])(\.\./[\w./-]*[\w/]|/work/[\w./-]*[\w/])")

# Files the docs show being made, not files of the project: the user's own workload in the walkthroughs, and
# the tables a GPU script writes under $OUT.
MADE_BY_THE_READER = ("workloads/my_prog", "workloads/loopvar_env/")
WRITTEN_BY_A_RUN = {"table.md", "summary.md"}
# outside the checkout, read at run time by the tests and benchmarks that say so (docs/development.md)
CORPUS = "../shared/corpus"


def missing(doc: Path, text: str) -> list[str]:
    """`doc`'s citations of files that do not exist, one line each."""
    bad = []
    for m in LINK.finditer(CODE_SPAN.sub("", text)):
        target = m.group(1).split("#")[0]
        if target and not re.match(r"^[a-z]+:", target) and not (doc.parent / target).exists():
            bad.append(f"link {target}")
    for m in PROJECT_PATH.finditer(text):
        path = m.group(1).rstrip(".")
        if not path.startswith(MADE_BY_THE_READER) and not (REPO / path).exists():
            bad.append(f"path {path}")
    for m in MARKDOWN_NAME.finditer(text):
        name = m.group(1)
        if name not in WRITTEN_BY_A_RUN and not any((d / name).exists() for d in (REPO, REPO / "docs", doc.parent)):
            bad.append(f"file {name}")
    for m in UPWARD.finditer(text):
        path = m.group(1)
        if path.startswith("../_harness/") and (REPO / "workloads" / path[3:]).exists():
            continue  # relative to a workload folder (workload.yaml's sources)
        if not path.startswith(CORPUS):
            bad.append(f"outside the project: {path}")
    return [f"{doc.relative_to(REPO)}: {line}" for line in bad]


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_every_cited_file_exists(doc):
    assert missing(doc, doc.read_text()) == []


def test_a_missing_file_is_caught():
    text = (
        "See DESIGN.md and `engine/nowhere.py`, [the guide](docs/gone.md), `../notes/x.cu`; fine: `docs/tui.md`,"
        " [contract](docs/contract.md), `../_harness/cpu/harness.cpp`, `f[k](...)`, `../shared/corpus/x/`."
    )
    assert missing(REPO / "README.md", text) == [
        "README.md: link docs/gone.md",
        "README.md: path engine/nowhere.py",
        "README.md: path docs/gone.md",
        "README.md: file DESIGN.md",
        "README.md: outside the project: ../notes/x.cu",
    ]


def test_the_readme_lists_each_doc_once():
    listed = re.findall(r"^- `(docs/[\w.-]+\.md)`", (REPO / "README.md").read_text(), re.M)
    assert sorted(listed) == sorted(set(listed))
    assert sorted(listed) == sorted(f"docs/{d.name}" for d in (REPO / "docs").glob("*.md"))


def test_performance_links_every_measurement_log():
    """The dated logs are reached from docs/PERFORMANCE.md, each named there once in its list."""
    logs = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs" / "measurements").glob("*.md"))
    listed = re.findall(r"^- `(docs/measurements/[\w.-]+\.md)`", (REPO / "docs" / "PERFORMANCE.md").read_text(), re.M)
    assert logs and sorted(listed) == logs
