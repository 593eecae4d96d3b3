"""`pobo report`: the HTML page of a run or a sweep, its escaping, its errors, and how it
renders in headless Chromium (Debian's chromium; skipped only where there is none)."""
import asyncio
import html
import json
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pobo.scenarios.html_report import (
    ReportError, nice_ticks, paper_preset, write_html_report,
)
from pobo.scenarios.launch import publish_keys
from pobo.scenarios.report import write_report
from pobo.scenarios.session import RunConfig, Signing, run_inproc
from pobo.scenarios.sweep import SweepSpec, run_sweep

SWEEP = SweepSpec("synthetic", epsilons=(3.0,), rs=(3, 6), seeds=2, T=6, non_private=True,
                  strategies=("gp-ucb", "random"), options={"grid": 12})


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A signed in-process run with its transcripts and the public keys in keys/."""
    out = tmp_path_factory.mktemp("run")
    signing = Signing.throwaway()
    asyncio.run(run_inproc(RunConfig("synthetic", T=8, options={"grid": 12}), out,
                           signing=signing))
    publish_keys(signing.curator.public_hex, signing.modeler.public_hex, out)
    return out


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    """A tiny sweep (2 strategies x (2 r + non-private) x 2 seeds) with its report files."""
    out = tmp_path_factory.mktemp("sweep")
    rows = run_sweep(SWEEP, out, executor=ThreadPoolExecutor(1), progress=None)
    write_report(rows, out, scenario="synthetic", options=SWEEP.options,
                 epsilons=SWEEP.epsilons, rs=SWEEP.rs, title="synthetic sweep", dataset="")
    return out


def copy_run(run_dir: Path, dest: Path, **changes) -> Path:
    """A copy of the run folder whose result.json has `changes` applied."""
    folder = dest / "run"
    shutil.copytree(run_dir, folder)
    result = json.loads((folder / "result.json").read_text())
    result.update(changes)
    (folder / "result.json").write_text(json.dumps(result))
    return folder


def figures(page: str) -> list[str]:
    """The inline SVG figures of a page."""
    return re.findall(r"<svg class='pobo-figure'.*?</svg>", page, re.S)


def test_a_run_page_has_every_section_and_a_regret_curve(run_dir, tmp_path):
    path = write_html_report(run_dir, tmp_path / "r.html")
    page = path.read_text()
    result = json.loads((run_dir / "result.json").read_text())
    for section in ("id='parameters'", "id='ledger'", "id='privacy-unit'", "id='audit'",
                    "id='regret'"):
        assert section in page
    assert "privacy ledger: central eps" in page and "basic composition" in page
    assert html.escape(result["privacy_unit"]["dataset"]["neighbouring"], quote=True) in page
    assert "OK: 2 transcript(s) audited" in page and page.count("<td>verified</td>") == 2
    [svg] = figures(page)
    assert svg.count("<polyline class='curve'") == 1 and "simple regret / σ_y" in svg
    # self-contained: nothing is fetched
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=|url\(|@import", page)


def test_a_tampered_transcript_turns_the_verdict(run_dir, tmp_path):
    folder = copy_run(run_dir, tmp_path)
    data = bytearray((folder / "modeler.transcript").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / "modeler.transcript").write_bytes(bytes(data))
    page = write_html_report(folder).read_text()
    assert "VIOLATIONS" in page and "OK: 2 transcript" not in page


def test_text_from_result_json_is_escaped(run_dir, tmp_path):
    evil = "<script>alert('x')</script>"
    folder = copy_run(run_dir, tmp_path, scenario=evil, source=evil + "&")
    page = write_html_report(folder).read_text()
    assert evil not in page
    assert html.escape(evil, quote=True) in page and "&amp;" in page


def test_hits_and_on_demand_runs(run_dir, tmp_path):
    hits = copy_run(run_dir, tmp_path / "h", metric="hits", hits=[0, 1, 1, 2, 3, 3, 3, 4],
                    random_hits_expected=2.0)
    [svg] = figures(write_html_report(hits).read_text())
    assert svg.count("<polyline class='curve'") == 2 and "random (expected)" in svg
    wait = copy_run(run_dir, tmp_path / "w", simple_regret=None, objective="deferred")
    page = write_html_report(wait).read_text()
    assert not figures(page) and "No regret curve: f was evaluated on demand (deferred)" in page


def test_a_sweep_page_has_the_table_and_one_chart_per_r(sweep_dir):
    page = write_html_report(sweep_dir).read_text()
    assert (sweep_dir / "report.html").read_text() == page
    assert "id='table'" in page and "<th>S_T / σ_y</th>" in page
    assert page.count("<td>gp-ucb</td>") == 3 and page.count("<td>random</td>") == 3
    charts = figures(page)
    assert [re.search(r"id='([^']+)'", c).group(1) for c in charts] == \
        ["fig-regret-r3", "fig-regret-r6"]
    for chart in charts:  # gp-ucb and random at that r, and both non-private
        assert chart.count("<polyline class='curve'") == 4
        assert chart.count("non-private") == 4  # two curves, each in data-label and legend


def test_the_paper_column_beside_a_preset_sweep(sweep_dir, tmp_path):
    folder = tmp_path / "sweep"
    shutil.copytree(sweep_dir, folder)
    md = folder / "table.md"
    md.write_text(md.read_text().replace("### synthetic sweep",
                                         "### Table 1: synthetic, eps = e^1.1, S_50 against r"))
    page = write_html_report(folder).read_text()
    assert "<th>paper S_T / σ_y</th>" in page and "<td>0.073</td>" in page  # r = 3
    assert "preset table1" in page
    assert paper_preset([{"scenario": "bank", "T": 50, "epsilon": 2.718281828 ** 2.9}],
                        None).name == "table5"
    assert paper_preset([{"scenario": "bank", "T": 50, "epsilon": 2.0}], None) is None


def test_a_folder_that_is_neither_is_a_one_line_error(tmp_path):
    with pytest.raises(ReportError, match="neither a run folder"):
        write_html_report(tmp_path)
    (tmp_path / "result.json").write_text("{ half")
    with pytest.raises(ReportError, match="cannot read"):
        write_html_report(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "pobo", "report", str(tmp_path / "nothing")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"pobo report: error: ReportError: no folder at {tmp_path / 'nothing'}"]


def test_the_command_prints_the_path(run_dir, tmp_path):
    out = tmp_path / "deep" / "page.html"
    proc = subprocess.run([sys.executable, "-m", "pobo", "report", str(run_dir), "--out",
                           str(out)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out) and out.read_text().startswith("<!DOCTYPE html>")


def test_ticks_of_tiny_values_are_computed_at_once():
    """nice_ticks rounded every tick to 12 decimals and looped until one reached `high`:
    for a chart of values ~1e-20 (a regret that is rounding noise) every tick was 0 and
    the loop ran ~10^8 times, eating gigabytes (`pobo report` hung)."""
    code = ("from pobo.scenarios.html_report import nice_ticks\n"
            "for low, high in ((0, 1e-20), (1e-20, 3e-20), (-2e-300, 5e-300)):\n"
            "    t = nice_ticks(low, high)\n"
            "    assert t[0] <= low and t[-1] >= high and 2 <= len(t) <= 8, (low, high, t)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=30)  # the old loop: killed here, not a hung test
    assert done.returncode == 0, done.stderr


def test_ticks_cover_the_data():
    for low, high in ((0, 2.3), (0, 1), (-1, 3), (0.3, 0.31), (5, 5), (0, 1e-9),
                      (1e20, 1e20 + 1e5), (-7.5, -7.4)):
        ticks = nice_ticks(low, high)
        assert ticks[0] <= low and ticks[-1] >= high and len(ticks) >= 2
        assert ticks == sorted(ticks)


# --- headless Chromium ---------------------------------------------------------------

def chromium() -> str | None:
    """Debian's chromium (or another Chromium) on this machine, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


