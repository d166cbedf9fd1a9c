"""The HTML report in a real browser: headless Chromium (Debian's `chromium` package) loads index.html, the page's
script marks how many plot images decoded (naturalWidth > 0), and a screenshot shows a non-blank page.

Install once: apt-get update && apt-get install -y chromium. Skipped where Chromium is absent, except under CI
(CI set), where its absence fails the test."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from report_records import records
from xlang.report import write_report
from xlang.report.data import from_records

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--disable-dev-shm-usage", "--allow-file-access-from-files"]


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail("Chromium is missing: apt-get update && apt-get install -y chromium")
    pytest.skip("Chromium not installed (apt-get install -y chromium)")


def _run(browser, tmp_path, *args) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    return subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                          timeout=90)


def test_report_renders_in_chromium(tmp_path):
    browser = _chromium()
    rep = write_report(from_records(records(), [{"host": "test-box"}], source="test"), tmp_path / "report")
    url = rep.index.resolve().as_uri()

    dom = _run(browser, tmp_path, "--virtual-time-budget=10000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    total = re.search(r'data-plots-total="(\d+)"', dom.stdout)
    rendered = re.search(r'data-plots-rendered="(\d+)"', dom.stdout)
    assert total and rendered, "the page's load script did not run"
    assert int(total.group(1)) == 5 and int(rendered.group(1)) == 5, "a plot image did not decode"  # no tokens plot
    assert "Blackwell runtime was not run" in dom.stdout
    assert 'id="main-table"' in dom.stdout

    shot = tmp_path / "report.png"
    res = _run(browser, tmp_path, "--window-size=1280,2400", f"--screenshot={shot}", "--virtual-time-budget=10000",
               url)
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[0] == 2400 and pixels.shape[1] == 1280
    # Not a blank page: plenty of non-white pixels, and colour (the plots), not only black text.
    rgb = pixels[..., :3]
    assert (rgb.mean(axis=2) < 0.9).mean() > 0.03
    assert (rgb.max(axis=2) - rgb.min(axis=2) > 0.3).mean() > 0.01
    keep = os.environ.get("XLANG_KEEP_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


@pytest.mark.parametrize("width", [1280, 1920])
def test_report_tables_fit_the_page(tmp_path, width):
    """At 1280 and 1920 px no table of the report is wider than the page's column, and the page does not scroll
    sideways (issue 37: the main tables were 1500-1700 px wide: nowrap headers and "not run (no sm_100a device)"
    repeated in every runtime column); each "not run" reason is said once under its table."""
    browser = _chromium()
    rep = write_report(from_records(records(), [{"host": "test-box"}], source="test"), tmp_path / "report")
    html = rep.index.read_text()
    assert "<td class=\"notrun\">not run (" not in html and "not run¹" in html
    dom = _run(browser, tmp_path, f"--window-size={width},1000", "--virtual-time-budget=10000", "--dump-dom",
               rep.index.resolve().as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    wide = re.search(r'data-wide-tables="([^"]*)"', dom.stdout)
    scrolls = re.search(r'data-page-scrolls="([^"]*)"', dom.stdout)
    assert wide and scrolls, "the page's load script did not run"
    assert wide.group(1) == "" and scrolls.group(1) == "false", (width, wide.group(1))


def test_report_at_1024px_scrolls_tables_not_the_page_and_has_its_legend(tmp_path):
    """At 1024 px (issue 48) the per-cell and SASS-mix tables are wider than the page: each sits in a box that
    scrolls sideways, so the page itself never does (its scrollWidth is the window's), and every table of the page
    is inside such a box. The legend that defines the marks, static_ok and "not run" is on the page; a screenshot
    at that width is taken and is not blank."""
    from xlang.report import marks

    browser = _chromium()
    rep = write_report(from_records(records(), [{"host": "test-box"}], source="test"), tmp_path / "report")
    url = rep.index.resolve().as_uri()
    dom = _run(browser, tmp_path, "--window-size=1024,1000", "--virtual-time-budget=10000", "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]

    def attr(name: str) -> str:
        m = re.search(rf'data-{name}="([^"]*)"', dom.stdout)
        assert m, f"the page's load script did not set data-{name}"
        return m.group(1)

    assert int(attr("inner-width")) == 1024
    assert int(attr("scroll-width")) <= int(attr("inner-width")), "the page scrolls sideways at 1024 px"
    assert attr("page-scrolls") == "false"
    assert attr("tables-outside-scroll") == "0"
    assert int(attr("tables")) > 5 and attr("tables-in-scroll") == attr("tables"), "a table outside a scroll box"
    assert attr("wide-tables") != "", "no table is wider than 1024 px: this test no longer tests the scroll boxes"
    assert int(attr("legend")) == len(marks.legend())
    for term, _ in marks.legend():
        assert f"<dt>{term}</dt>" in dom.stdout
    assert "static_ok" in dom.stdout and "not run" in dom.stdout

    shot = tmp_path / "report-1024.png"
    res = _run(browser, tmp_path, "--window-size=1024,1600", f"--screenshot={shot}", "--virtual-time-budget=10000",
               url)
    assert res.returncode == 0 and shot.is_file(), res.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[:2] == (1600, 1024)
    assert (pixels[..., :3].mean(axis=2) < 0.9).mean() > 0.03
