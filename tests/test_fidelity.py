"""Issue 15: datasets prepared once, regret in sigma_y, LendingClub's export, hits and MoMA's k."""
import math
from pathlib import Path

import numpy as np
import pytest

from pobo.parties.projection import singular_values
from pobo.parties.robust import MedianOfMeansGPUCB, RewardModel, epoch_length
from pobo.parties.kernels import squared_exponential
from pobo.parties.strategies import Distinct, make_strategy, strategy_spec
from pobo.scenarios import bank
from pobo.scenarios.problem import distinct_hits
from pobo.scenarios.registry import build_problem
from pobo.session import RunConfig
from pobo.sweep import SweepSpec, run_sweep

FULL = Path(__file__).resolve().parents[2] / "shared" / "data" / "lending-club-2007-2011.csv.gz"
HEADER = ('"id","member_id","loan_amnt","funded_amnt","funded_amnt_inv","term","int_rate",'
          '"annual_inc","loan_status","total_pymnt_inv"')


def export_fixture(path: Path) -> Path:
    """A small file shaped like LendingClub's LoanStats3a export: a notice line, percent
    rates, a mid-file note, 'does not meet the credit policy' statuses, footer lines."""
    rng = np.random.default_rng(7)
    lines = ["Notes offered by Prospectus (https://www.lendingclub.com/info/prospectus.action)",
             HEADER]
    for i in range(40):
        status = ("Fully Paid", "Charged Off", "Current")[i % 3]
        if i >= 30:
            status = "Does not meet the credit policy. Status:" + ("Fully Paid", "Charged Off")[i % 2]
        if i == 30:
            lines.append('"Loans that do not meet the credit policy"')
        amount = 1000 + 250 * i
        rate = 6 + 0.4 * i
        paid = amount * (1 + rate / 100 * rng.uniform(0.2, 1)) if "Paid" in status else amount * 0.4
        lines.append(f'"{1000 + i}","{2000 + i}","{amount}","{amount}","{amount}"," 36 months",'
                     f'" {rate:.2f}%","{30000 + 1500 * i}","{status}","{paid:.2f}"')
    lines += ["", "Total amount funded in policy code 1: 460296150",
              "Total amount funded in policy code 2: 0"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_loader_reads_the_original_export_shape(tmp_path):
    X, roi, table = bank.load(export_fixture(tmp_path / "LoanStats3a.csv"))
    # 40 loans; the 10 "Current" of the first 30 are not completed; the 10 credit-policy
    # loans are completed loans and kept
    assert table.n == 30 and len(roi) == 30
    assert table.dropped == {"notice line": 1, "note or footer line": 3, "loan not completed": 10}
    assert X[0, 1] == pytest.approx(6.0) and X[:, 1].max() == pytest.approx(6 + 0.4 * 39)
    assert np.all(np.isfinite(roi))


def test_fraction_rates_read_as_percent():
    assert bank.rate_percent(np.array([0.1065, 0.2])) == pytest.approx([10.65, 20.0])
    assert bank.rate_percent(np.array([10.65, 0.5])) == pytest.approx([10.65, 0.5])


def test_a_missing_column_is_a_one_line_error(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("notice\nid,int_rate\n1,2\n")
    with pytest.raises(ValueError, match="no column"):
        bank.load(path)


def test_prepared_dataset_sigma_min_and_sigma_y_do_not_depend_on_the_seed(tmp_path):
    data = str(export_fixture(tmp_path / "loans.csv"))
    a, b = build_problem("bank", 0, data=data), build_problem("bank", 12345, data=data)
    assert np.array_equal(a.X, b.X) and np.array_equal(a.f, b.f)
    assert singular_values(a.X)[-1] == singular_values(b.X)[-1] > 0
    assert a.signal_std == b.signal_std > 0
    # the run seed still drives what it should: the embedded stand-in's data differ
    assert not np.array_equal(bank.generate(np.random.default_rng(0), 50)[0],
                              bank.generate(np.random.default_rng(1), 50)[0])


def test_sigma_y_normalisation_of_a_synthetic_run_is_the_raw_regret(tmp_path):
    spec = SweepSpec("synthetic", epsilons=(20.0,), rs=(2,), seeds=2, T=8, options={"grid": 10})
    rows = run_sweep(spec, tmp_path, workers=1, progress=None)
    assert rows and all(row["sigma_y"] == 1.0 for row in rows)
    assert [r["simple_regret_sigma_y"] for r in rows] == [r["simple_regret"] for r in rows]
    assert any(r["simple_regret"] > 0 for r in rows)  # a nontrivial check, not 0 == 0


def test_moma_k_sets_the_epoch_length():
    Z = np.linspace(0, 1, 20)[:, None]
    model = RewardModel(B=1.0, R=1.0, ldp_eps=1.0)
    kernel = squared_exponential(0.2, 1.0)
    default = MedianOfMeansGPUCB(Z, kernel, 2000, model, rng=np.random.default_rng(0))
    assert default.k == epoch_length(2000, 0.05) == math.ceil(24 * math.log(4 * math.e * 2000 / 0.05))
    assert MedianOfMeansGPUCB(Z, kernel, 2000, model, k=8, rng=np.random.default_rng(0)).k == 8
    assert make_strategy(strategy_spec("moma-gp-ucb", 8)).moma_k == 8
    with pytest.raises(ValueError, match="k must be"):
        make_strategy("moma-gp-ucb+k=1")


def test_moma_k_changes_the_epochs_of_a_session(tmp_path):
    import asyncio

    from pobo.session import run_inproc

    def run(k):
        cfg = RunConfig("ldp-synthetic", T=24, seed=3, strategy="moma-gp-ucb", ldp_epsilon=1.0,
                        moma_k=k)
        return asyncio.run(run_inproc(cfg, tmp_path / str(k), transcripts=False))["queries"]

    short, default = run(6), run(None)
    assert len(set(default)) == 1  # 24 < 312: one epoch, one row
    assert all(len(set(short[i:i + 6])) == 1 for i in range(0, 24, 6))
    assert len(set(short)) > 1


def test_hits_count_distinct_positive_rows():
    f = np.array([0.0, 1.0, 1.0, 0.0])
    assert distinct_hits(f, [1, 1, 1, 2, 0, 2]) == [1, 1, 1, 2, 2, 2]


def test_hospital_does_not_retest_a_patient(tmp_path):
    import asyncio

    from pobo.session import run_inproc

    cfg = RunConfig("hospital", T=40, seed=0, options={"n": 120}, epsilon=8.0, r=5)
    assert cfg.distinct and cfg.strategy_spec == "gp-ucb+distinct"
    result = asyncio.run(run_inproc(cfg, tmp_path, transcripts=False))
    assert len(set(result["queries"])) == 40
    assert result["hits"][-1] == sum(value > 0 for value in result["measured"])
    assert isinstance(make_strategy("random+distinct"), Distinct)


def test_realestate_does_not_ask_a_project_twice_but_the_paper_presets_may(tmp_path):
    """A project's price is tabulated and exact: by default GP-UCB asks each at most once
    (38 of 100 queries were repeats before, seeds 0-99); the paper's presets and their
    random baseline keep the paper's GP-UCB, which may repeat; --no-distinct lifts it."""
    import asyncio

    from pobo.cli import build_parser, sweep_spec_from_args
    from pobo.scenarios.presets import RANDOM_BASELINE
    from pobo.session import run_inproc

    cfg = RunConfig("realestate", T=40, seed=0, options={"n": 300})
    assert cfg.distinct and cfg.strategy_spec == "gp-ucb+distinct"
    result = asyncio.run(run_inproc(cfg, tmp_path, transcripts=False))
    assert len(set(result["queries"])) == 40
    parse = build_parser().parse_args
    for argv in (["--preset", "table8"], ["--preset", "fig2c"],
                 RANDOM_BASELINE["realestate"].split(), ["realestate", "--no-distinct"]):
        spec, _ = sweep_spec_from_args(parse(["sweep", *argv]))
        assert spec.runs() and not any(c.distinct for _, c in spec.runs()), argv
    for argv in (["realestate"], ["--preset", "frontier", "realestate"], ["synthetic", "--distinct"]):
        spec, _ = sweep_spec_from_args(parse(["sweep", *argv]))
        assert spec.runs() and all(c.distinct for _, c in spec.runs()), argv


@pytest.mark.skipif(not FULL.exists(), reason=f"the full LendingClub file is not at {FULL} "
                                              "(shared data beside the project)")
def test_the_full_2007_2011_file_loads():
    X, roi, table = bank.load(str(FULL))
    assert table.n > 42_000 and 5 < np.median(X[:, 1]) < 20  # rates in percent


def test_fidelity_verdict_follows_the_csv(tmp_path):
    from pobo.fidelity import render
    from pobo.scenarios.presets import PRESETS

    def write(offset):
        preset = PRESETS["table1"]
        rows = ["scenario,strategy,epsilon,r,seed,T,n,lifted,simple_regret,"
                "simple_regret_sigma_y,sigma_y,sigma_y_source"]
        for r in preset.rs:
            for seed in range(4):
                v = preset.paper[r] + offset + 0.001 * (seed - 1.5)
                rows.append(f"synthetic,gp-ucb,3.0,{r},{seed},50,100,False,{v},{v},1.0,declared")
        (tmp_path / "table1.csv").write_text("\n".join(rows) + "\n")
        return render(tmp_path)

    assert "**Verdict (paper's text): reproduces** (6 of 6" in write(0.0)
    assert "**Verdict (paper's text): does not reproduce** (0 of 6" in write(0.5)
