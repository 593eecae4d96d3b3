"""Issue 25: --authors-code switches on exactly the two departures of the PO-GP-UCB
authors' code (the sigma + omega lift, the mean + beta^1/2 variance UCB with delta 0.1), and
FIDELITY.md's verdicts are computed from the committed CSVs."""
import asyncio
import math
from pathlib import Path

import numpy as np
import pytest

from pobo.parties.gp import IncrementalGP
from pobo.parties.kernels import squared_exponential
from pobo.parties.projection import lifted_dataset, project
from pobo.parties.service import CuratorSettings
from pobo.parties.strategies import GPUCB, Distinct, beta_gp_ucb, make_strategy
from pobo.cli import build_parser, config_from_args, sweep_spec_from_args
from pobo.launch import modeler_argv, scenario_argv
from pobo.session import RunConfig, run_inproc

ROOT = Path(__file__).resolve().parents[1]


def small_matrix() -> np.ndarray:
    return np.random.default_rng(3).normal(size=(7, 3)) * np.array([3.0, 1.0, 0.5])


def test_additive_lift_adds_omega_to_every_singular_value():
    X = small_matrix()
    Xc = X - X.mean(axis=0)
    s = np.linalg.svd(Xc, compute_uv=False)
    w = 2.5
    assert np.linalg.svd(lifted_dataset(Xc, w, additive=True), compute_uv=False) == \
        pytest.approx(s + w)
    assert np.linalg.svd(lifted_dataset(Xc, w), compute_uv=False) == \
        pytest.approx(np.sqrt(s**2 + w**2))


def test_projection_with_the_additive_lift_is_the_lifted_matrix_times_M():
    X, r, eps, delta = small_matrix(), 4, 1.0, 1e-3  # omega ~ 1e3 >> sigma_min: lifted
    release, report = project(X, eps, delta, r, np.random.default_rng(5), additive_lift=True)
    assert report.lifted
    M = np.random.default_rng(5).standard_normal((3, r))
    Xc = X - X.mean(axis=0)
    expected = lifted_dataset(Xc, report.omega, additive=True) @ M / math.sqrt(r)
    assert release.Z == pytest.approx(expected, rel=1e-9)
    text, _ = project(X, eps, delta, r, np.random.default_rng(5))
    assert not np.allclose(text.Z, release.Z)  # the switch changes the lifted release


def test_additive_lift_leaves_the_unlifted_branch_and_other_modes_alone():
    X = small_matrix() * 1e6  # sigma_min far above omega: not lifted
    a, rep = project(X, 1.0, 1e-3, 2, np.random.default_rng(1), additive_lift=True)
    b, _ = project(X, 1.0, 1e-3, 2, np.random.default_rng(1))
    assert not rep.lifted and np.array_equal(a.Z, b.Z)
    for mode in ("always", "private"):
        with pytest.raises(ValueError, match="lift='paper'"):
            project(small_matrix(), 1.0, 1e-3, 2, np.random.default_rng(1), lift=mode,
                    additive_lift=True)
    with pytest.raises(ValueError, match="--lift paper"):
        CuratorSettings(1.0, 1e-3, 2, 5, lift="private", additive_lift=True)


def fitted_gp() -> IncrementalGP:
    """A GP over 60 points on a line with 3 observations: posterior variances from ~0 to 1."""
    Z = np.linspace(0, 10, 60)[:, None]
    gp = IncrementalGP(Z, squared_exponential(1.0, 1.0), 1e-4, capacity=5)
    for i, y in ((10, 0.8), (30, 0.5), (50, 0.2)):
        gp.add(i, y)
    return gp


