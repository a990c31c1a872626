"""EVOLVE-BLOCK parsing, edit validation, block swaps, knobs and design annotations (engine/blocks.py)."""

from __future__ import annotations

import re

import pytest

from engine import blocks
from engine.blocks import BlockError

SRC = """\
#include <cstdio>
int frozen_before = 1;
// EVOLVE-BLOCK-START schedule
// cuco:design placement=sequential sync=barrier
static const int kChunkRows = 32;  // cuco:knob chunk_rows
static const int kStagger = 0;  // cuco:knob stagger
int body_a() { return kChunkRows; }
// EVOLVE-BLOCK-END
int frozen_middle = 2;
// EVOLVE-BLOCK-START
int body_b() { return 7; }
// EVOLVE-BLOCK-END
int frozen_after = 3;
"""


def test_parse_named_and_unnamed_blocks():
    bs = blocks.parse_blocks(SRC)
    assert [b.name for b in bs] == ["schedule", "1"]  # an unnamed block is named by its index
    assert (bs[0].start, bs[0].end) == (2, 7)
    assert (bs[1].start, bs[1].end) == (9, 11)
    assert bs[0].body.startswith("// cuco:design placement=sequential")
    assert bs[0].body.endswith("int body_a() { return kChunkRows; }\n")
    assert bs[1].body == "int body_b() { return 7; }\n"


def test_unnamed_first_block_is_named_0():
    src = "a\n// EVOLVE-BLOCK-START\nx\n// EVOLVE-BLOCK-END\nb\n"
    assert [b.name for b in blocks.parse_blocks(src)] == ["0"]


def test_source_without_blocks_parses_to_nothing():
    assert blocks.parse_blocks("int main() { return 0; }\n") == []


def test_nested_start_rejected_with_line_numbers():
    src = "x\n// EVOLVE-BLOCK-START outer\ny\n// EVOLVE-BLOCK-START inner\n// EVOLVE-BLOCK-END\n// EVOLVE-BLOCK-END\n"
    with pytest.raises(BlockError) as exc:
        blocks.parse_blocks(src)
    msg = str(exc.value)
    assert "line 4" in msg and "line 2" in msg and "nest" in msg


def test_unclosed_start_rejected_with_its_line():
    src = "x\ny\n// EVOLVE-BLOCK-START tail\nz\n"
    with pytest.raises(BlockError, match=r"line 3: .*never closed"):
        blocks.parse_blocks(src)


def test_end_without_start_rejected_with_its_line():
    src = "x\n// EVOLVE-BLOCK-END\n"
    with pytest.raises(BlockError, match=r"line 2: .*without"):
        blocks.parse_blocks(src)


def test_duplicate_block_names_rejected():
    src = "// EVOLVE-BLOCK-START a\n1\n// EVOLVE-BLOCK-END\n// EVOLVE-BLOCK-START a\n2\n// EVOLVE-BLOCK-END\n"
    with pytest.raises(BlockError, match="unique"):
        blocks.parse_blocks(src)


# ----- validate_child ------------------------------------------------------------------------------


def test_legal_in_block_edit_passes():
    child = SRC.replace("int body_a() { return kChunkRows; }", "int body_a() {\n  return kChunkRows * 2;\n}")
    child = child.replace("int body_b() { return 7; }", "int body_b() { return 8; }")
    blocks.validate_child(SRC, child)  # no exception


def test_unchanged_child_passes():
    blocks.validate_child(SRC, SRC)


@pytest.mark.parametrize(
    "old,new",
    [
        ("int frozen_before = 1;", "int frozen_before = 100;"),
        ("int frozen_middle = 2;", "int frozen_middle = 200;"),
        ("int frozen_after = 3;", "int frozen_after = 3; int extra = 4;"),
        ("#include <cstdio>\n", "#include <cstdio>\n#define frozen_after 9\n"),
    ],
)
def test_edit_outside_blocks_rejected(old, new):
    child = SRC.replace(old, new)
    assert child != SRC
    with pytest.raises(BlockError, match="outside the EVOLVE-BLOCKs"):
        blocks.validate_child(SRC, child)


def test_moving_a_marker_is_rejected():
    # Pulling frozen code into a block by moving the END marker down changes the frozen skeleton.
    child = SRC.replace(
        "// EVOLVE-BLOCK-END\nint frozen_middle = 2;\n", "int frozen_middle = 2;\n// EVOLVE-BLOCK-END\n"
    )
    with pytest.raises(BlockError):
        blocks.validate_child(SRC, child)


def test_removing_or_renaming_a_block_is_rejected():
    renamed = SRC.replace("EVOLVE-BLOCK-START schedule", "EVOLVE-BLOCK-START other")
    with pytest.raises(BlockError, match="keep the blocks"):
        blocks.validate_child(SRC, renamed)
    merged = SRC.replace("// EVOLVE-BLOCK-END\nint frozen_middle = 2;\n// EVOLVE-BLOCK-START\n", "")
    with pytest.raises(BlockError):
        blocks.validate_child(SRC, merged)


def test_broken_markers_in_child_rejected():
    child = SRC.replace("int body_b() { return 7; }\n// EVOLVE-BLOCK-END\n", "int body_b() { return 7; }\n")
    with pytest.raises(BlockError, match="markers are broken"):
        blocks.validate_child(SRC, child)