needs_chromium = pytest.mark.skipif(
    chromium() is None, reason="no chromium binary: install Debian's chromium "
                               "(apt-get install chromium; .ci/run does) to render the report")


def render(page: Path, profile: Path) -> tuple[dict | None, list[str]]:
    """Load `page` in headless Chromium: the #pobo-selfcheck summary its script wrote (None
    if it wrote none) and every console line the browser logged (messages, errors)."""
    proc = subprocess.run(
        [chromium(), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
         f"--user-data-dir={profile}", "--window-size=1280,1600", "--enable-logging=stderr",
         "--v=0", "--dump-dom", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines()
               if ":CONSOLE" in line or "Uncaught" in line]
    found = re.search(r'<pre id="pobo-selfcheck"[^>]*>(.*?)</pre>', proc.stdout, re.S)
    text = html.unescape(found.group(1)) if found else ""
    return (json.loads(text) if text else None), console


@needs_chromium
def test_chromium_renders_the_figures_without_console_errors(run_dir, sweep_dir, tmp_path):
    for folder, count in ((run_dir, 1), (sweep_dir, 2)):
        check, console = render(write_html_report(folder, tmp_path / f"{folder.name}.html"),
                                tmp_path / "profile")
        assert console == []
        assert check is not None and check["errors"] == []
        assert len(check["figures"]) == count
        for figure in check["figures"]:
            assert figure["width"] > 100 and figure["height"] > 100 and figure["curves"] >= 1


@needs_chromium
def test_the_browser_check_sees_a_broken_page(run_dir, tmp_path):
    page = write_html_report(run_dir, tmp_path / "broken.html")
    hide = "<style>svg { display: none !important }</style>"
    text = page.read_text().replace("</body>", hide + "<script>notDefined();</script></body>")
    page.write_text(text)
    check, console = render(page, tmp_path / "profile")
    assert any("notDefined" in line for line in console)
    assert check is not None and any("notDefined" in e for e in check["errors"])
    assert [f["width"] for f in check["figures"]] == [0]