def test_authors_ucb_scores_mean_plus_root_beta_variance_with_delta_0_1():
    gp, t = fitted_gp(), 4
    ucb = make_strategy("gp-ucb+authors")
    assert ucb == GPUCB(delta=0.1, beta_scale=1.0, variance=True)
    beta = beta_gp_ucb(t - 1, gp.n, 0.1)  # the authors' index: observations so far
    expected = int(np.argmax(gp.mean + math.sqrt(beta) * gp.var))
    assert ucb.select(gp, t, np.random.default_rng(0)) == expected
    assert ucb.score(gp, t) == pytest.approx(gp.mean + math.sqrt(beta) * gp.var)
    text = make_strategy("gp-ucb")
    assert text == GPUCB(delta=0.05, beta_scale=1.0, variance=False)
    std_pick = int(np.argmax(gp.mean + math.sqrt(beta_gp_ucb(t, gp.n, 0.05)) * np.sqrt(gp.var)))
    assert text.select(gp, t, np.random.default_rng(0)) == std_pick
    # a case where the two scores disagree, so the check above can fail
    gp2 = IncrementalGP(np.array([[0.0], [1.0]]), squared_exponential(1.0, 1.0), 1e-4, 3)
    gp2.add(0, 0.0)
    gp2.mean[:], gp2.var[:] = [1.0, 0.0], [0.01, 0.09]
    assert GPUCB(delta=0.1, variance=True).score(gp2, 2)[1] == pytest.approx(
        math.sqrt(beta_gp_ucb(1, 2, 0.1)) * 0.09)
    assert GPUCB(delta=0.1).score(gp2, 1)[1] == pytest.approx(
        math.sqrt(beta_gp_ucb(1, 2, 0.1)) * 0.3)


@pytest.mark.parametrize("t", [2, 3, 7, 40])
def test_authors_ucb_weight_is_root_beta_at_the_authors_index(t):
    """Issue 50: the authors' `_get_beta()` returns sqrt(beta), indexed by the observations
    so far (t - 1). Two rows whose order flips between beta_{t-1}^1/2 and the nearest wrong
    weights (beta_t^1/2: pobo's own index; beta_{t-1}: the square root left out): only the
    authors' weight picks row 0."""
    n, delta = 2, 0.1
    low, high = math.sqrt(beta_gp_ucb(t - 1, n, delta)), math.sqrt(beta_gp_ucb(t, n, delta))
    assert low < high < low**2  # both wrong weights are larger than the right one
    var = np.array([0.01, 0.09])
    gp = IncrementalGP(np.array([[0.0], [1.0]]), squared_exponential(1.0, 1.0), 1e-4, 3)
    gp.add(0, 0.0)
    gp.mean[:], gp.var[:] = [(low + high) / 2 * (var[1] - var[0]), 0.0], var
    for weight, row in ((low, 0), (high, 1), (low**2, 1)):
        assert int(np.argmax(gp.mean + weight * var)) == row
    ucb = make_strategy("gp-ucb+authors")
    assert ucb.select(gp, t, np.random.default_rng(0)) == 0
    assert ucb.score(gp, t) == pytest.approx(gp.mean + low * var)
    # the engine's scratch score (what Distinct masks) is the same
    assert gp.ucb_score(ucb.beta(t, n), True) == pytest.approx(gp.mean + low * var)


def test_authors_ucb_first_round_is_a_uniform_draw_without_a_log_of_zero():
    gp = IncrementalGP(np.arange(5.0)[:, None], squared_exponential(1.0, 1.0), 1e-4, 3)
    ucb = make_strategy("gp-ucb+authors")
    assert ucb.beta(1, 5) == beta_gp_ucb(1, 5, 0.1)  # no beta_0 = 2 ln 0
    picks = {ucb.select(gp, 1, np.random.default_rng(s)) for s in range(30)}
    assert len(picks) > 1


def test_distinct_rows_keep_the_authors_score():
    gp = fitted_gp()
    strategy = make_strategy("gp-ucb+distinct+authors")
    assert isinstance(strategy, Distinct) and strategy.inner.variance
    score = strategy.inner.score(gp, 4)
    score[[10, 30, 50]] = -np.inf
    assert strategy.select(gp, 4, np.random.default_rng(0)) == int(np.argmax(score))