@pytest.mark.parametrize(
    "line",
    [
        "#define kChunkRows 64",
        "#include <cstdlib>",
        "  #pragma once",
        "# undef frozen_after",
    ],
)
def test_preprocessor_line_inside_block_rejected(line):
    child = SRC.replace("int body_b() { return 7; }\n", f"int body_b() {{ return 7; }}\n{line}\n")
    with pytest.raises(BlockError) as exc:
        blocks.validate_child(SRC, child)
    msg = str(exc.value)
    assert "preprocessor" in msg
    # The line number points at the offending line (1-based).
    lineno = child.splitlines().index(line) + 1
    assert f"line {lineno}:" in msg


def test_check_block_bodies_allows_preprocessor_outside_blocks():
    blocks.check_block_bodies(SRC)  # the #include at the top is frozen code: allowed


# ----- replace_blocks -------------------------------------------------------------------------------


def test_replace_blocks_swaps_only_the_named_block():
    out = blocks.replace_blocks(SRC, {"1": "int body_b() { return 42; }"})
    assert "return 42;" in out and "return 7;" not in out
    assert blocks.block_bodies(out)["schedule"] == blocks.block_bodies(SRC)["schedule"]
    assert blocks.frozen_skeleton(out) == blocks.frozen_skeleton(SRC)
    blocks.validate_child(SRC, out)
    # A body without a trailing newline still leaves the END marker on its own line.
    assert "int body_b() { return 42; }\n// EVOLVE-BLOCK-END\n" in out


def test_replace_blocks_multiline_and_both():
    out = blocks.replace_blocks(SRC, {"schedule": "int a1;\nint a2;\n", "1": "int b1;\n"})
    assert blocks.block_bodies(out) == {"schedule": "int a1;\nint a2;\n", "1": "int b1;\n"}
    assert out.endswith("int frozen_after = 3;\n")


def test_replace_blocks_unknown_name_rejected():
    with pytest.raises(BlockError, match="no block named nope"):
        blocks.replace_blocks(SRC, {"nope": "x\n"})


# ----- knobs ----------------------------------------------------------------------------------------


def test_knob_values():
    assert blocks.knob_values(SRC) == {"chunk_rows": "32", "stagger": "0"}


def test_knob_outside_block_is_ignored():
    src = "static const int kX = 5;  // cuco:knob outside\n" + SRC
    assert "outside" not in blocks.knob_values(src)
    with pytest.raises(BlockError, match="cuco:knob outside"):
        blocks.set_knob(src, "outside", "6")


def test_set_knob_rewrites_only_that_knob():
    out = blocks.set_knob(SRC, "chunk_rows", "64")
    assert blocks.knob_values(out) == {"chunk_rows": "64", "stagger": "0"}
    assert "static const int kChunkRows = 64;  // cuco:knob chunk_rows" in out
    blocks.validate_child(SRC, out)
    # Nothing else changed.
    assert out.replace("= 64;", "= 32;", 1) == SRC


def test_set_knob_does_not_touch_a_knob_with_a_longer_name():
    src = SRC.replace("int body_a()", "static const int kRows2 = 1;  // cuco:knob chunk_rows_2\nint body_a()")
    out = blocks.set_knob(src, "chunk_rows", "8")
    assert blocks.knob_values(out) == {"chunk_rows": "8", "chunk_rows_2": "1", "stagger": "0"}


def test_set_unknown_knob_rejected():
    with pytest.raises(BlockError, match="cuco:knob nope"):
        blocks.set_knob(SRC, "nope", "1")


# ----- design annotations ---------------------------------------------------------------------------


def test_design_annotations():
    assert blocks.design_annotations(SRC) == {"placement": "sequential", "sync": "barrier"}


def test_design_annotation_outside_block_ignored():
    src = "// cuco:design placement=fused\n" + SRC
    assert blocks.design_annotations(src)["placement"] == "sequential"


def test_set_design_rewrites_the_existing_line():
    out = blocks.set_design(SRC, {"placement": "fused", "sync": "chunk_flags"})
    assert blocks.design_annotations(out) == {"placement": "fused", "sync": "chunk_flags"}
    assert len(re.findall(r"cuco:design", out)) == 1
    blocks.validate_child(SRC, out)


def test_set_design_adds_a_line_to_block_0_when_none():
    src = SRC.replace("// cuco:design placement=sequential sync=barrier\n", "")
    assert blocks.design_annotations(src) == {}
    out = blocks.set_design(src, {"placement": "chunked"})
    assert blocks.design_annotations(out) == {"placement": "chunked"}
    assert blocks.block_bodies(out)["schedule"].startswith("// cuco:design placement=chunked\n")
    blocks.validate_child(src, out)


def test_set_design_without_blocks_rejected():
    with pytest.raises(BlockError, match="no EVOLVE-BLOCK"):
        blocks.set_design("int x;\n", {"a": "b"})


# A comment before `#` or the digraph `%:` still makes a preprocessor directive (comments become a
# space before directives are processed; `%:` is `#`). g++ -std=c++17 accepts both:
#   /**/ #define FOO 1      %:define BAR 2      -> FOO and BAR are defined.
@pytest.mark.parametrize("line", ["/**/ #define kStagger 1", "%:define kStagger 1", "/* x */ %:include <cstdlib>"])
def test_disguised_preprocessor_line_inside_block_rejected(line):
    child = SRC.replace("int body_b() { return 7; }\n", f"int body_b() {{ return 7; }}\n{line}\n")
    with pytest.raises(BlockError, match="preprocessor"):
        blocks.validate_child(SRC, child)
