"""`pobo report`: the HTML page of a run or a sweep, its escaping, its errors, and how it
renders in headless Chromium (Debian's chromium; skipped only where there is none)."""
import asyncio
import csv
import html
import json
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pobo.html_report import (
    ReportError, nice_ticks, paper_preset, write_html_report,
)
from pobo.launch import publish_keys
from pobo.report import write_report
from pobo.session import RunConfig, Signing, run_inproc
from pobo.sweep import SweepSpec, run_sweep

SWEEP = SweepSpec("synthetic", epsilons=(8.0,), rs=(3, 6), seeds=2, T=6, non_private=True,
                  strategies=("gp-ucb", "random"), options={"grid": 12})
FRONTIER = SweepSpec("synthetic", epsilons=(1.0, 8.0), seeds=2, T=6, non_private=True,
                     options={"grid": 12}, lifts=("gaussian", "jl"))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """An in-process run signed with the (test session's) key store, as `pobo run` signs,
    with its transcripts and the public keys in keys/."""
    out = tmp_path_factory.mktemp("run")
    signing = Signing.from_store()
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


@pytest.fixture(scope="module")
def frontier_dir(tmp_path_factory) -> Path:
    """A tiny sweep over two releases (gaussian, jl) at two epsilons, as the frontier
    preset makes, with the non-private baseline."""
    out = tmp_path_factory.mktemp("frontier")
    rows = run_sweep(FRONTIER, out, executor=ThreadPoolExecutor(1), progress=None)
    write_report(rows, out, scenario="synthetic", options=FRONTIER.options,
                 epsilons=FRONTIER.epsilons, rs=FRONTIER.rs, title="frontier", dataset="")
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
    # a seeded run carries no DP claim: its ledger is nominal, and the page says so
    assert "privacy ledger (nominal: no DP claim: seeded" in page
    assert "basic composition" in page
    assert html.escape(result["privacy_unit"]["dataset"]["neighbouring"], quote=True) in page
    assert "OK: 2 transcript(s) audited" in page and page.count("<td>verified</td>") == 2
    [svg] = figures(page)
    assert svg.count("<polyline class='curve'") == 1 and "simple regret / σ_y" in svg
    # self-contained: nothing is fetched
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=|url\(|@import", page)


def test_a_run_resigned_with_its_keys_folder_replaced_is_not_verified(run_dir, tmp_path):
    """The issue's attack: re-sign a run with new keys and replace its keys/ folder. The
    page trusts the user's key store, not keys/: NOT VERIFIED, naming the key."""
    folder = tmp_path / "resigned"
    other = Signing.throwaway()
    asyncio.run(run_inproc(RunConfig("synthetic", T=8, options={"grid": 12}), folder,
                           signing=other))
    publish_keys(other.curator.public_hex, other.modeler.public_hex, folder)
    page = write_html_report(folder).read_text()
    assert "NOT VERIFIED: 2 transcript(s)" in page and "OK: 2 transcript" not in page
    assert f"signed with {other.curator.public_hex[:16]}" in page


def test_a_tampered_transcript_turns_the_verdict(run_dir, tmp_path):
    folder = copy_run(run_dir, tmp_path)
    data = bytearray((folder / "modeler.transcript").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (folder / "modeler.transcript").write_bytes(bytes(data))
    page = write_html_report(folder).read_text()
    assert "VIOLATIONS" in page and "OK: 2 transcript" not in page


def test_a_lone_transcript_cut_before_its_end_is_incomplete(run_dir, tmp_path):
    """Issue 45: a curator transcript cut before the modeler's End, re-anchored, with the
    modeler's transcript gone: what `pobo audit` exits 4 for, the page calls INCOMPLETE."""
    import hashlib

    import msgpack

    from pobo.protocol.transcript import raw_records
    folder = copy_run(run_dir, tmp_path)
    (folder / "modeler.transcript").unlink()
    raws = [raw for raw, _ in raw_records((folder / "curator.transcript").read_bytes())]
    end = next(i for i, raw in enumerate(raws)
               if msgpack.unpackb(raw, raw=False)["kind"] == "end")
    (folder / "curator.transcript").write_bytes(b"".join(raws[:end]))
    record = json.loads((folder / "curator.json").read_text())  # re-anchored by its party
    record["transcript_head"] = {"records": end,
                                 "last": hashlib.sha256(raws[end - 1]).hexdigest()}
    (folder / "curator.json").write_text(json.dumps(record))
    page = write_html_report(folder).read_text()
    assert "INCOMPLETE: 1 transcript(s)" in page and "OK: 1 transcript" not in page, page


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


def section(page: str, ident: str) -> str:
    """The HTML of <section id=ident> (empty if there is none)."""
    found = re.search(rf"<section id='{ident}'>(.*?)</section>", page, re.S)
    return found.group(1) if found else ""


def test_a_sweep_page_has_the_table_and_one_chart_with_every_curve(sweep_dir):
    page = write_html_report(sweep_dir).read_text()
    assert (sweep_dir / "report.html").read_text() == page
    assert "id='table'" in page and "<th>S_T / σ_y</th>" in page
    assert page.count("<td>gp-ucb</td>") == 3 and page.count("<td>random</td>") == 3
    [chart] = figures(page)  # one chart, not one per r
    labels = re.findall(r"<polyline class='curve' data-label='([^']+)'", chart)
    # gp-ucb and random at each r, and both non-private: six settings, six curves
    assert sorted(labels) == sorted([f"{s}, ε = 8, r = {r}" for s in ("gp-ucb", "random")
                                     for r in (3, 6)] + ["gp-ucb, non-private",
                                                         "random, non-private"])
    styles = re.findall(r"<polyline [^>]*stroke='([^']+)' stroke-width='2'( stroke-dasharray="
                        r"'[^']+')?", chart)
    assert len(set(styles)) == len(labels)  # every curve drawn apart from the others


def test_a_run_page_leads_with_the_answer_and_the_privacy_statement(run_dir):
    page = write_html_report(run_dir).read_text()
    result = json.loads((run_dir / "result.json").read_text())
    first = section(page, "result")
    # the first section after the title, before any figure and any detail
    assert page.index("<section id='result'>") < min(
        page.index(k) for k in ("<svg", "id='parameters'", "id='ledger'", "id='audit'"))
    assert "<h2" not in page[:page.index("<section id='result'>")]
    regret, f_star = result["simple_regret"][-1], result["f_star"]
    sigma_y = result["sigma_y"]
    assert f"<td>best f found</td><td>{f_star - regret:.6g}</td>" in first
    # curator-private fields (pobo.party_records.CURATOR_PRIVATE) are not on the page
    assert "f*" not in page and "σ_min" not in page and result["dataset_digest"] not in page
    assert f"{f_star:.6g}" not in page and f"{result['sigma_min']:.6g}" not in page
    assert f"{regret / sigma_y:.4g} σ_y" in first
    unit = result["privacy_unit"]
    assert html.escape(unit["dataset"]["claim"], quote=True) in first
    for item in unit["epsilon_by_distance"]:
        assert f"<td>{item['epsilon']:.4g}</td>" in first
    assert "ε for a whole row" in first and f"{unit['epsilon_whole_row']:.4g}" in first
    central = result["ledger"]["central"]
    # the accountant's epsilon at the delta it is stated at, and the delta the entries spent
    # (a seeded run: no DP claim, and its ledger's epsilons said to be nominal)
    assert result["dp"] is False and "Ledger: no DP claim (seeded" in first
    assert (f"nominally ε {central['epsilon']:.4g} spent at δ {central['delta']:.3g} (δ spent "
            f"{central['delta_basic']:.3g}); budget ε ") in first


def test_the_answer_of_a_hits_run_and_a_budget(run_dir, tmp_path):
    result = json.loads((run_dir / "result.json").read_text())
    ledger = result["ledger"]
    ledger["central"].update(budget_epsilon=8.0, budget_delta=1e-5)
    folder = copy_run(run_dir, tmp_path, metric="hits", hits=[0, 1, 1, 2, 3, 3, 3, 4],
                      random_hits_expected=2.0, ledger=ledger)
    first = section(write_html_report(folder).read_text(), "result")
    assert "4 distinct positives in 8 queries; random selection expects 2.0" in first
    assert "<td>random selection expects</td><td>2</td>" in first
    assert "); budget ε 8, δ 1e-05" in first


def test_the_answer_of_a_sweep_is_its_best_private_setting_against_the_baselines(sweep_dir):
    page = write_html_report(sweep_dir).read_text()
    first = section(page, "result")
    rows = list(csv.DictReader(open(sweep_dir / "runs.csv")))

    def mean(pick) -> float:
        values = [float(r["simple_regret_sigma_y"]) for r in rows if pick(r)]
        return sum(values) / len(values)

    private = {(r["strategy"], r["r"]) for r in rows if r["policy"] == "private"
               and r["strategy"] != "random"}
    best = min(private, key=lambda k: mean(lambda r: (r["strategy"], r["r"]) == k
                                           and r["policy"] == "private"))
    best_mean = mean(lambda r: (r["strategy"], r["r"]) == best and r["policy"] == "private")
    tied = [k for k in private if mean(lambda r: (r["strategy"], r["r"]) == k
                                       and r["policy"] == "private") == best_mean]
    assert any(f"best private (gp-ucb, ε = 8, r = {k[1]}) {best_mean:.3g}" in first
               for k in tied)  # settings with equal means: any of them
    assert f"random {mean(lambda r: r['strategy'] == 'random'):.3g}" in first
    non_private = mean(lambda r: r["policy"] == "non-private" and r["strategy"] == "gp-ucb")
    assert f"non-private {non_private:.3g}" in first
    assert "Privacy of the best private setting" in first and "per run" in first
    assert page.index("<section id='result'>") < page.index("<svg")


def test_no_absolute_path_in_either_page(run_dir, sweep_dir, tmp_path):
    folder = copy_run(run_dir, tmp_path, source="read from /home/alice/private/bank.csv",
                      error="OSError: cannot open /srv/data/x.csv")
    for page in (write_html_report(folder).read_text(),
                 write_html_report(sweep_dir, tmp_path / "s.html").read_text()):
        assert str(tmp_path) not in page and str(sweep_dir) not in page
        assert "/tmp/" not in page and "/home/" not in page and "/srv/" not in page
    page = write_html_report(folder).read_text()
    assert "folder run</p>" in page and "read from …/bank.csv" in page
    assert "</td>" in page and "<polyline" in page  # the markup itself untouched


def test_epsilon_is_shown_as_given(run_dir, sweep_dir, tmp_path):
    pages = [write_html_report(sweep_dir, tmp_path / "s.html").read_text(),
             write_html_report(copy_run(run_dir, tmp_path, epsilon=8.0)).read_text()]
    for page in pages:
        assert "e^" not in page and "2.079" not in page  # not e^2.1, not ln 8
    sweep, run = pages
    assert "<td>ε</td><td>8, non-private</td>" in sweep  # the parameters
    assert "<td>8</td>" in sweep  # the table's ε column
    assert "data-label='gp-ucb, ε = 8, r = 3'" in sweep
    assert "<td>ε</td><td>8</td>" in run and "data-label='ε = 8, r = " in run


def test_a_sweep_over_releases_puts_the_frontier_near_the_top(frontier_dir, sweep_dir):
    page = write_html_report(frontier_dir).read_text()
    charts = figures(page)
    assert [re.search(r"id='([^']+)'", c).group(1) for c in charts] == ["frontier",
                                                                         "fig-regret"]
    frontier = charts[0]
    assert set(re.findall(r"data-label='([^']+)'", frontier)) == {"gaussian", "jl",
                                                                  "non-private"}
    assert ">1</text>" in frontier and ">8</text>" in frontier  # the epsilons, by name
    assert page.index("</section>") < page.index("id='frontier'") < page.index("id='table'")
    # the table and the curves keep the releases apart
    assert page.count("<td>gaussian</td>") == 2 and page.count("<td>jl</td>") == 2
    assert "data-label='gp-ucb, jl release, ε = 8'" in charts[1]
    assert "id='frontier'" not in write_html_report(sweep_dir).read_text()


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
    with pytest.raises(ReportError, match="holds no run .result.json., sweep"):
        write_html_report(tmp_path)
    (tmp_path / "result.json").write_text("{ half")
    with pytest.raises(ReportError, match="cannot read"):
        write_html_report(tmp_path)
    (tmp_path / "result.json").write_text('{"queries": 5, "metric": "hits", "hits": 3}')
    with pytest.raises(ReportError, match="a record of an unexpected shape"):
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
    code = ("from pobo.html_report import nice_ticks\n"
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
def test_chromium_renders_the_figures_without_console_errors(run_dir, sweep_dir, frontier_dir,
                                                             tmp_path):
    for folder, ids in ((run_dir, ["fig-regret"]), (sweep_dir, ["fig-regret"]),
                        (frontier_dir, ["frontier", "fig-regret"])):
        check, console = render(write_html_report(folder, tmp_path / f"{folder.name}.html"),
                                tmp_path / "profile")
        assert console == []
        assert check is not None and check["errors"] == []
        assert [f["id"] for f in check["figures"]] == ids
        for figure in check["figures"]:
            assert figure["width"] > 100 and figure["height"] > 100 and figure["curves"] >= 1
        # the answer above the fold of a laptop's screen (800 px), the first thing under
        # the title
        assert check["result"] is not None and check["result"]["answer"]
        assert check["result"]["top"] < 250 and check["result"]["answer_bottom"] < 800
        assert all(f["top"] > check["result"]["answer_bottom"] for f in check["figures"])
    frontier, regret = check["figures"]
    assert frontier["top"] < regret["top"]


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