def test_the_switch_travels_to_both_parties_and_into_result_json(tmp_path):
    args = build_parser().parse_args(["run", "synthetic", "--authors-code", "--grid", "12"])
    config = config_from_args(args)
    assert config.authors_code and config.lift == "paper"  # the switch implies the paper's branch
    assert config.strategy_spec == "gp-ucb+authors"
    assert "--authors-code" in scenario_argv(config) and "--authors-code" in modeler_argv(config)
    plain = config_from_args(build_parser().parse_args(["run", "synthetic"]))
    assert not plain.authors_code and plain.strategy_spec == "gp-ucb"
    assert "--authors-code" not in scenario_argv(plain) + modeler_argv(plain)

    def run(authors):
        cfg = RunConfig("synthetic", epsilon=2.0, r=4, T=12, seed=1, options={"grid": 12},
                        lift="paper", authors_code=authors)
        return asyncio.run(run_inproc(cfg, tmp_path / str(authors), transcripts=False))

    on, off = run(True), run(False)
    assert on["lifted"] and off["lifted"]
    assert "sigma + omega" in on["authors_code"] and off["authors_code"] is None
    assert on["modeler"]["strategy"] == "gp-ucb+authors"
    assert on["queries"] != off["queries"]


def test_presets_accept_the_switch_and_pass_the_bank_preparation():
    parse = build_parser().parse_args
    spec, _ = sweep_spec_from_args(parse(["sweep", "--preset", "table1", "--authors-code"]))
    assert spec.authors_code and spec.lift == "paper"
    assert all(cfg.authors_code and rid.endswith(("-authors-seed0", "-authors-seed1"))
               for rid, cfg in spec.runs()[:12])
    bank, _ = sweep_spec_from_args(parse(["sweep", "--preset", "table4"]))
    assert bank.options == {"prep": "paper"} and bank.strategies == ("gp-ucb",)
    assert not bank.authors_code


def write_table(folder: Path, name: str, offset: float, seeds: int = 4) -> None:
    from pobo.scenarios.presets import PRESETS

    preset = PRESETS["table1"]
    rows = ["scenario,strategy,epsilon,r,seed,T,n,lifted,simple_regret,"
            "simple_regret_sigma_y,sigma_y,sigma_y_source"]
    for r in preset.rs:
        for seed in range(seeds):
            v = preset.paper[r] + offset + 0.001 * (seed - 1.5)
            rows.append(f"synthetic,gp-ucb,3.0,{r},{seed},50,100,False,{v},{v},1.0,declared")
    (folder / f"{name}.csv").write_text("\n".join(rows) + "\n")


def test_both_columns_verdicts_are_computed_from_the_csvs(tmp_path):
    from pobo.fidelity import render

    write_table(tmp_path, "table1", 0.5)
    write_table(tmp_path, "table1-authors", 0.0)
    text = render(tmp_path)
    assert "**Verdict (paper's text): does not reproduce** (0 of 6" in text
    assert "**Verdict (authors' code): reproduces** (6 of 6" in text
    assert "--preset table1 --authors-code --seeds 4" in text
    write_table(tmp_path, "table1-authors", 0.5)
    assert "**Verdict (authors' code): does not reproduce** (0 of 6" in render(tmp_path)


def test_committed_fidelity_md_is_generated_from_the_committed_csvs():
    from pobo.fidelity import render

    assert (ROOT / "FIDELITY.md").read_text() == render(ROOT / "fidelity"), \
        "FIDELITY.md differs from `python -m pobo.fidelity`: regenerate it"


