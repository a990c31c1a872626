"""Debian's headless chromium driven through chromedriver and selenium, for the tests that look at a page as a
person would (`cuco serve`, the exported trace page): the driver's setup, and whether a screenshot is blank.

A test module calls `require_browser()` at import: without chromium, chromium-driver or selenium (.ci/run and
the test extra install them) the whole module is skipped with the reason.
"""

from __future__ import annotations

import shutil
import struct
import zlib
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
CHROME_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def require_browser():
    """Skips the calling module unless the browser, its driver and selenium are here; returns selenium's
    webdriver module."""
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("needs Debian's chromium and chromium-driver (.ci/run installs them)", allow_module_level=True)
    return pytest.importorskip("selenium.webdriver", reason="needs selenium (the test extra)")


def open_chromium(profile_dir: Path, width: int = 1200, height: int = 800):
    """A headless chromium with its own profile folder; its console (`driver.get_log("browser")`) is kept."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (*CHROME_ARGS, f"--window-size={width},{height}", f"--user-data-dir={profile_dir}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, bytes per pixel and rows of raw pixels of an 8-bit RGB/RGBA PNG (what chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            bpp = 4 if colour == 6 else 3
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytes(width * bpp)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, up_left = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)) & 0xFF
        rows.append(bytes(line))
        prev = rows[-1]
    return width, bpp, rows


def screenshot_colours(shot: Path) -> set[bytes]:
    """The distinct colours of a sample of the screenshot's pixels (every 7th row, every 5th column)."""
    width, bpp, rows = png_pixels(shot.read_bytes())
    return {row[x : x + 3] for row in rows[::7] for x in range(0, width * bpp, bpp * 5)}


def assert_not_blank(shot: Path, min_colours: int = 8) -> None:
    colours = screenshot_colours(shot)
    assert len(colours) > min_colours, f"the page looks blank: {len(colours)} colours in {shot}"
