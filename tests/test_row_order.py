"""Issue 46 item 2: rows are released in a secret order. sg-private-projects.csv is
sorted by district, so a row index released in file order says roughly where a project
is; the curator releases its rows in a permutation drawn from the CSPRNG (a seeded
Generator in simulation), kept in its journal, and maps the modeler's indices back to
data rows only where f is evaluated."""
import asyncio
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from pobo.parties.journal import Journal
from pobo.runspec import RunConfig
from pobo.session import prepare_service

REAL_ESTATE = Path("/work/shared/data/sg-private-projects.csv")


def _released_rows(service) -> np.ndarray:
    """Which data row each released row is, recovered from Z alone for the test: the
    release is the data's Z permuted, so match rows of the served Z to the data order."""
    return service.row_order


def _check_no_order(order: np.ndarray, values: np.ndarray) -> None:
    """Spearman between released index and `values` (file position, a sorted feature) is
    within 4.5 standard errors (1/sqrt(n)) of 0: a false alarm has probability < 1e-5."""
    n = order.size
    rho = stats.spearmanr(np.arange(n), values[order]).statistic
    assert abs(rho) < 4.5 / math.sqrt(n - 1), rho


def test_real_estate_rows_leave_in_no_relation_to_the_file_order(tmp_path):
    if not REAL_ESTATE.exists():
        pytest.skip(f"{REAL_ESTATE} is not on this machine (the shared data sets)")
    service = prepare_service(RunConfig("realestate", seed=None, T=2,
                                        options={"data": str(REAL_ESTATE)}))
    X = service.problem.X
    n = X.shape[0]
    assert stats.spearmanr(np.arange(n), X[:, 0]).statistic ** 2 > 0.01  # the file's order
    order = service.row_order
    assert np.array_equal(np.sort(order), np.arange(n)) and not np.array_equal(order,
                                                                                 np.arange(n))
    _check_no_order(order, np.arange(n).astype(float))
    for column in range(X.shape[1]):
        _check_no_order(order, X[:, column])


def _sorted_table(path: Path, n: int = 2000) -> str:
    rng = np.random.default_rng(1)
    x = np.sort(rng.uniform(0, 10, n))  # sorted: position is the feature
    y = rng.uniform(0, 10, n)
    path.write_text("x,y,f\n" + "\n".join(f"{a:.5f},{b:.5f},{a + b:.5f}"
                                          for a, b in zip(x, y)) + "\n")
    return str(path)


def test_a_sorted_table_is_released_shuffled_and_each_answer_is_fs_at_its_data_row(tmp_path):
    """On a generated table sorted by x: the served Z's row j is the data's row order[j]
    (Spearman of released index and x ~ 0), the curator's answer to a query of released
    row j is f at data row order[j], the record's queries are released indices, and its
    regret is computed at the data rows."""
    from pobo.session import run_inproc

    config = RunConfig("table", seed=3, T=6, non_private=False,
                       options={"data": _sorted_table(tmp_path / "t.csv"), "features": "x,y",
                                "objective": "f", "bounds": "0:10,0:10"})
    service = prepare_service(config)
    order = service.row_order
    _check_no_order(order, service.problem.X[:, 0])
    out = tmp_path / "run"
    asyncio.run(run_inproc(config, out, problem=service.problem))
    result = json.loads((out / "result.json").read_text())
    again = prepare_service(config)  # a seeded curator draws the same order again
    order = again.row_order
    f = again.problem.f
    queries = np.asarray(result["queries"])
    assert np.allclose(result["measured"], f[order[queries]], atol=1e-6 + 5 * math.sqrt(
        max(again.problem.noise_var, 0.0)) + 1e-9) or again.problem.noise_var > 0
    best = np.maximum.accumulate(f[order[queries]])
    assert np.allclose(result["simple_regret"], f.max() - best)


def test_the_order_is_kept_in_the_journal_and_a_restart_serves_it(tmp_path):
    """A curator restarted on its journal serves the same order (and the same Z); a
    deployed curator never serves the order a seeded run left in the journal."""
    path = tmp_path / "journal.db"
    options = {"data": _sorted_table(tmp_path / "t.csv", 300), "features": "x,y",
               "objective": "f", "bounds": "0:10,0:10"}
    config = RunConfig("table", seed=None, T=2, options=options)
    first = prepare_service(config, journal=Journal(path))
    order, Z = first.row_order.copy(), np.asarray(first.release.Z).copy()
    first.journal.close()
    second = prepare_service(config, journal=Journal(path))
    assert np.array_equal(second.row_order, order)
    assert np.array_equal(np.asarray(second.release.Z), Z)
    second.journal.close()
    seeded = prepare_service(RunConfig("table", seed=4, T=2, options=options),
                             journal=Journal(tmp_path / "seeded.db"))
    seeded_order = seeded.row_order.copy()
    seeded.journal.close()
    deployed = prepare_service(config, journal=Journal(tmp_path / "seeded.db"))
    assert not np.array_equal(deployed.row_order, seeded_order)
    deployed.journal.close()