def test_bank_tables_check_random_and_the_largest_admissible_r(tmp_path):
    from pobo.fidelity import render
    from pobo.scenarios.presets import PRESETS

    preset = PRESETS["table4"]
    head = ("scenario,strategy,epsilon,r,seed,T,n,lifted,simple_regret,simple_regret_sigma_y,"
            "sigma_y,sigma_y_source")
    rows, random = [head], [head]
    for r in preset.rs:
        for seed in range(4):
            v = 0.01 * r + 0.001 * seed  # lowest at r = 3; r <= 10 unlifted
            rows.append(f"bank,gp-ucb,14.9,{r},{seed},50,36000,{r > 10},{v},{v},1.0,std(f)")
            # a seed's random run is the same run at every r: counted once
            rows.append(f"bank,random,14.9,{r},{seed},50,36000,{r > 10},0.5,0.5,1.0,std(f)")
    for seed in range(4, 10):
        random.append(f"bank,random,18.2,15,{seed},50,36000,False,0.5,0.5,1.0,std(f)")
    (tmp_path / "table4.csv").write_text("\n".join(rows) + "\n")
    text = render(tmp_path)
    assert "random's runs: 0.500 ± 0.000 σ_y over 4 seeds" in text
    assert "lower by more than 2 se at 6 of 6 r" in text
    assert "**Largest admissible r = 10** (unlifted: r ≤ 10); lowest mean at r = 3; r = 10 is " \
           "not within 2 se" in text
    (tmp_path / "bank-random.csv").write_text("\n".join(random) + "\n")
    assert "random's runs: 0.500 ± 0.000 σ_y over 10 seeds" in render(tmp_path)
    # the exact expectation, recorded by any run on the same data and T, is the baseline
    (tmp_path / "fig2b.csv").write_text(
        head + ",random_regret_expected\n"
        "bank,gp-ucb,2.7,15,0,50,36000,True,0.1,0.05,2.0,std(f),0.02\n")
    text = render(tmp_path)
    assert "exact E[S_T] of T uniform random queries 0.010 σ_y (from f)" in text
    assert "higher at 6, indistinguishable at 0" in text


def test_bank_paper_preparation_is_explicit_and_its_unit_is_std_f(tmp_path):
    from pobo.scenarios import bank
    from pobo.scenarios.registry import build_problem
    from test_fidelity import export_fixture

    data = str(export_fixture(tmp_path / "loans.csv"))
    paper = build_problem("bank", 0, data=data, prep="paper")
    assert paper.signal_std == pytest.approx(float(np.std(paper.f)))
    assert paper.signal_std_source == bank.PAPER_UNIT
    assert np.max(np.linalg.norm(paper.X, axis=1)) == pytest.approx(25.0)
    default = build_problem("bank", 0, data=data)
    assert not np.allclose(default.X, paper.X)  # ARD scaling, not standardised
    with pytest.raises(ValueError, match="prep"):
        build_problem("bank", 0, data=data, prep="mine")


def test_random_regret_expectation_is_exact():
    import itertools

    from pobo.scenarios.problem import random_regret_expected

    f, T = np.array([0.3, 1.0, -0.5, 1.0]), 3  # ties included
    brute = np.mean([f.max() - f[list(q)].max() for q in itertools.product(range(4), repeat=T)])
    assert random_regret_expected(f, T) == pytest.approx(brute, abs=1e-12)
    assert random_regret_expected(np.ones(5), 2) == 0.0


def test_moma_is_ranked_beside_the_other_ldp_strategies(tmp_path):
    from pobo.fidelity import render

    head = "scenario,strategy,moma_k,beta_scale,ldp_epsilon,seed,T,cumulative_regret"
    moma = [head] + [f"ldp-synthetic,moma-gp-ucb,{k},,1.0,{s},2000,{v + s}"
                     for k, v in ((8, 100.0), (312, 300.0)) for s in range(3)]
    (tmp_path / "ldp-moma-k.csv").write_text("\n".join(moma) + "\n")

    def others(ata):
        rows = [head] + [f"ldp-synthetic,{name},,,1.0,{s},2000,{v + s}"
                         for name, v in (("ata-gp-ucb", ata), ("random", 400.0)) for s in range(3)]
        (tmp_path / "ldp-strategies.csv").write_text("\n".join(rows) + "\n")
        return render(tmp_path)

    text = others(50.0)
    assert "MoMA at its best k is 2 of 4" in text and "\"MoMA best\" is not reproduced" in text
    assert "\"MoMA best\" is reproduced" in others(200.0)
    assert "within 2 se of the leader" in others(99.0)
