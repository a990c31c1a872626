"""`cuco export --trace N --html` opened in Debian's headless chromium, as a person on a machine without network
would open it: a real demo search on the CPU, its best candidate's trace written both as JSON and as the page,
and the page read back from the browser: a labelled group per rank, every slice of the JSON drawn, the longest
compute slice as wide (against the axis) as its duration is long (against the trace), each config's stretch
labelled with its figures, tooltips, no script error, a screenshot that is not blank. Names that would break
an HTML page (`</script>`, quotes) are shown as text; an empty trace and a one-slice trace render too."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from cuco_tui import trace_html
from engine.timeline import timeline
from tests.browser import assert_not_blank, open_chromium, require_browser
from tests.engine.test_timeline import cuco, pytestmark  # noqa: F401  (skipped without g++, like the demo's tests)

require_browser()

WIDTH, HEIGHT = 1600, 700
CUPTI = Path(__file__).resolve().parents[1] / "gpu" / "data" / "cupti_staged_copy.json"
HOSTILE = '</script><script>document.title="broken"</script><!-- "quoted" \'single\' & <b>bold</b>'


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    driver = open_chromium(tmp_path_factory.mktemp("chromium-profile"), WIDTH, HEIGHT)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def demo_export(tmp_path_factory) -> dict:
    """A 3-evaluation demo search; its best candidate's trace as JSON and as the page (flag and suffix)."""
    tmp = tmp_path_factory.mktemp("trace-page")
    home = tmp / "home"
    cuco(home, "run", "demo", "--headless", "--max-evals", "3", "--name", "page")
    best = str(json.loads(cuco(home, "report", "page", "--json").stdout)["best"]["candidate"])
    printed = cuco(home, "export", "--trace", best, "-o", str(tmp / "trace.html")).stdout  # by its suffix
    cuco(home, "export", "--trace", best, "-o", str(tmp / "trace.json"))
    cuco(home, "export", "--trace", best, "--html", "-o", str(tmp / "any-name.out"))
    no_trace = cuco(home, "export", "page", "--html", "-o", str(tmp / "x.html"), check=False)
    return {
        "home": home,
        "page": tmp / "trace.html",
        "json": tmp / "trace.json",
        "by_flag": tmp / "any-name.out",
        "printed": printed,
        "no_trace": no_trace,
        "tmp": tmp,
    }


def show(driver, page: Path) -> None:
    driver.get_log("browser")  # forget the previous page's console
    driver.get(page.resolve().as_uri())
    assert driver.execute_script("return document.body.getAttribute('data-rendered')") is not None, (
        "the page's script did not finish drawing"
    )