def test_an_on_demand_objective_is_asked_for_the_data_row(tmp_path):
    """The objective evaluated on demand receives the DATA row of the released index the
    modeler queried."""
    from pobo.parties.objective import EvaluationRequest

    config = RunConfig("synthetic", seed=None, T=2, options={"grid": 10})
    service = prepare_service(config)
    asked = []

    class Spy:
        name = "spy"

        async def measure(self, request: EvaluationRequest) -> float:
            asked.append(request.index)
            return 0.0
    service.objective = Spy()
    session = service.new_session()
    released = int(np.flatnonzero(service.row_order != np.arange(service.row_order.size))[0])
    asyncio.run(session.measure(1, released))
    assert asked == [int(service.row_order[released])] and asked[0] != released


def test_rows_permuted_in_place_are_z_in_that_order_bit_for_bit():
    """`permute_rows` (a block of columns at a time, a quarter of Z's scratch) gives the
    values of Z[order] exactly, whatever r and the number of parts."""
    from pobo.parties.row_order import permute_rows

    rng = np.random.default_rng(5)
    for n, r, parts in [(1000, 20, 4), (7, 3, 4), (50, 1, 4), (100, 20, 1), (100, 5, 10)]:
        Z = rng.standard_normal((n, r))
        order = rng.permutation(n)
        expected = Z[order]
        permute_rows(Z, order, parts)
        assert np.array_equal(Z, expected), (n, r, parts)


def test_a_seeded_start_on_the_journal_does_not_change_the_deployed_release_order(tmp_path):
    """A deployed curator's secret order is kept across a seeded start on the same
    journal (a file dataset serves both): the journal held one order, which the seeded
    run replaced, so the deployed curator's restart drew a new one and served its
    release's rows in another order (its released indices, its sessions' answers and
    its per-row ledger naming other data rows)."""
    from pobo.scenarios.registry import build_problem

    problem = build_problem("synthetic", 1, grid=10)
    deployed = RunConfig("synthetic", T=5, seed=None, options={"grid": 10})
    first = prepare_service(deployed, problem, journal=Journal(tmp_path / "j.db"))
    order, served = first.row_order.copy(), first.release.Z.copy()
    first.journal.close()
    seeded = prepare_service(RunConfig("synthetic", T=5, seed=1, options={"grid": 10}),
                             problem, journal=Journal(tmp_path / "j.db"))
    assert not np.array_equal(seeded.row_order, order)  # (its own order: from the seed)
    seeded.journal.close()
    again = prepare_service(deployed, problem, journal=Journal(tmp_path / "j.db"))
    assert np.array_equal(again.row_order, order)
    assert np.array_equal(again.release.Z, served)


def test_pobo_answer_maps_each_sessions_query_through_that_sessions_order(tmp_path):
    """`pobo answer` names the data row to evaluate through the order of the pending
    session's own curator (its randomness; none under --lift paper): it read the one
    order the journal held, whichever run had drawn it last."""
    from pobo.cli_records import session_order
    from pobo.scenarios.registry import build_problem

    problem = build_problem("synthetic", 1, grid=10)
    services = [prepare_service(RunConfig("synthetic", T=5, seed=seed, lift=lift,
                                          new_release=True, budget_epsilon=100.0,
                                          raise_budget=True, options={"grid": 10}),
                                problem, journal=Journal(tmp_path / "j.db"))
                for seed, lift in [(None, "gaussian"), (1, "gaussian"), (2, "paper")]]
    sessions = [service.new_session() for service in services]
    journal = Journal(tmp_path / "j.db")
    deployed, seeded, paper = (session_order(journal, s.session_id) for s in sessions)
    assert np.array_equal(deployed, services[0].row_order)
    assert np.array_equal(seeded, services[1].row_order)
    assert paper is None and np.array_equal(services[2].row_order, np.arange(100))
    assert not np.array_equal(deployed, seeded)


def test_a_session_is_never_resumed_in_another_row_order(tmp_path):
    """A session opened under --lift paper (rows in the data's order) was resumed by a
    curator restarted with a secret order, which put the session's stored release in its
    own order: the session's released indices then named other data rows. Such a resume
    is refused, typed; the settings that started it resume it."""
    from pobo.protocol.errors import ProtocolError
    from pobo.scenarios.registry import build_problem

    problem = build_problem("synthetic", 1, grid=10)

    def service(lift: str, seed: int | None = 1):
        return prepare_service(RunConfig("synthetic", T=5, seed=seed, lift=lift,
                                         new_release=True, budget_epsilon=100.0,
                                         raise_budget=True, options={"grid": 10}),
                               problem, journal=Journal(tmp_path / "j.db"))

    for started, refused, resumed in (("paper", [("gaussian", 1)], ("paper", 1)),
                                      ("gaussian", [("gaussian", None), ("paper", 1)],
                                       ("gaussian", 1))):
        first = service(started)
        session = first.new_session(owner="K")
        session.curator().respond(1, 7)
        first.journal.close()
        for lift, seed in refused:
            other = service(lift, seed)
            with pytest.raises(ProtocolError, match="another row order"):
                other.resume(session.session_id, owner="K")
            other.journal.close()
        same = service(*resumed)
        assert same.resume(session.session_id, owner="K").curator().respond(1, 7) is not None
        same.journal.close()