def script_errors(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def box(driver, element) -> dict:
    return driver.execute_script(
        "const b = arguments[0].getBoundingClientRect(); return {x: b.left, w: b.width};", element
    )


def tooltip(driver, element) -> str:
    return driver.execute_script("return arguments[0].querySelector('title').textContent", element)


def microseconds(text: str) -> float:
    value, unit = re.fullmatch(r"(-?[\d.]+) (ms|\u00b5s)", text.strip()).groups()
    return float(value) * (1000 if unit == "ms" else 1)


def axis_us_per_pixel(driver) -> float:
    """Microseconds per pixel of the time axis, read off its first and last tick labels."""
    ticks = driver.find_elements("css selector", "svg g.ticks text")
    (a, b) = (ticks[0], ticks[-1])
    return (microseconds(b.text) - microseconds(a.text)) / (box(driver, b)["x"] - box(driver, a)["x"])


def test_the_page_is_one_file_with_the_trace_in_it(demo_export):
    page = demo_export["page"].read_text()
    trace = json.loads(demo_export["json"].read_text())
    assert page.startswith("<!DOCTYPE html>") and "candidate" in demo_export["printed"]
    assert "offline" in demo_export["printed"] and "2 rank(s)" in demo_export["printed"]
    assert not re.search(r"<(script|link|img|iframe)[^>]*\b(src|href)=", page)  # nothing fetched from anywhere
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page
    assert demo_export["by_flag"].read_text() == page  # --html writes the page whatever the file's name
    embedded = re.search(r'<script type="application/json" id="trace-data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(embedded) == trace  # the same trace as the JSON
    bad = demo_export["no_trace"]
    assert bad.returncode == 2 and "--html" in bad.stderr and "Traceback" not in bad.stderr


def test_demo_trace_in_the_browser(demo_export, browser):
    trace = json.loads(demo_export["json"].read_text())
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    ranks = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"}
    assert len(ranks) == 2 and len(trace["otherData"]["configs"]) == 2
    show(browser, demo_export["page"])

    groups = browser.find_elements("css selector", "svg g.rank")
    labels = [e.text for e in browser.find_elements("css selector", "svg g.rank-labels .rank-label")]
    assert labels == [ranks[pid] for pid in sorted(ranks)] == ["rank 0", "rank 1"]
    for g in groups:  # every slice of the rank is drawn, in its own group
        pid = int(g.get_attribute("data-rank"))
        drawn = g.find_elements("css selector", "rect.slice")
        assert len(drawn) == sum(1 for e in slices if e["pid"] == pid) > 0, pid

    # The longest compute slice, against the axis, is as long as its duration against the trace's span.
    t0 = min(e["ts"] for e in slices)
    span = max(e["ts"] + e["dur"] for e in slices) - t0
    longest = max((e for e in slices if e["cat"] == "compute"), key=lambda e: e["dur"])
    axis = box(browser, browser.find_element("css selector", "#plot-area"))
    compute = browser.find_elements("css selector", "svg g.rank rect.slice[data-cat=compute]")
    widest = max(compute, key=lambda r: box(browser, r)["w"])
    drawn = box(browser, widest)
    assert drawn["w"] / axis["w"] == pytest.approx(longest["dur"] / span, rel=0.03), (drawn, axis, longest, span)
    assert (drawn["x"] - axis["x"]) / axis["w"] == pytest.approx((longest["ts"] - t0) / span, abs=0.01)
    name, _, start, duration, *_ = tooltip(browser, widest).split("\n")  # hover: name, start, duration
    assert name == longest["name"]
    assert microseconds(start.removeprefix("start ")) == pytest.approx(longest["ts"], rel=0.01, abs=1)
    assert microseconds(duration.removeprefix("duration ")) == pytest.approx(longest["dur"], rel=0.01)

    # Each config's stretch is labelled with its figures.
    bands = browser.find_elements("css selector", "svg g.configs rect.slice")
    band_labels = [e.text for e in browser.find_elements("css selector", "svg g.configs .config-label")]
    assert len(bands) == len(band_labels) == 2
    for config, label in zip(trace["otherData"]["configs"], band_labels):
        figs = trace["otherData"]["figures"][config]
        assert label.startswith(
            f"{config} \u00b7 overlap fraction {figs['overlap_fraction']:.2f} \u00b7 "
            f"critical rank {figs['critical_rank']}"
        ), label
    legend = browser.find_element("css selector", "#legend").text
    assert all(cat in legend for cat in {e["cat"] for e in slices})

    # The + button shows half the time in the same width: the axis' ticks say so.
    whole = axis_us_per_pixel(browser)
    browser.find_element("css selector", "#zoom-in").click()
    assert axis_us_per_pixel(browser) == pytest.approx(whole / 2, rel=0.02)
    browser.find_element("css selector", "#zoom-all").click()
    assert axis_us_per_pixel(browser) == pytest.approx(whole, rel=0.02)
    # The wheel zooms in (a step: 0.8 of the time in the same width), a drag to the left shows later times.
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin

    plot = browser.find_element("css selector", "#plot-area")
    ActionChains(browser).scroll_from_origin(ScrollOrigin.from_element(plot, 0, 0), 0, -100).perform()
    assert axis_us_per_pixel(browser) == pytest.approx(whole * 0.8, rel=0.02)
    first = microseconds(browser.find_element("css selector", "svg g.ticks text").text)
    ActionChains(browser).move_to_element(plot).click_and_hold().move_by_offset(-200, 0).release().perform()
    assert microseconds(browser.find_element("css selector", "svg g.ticks text").text) > first
    browser.find_element("css selector", "#zoom-all").click()

    assert script_errors(browser) == []
    shot = demo_export["tmp"] / "trace-page.png"
    assert browser.save_screenshot(str(shot))
    assert_not_blank(shot)


def test_names_that_would_break_a_page_are_shown_as_text(browser, tmp_path):
    recorded = json.loads(CUPTI.read_text())["configs"]
    timelines = {}
    for c in recorded:
        raw = copy.deepcopy(c["timeline"])
        for e in raw["events"]:
            if e["k"] == "kernel":
                e["name"] = HOSTILE + "\u2028"  # a line separator too: JSON allows it, old JS did not
        timelines[c["name"]] = timeline.parse(c["name"], raw)
        timelines[c["name"]].ranks[0].intervals[0].args["ratio"] = float("nan")  # JSON.parse has no NaN
    page = tmp_path / "hostile.html"
    page.write_text(trace_html.render(timeline.chrome_trace(timelines, title=HOSTILE)), encoding="utf-8")
    assert page.read_text().count("</script>") == 3  # the page's own three, none from the data
    show(browser, page)
    assert browser.title == HOSTILE
    assert len(browser.find_elements("css selector", "script")) == 3
    assert not browser.find_elements("css selector", "b")
    kernels = browser.find_elements("css selector", "svg g.rank rect.slice[data-cat=compute]")
    assert len(kernels) == len(recorded)
    assert all(tooltip(browser, k).split("\n")[0] == HOSTILE + "\u2028" for k in kernels)
    assert script_errors(browser) == []


def test_an_empty_trace_and_a_one_slice_trace(browser, tmp_path):
    empty = tmp_path / "empty.html"
    empty.write_text(trace_html.render(timeline.chrome_trace({}, title="nothing")), encoding="utf-8")
    show(browser, empty)
    assert "no slices" in browser.find_element("css selector", "#empty").text
    assert not browser.find_elements("css selector", "rect.slice")
    assert script_errors(browser) == []

    one = {
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "rank 3"}},
            {"ph": "X", "name": "k", "cat": "compute", "pid": 3, "tid": 1, "ts": 5.0, "dur": 40.0},
        ],
        "otherData": {"title": "one slice"},
    }
    page = tmp_path / "one.html"
    page.write_text(trace_html.render(one), encoding="utf-8")
    show(browser, page)
    (rect,) = browser.find_elements("css selector", "svg g.rank rect.slice")
    assert box(browser, rect)["w"] == pytest.approx(
        box(browser, browser.find_element("css selector", "#plot-area"))["w"], rel=0.01
    )  # the one slice is the whole axis
    assert [e.text for e in browser.find_elements("css selector", ".rank-label")][-1] == "rank 3"
    assert tooltip(browser, rect).split("\n")[3] == "duration 40.0 \u00b5s"
    assert script_errors(browser) == []
