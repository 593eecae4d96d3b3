"""Issue 46 item 3: `dp` is true only where the whole path is covered. Rows prepared from
the data themselves (`table` without --bounds, `realestate --prep paper`, `bank --prep
paper`) make the unit of the neighbouring relation depend on X: the release says dp: false
on the wire, in every record, in a warning at start, and in `pobo audit`, `pobo runs` and
`pobo report`, with the reason."""
import asyncio
import json

import numpy as np
import pytest

from pobo.runspec import RunConfig, startup_warnings
from pobo.session import not_dp_reasons, prepare_service


def _table_csv(path):
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 10, size=(60, 2))
    lines = ["a,b,y"] + [f"{a:.4f},{b:.4f},{a - b:.4f}" for a, b in X]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _configs(tmp_path):
    table = {"data": _table_csv(tmp_path / "t.csv"), "features": "a,b", "objective": "y"}
    return {"table": RunConfig("table", seed=None, T=2, options=table),
            "realestate --prep paper": RunConfig("realestate", seed=None, T=2,
                                                 options={"prep": "paper", "n": 300}),
            "bank --prep paper": RunConfig("bank", seed=None, T=2,
                                           options={"prep": "paper", "n": 300})}


@pytest.mark.parametrize("which", ["table", "realestate --prep paper", "bank --prep paper"])
def test_each_data_dependent_preparation_is_not_dp(which, tmp_path):
    config = _configs(tmp_path)[which]
    service = prepare_service(config)
    problem = service.problem
    assert problem.preparation  # the scenario says how the rows were prepared from X
    assert service.release.dp is False  # what the Dataset carries on the wire
    unit = service.privacy_unit()["dataset"]
    assert unit["dp"] is False and unit["claim"].startswith("not DP: the rows are prepared")
    reasons = not_dp_reasons(service.settings, problem)
    assert reasons and reasons[0].startswith("data-dependent preprocessing")
    warnings = startup_warnings(config, problem.X.shape[0], preparation=problem.preparation)
    assert any("data-dependent preprocessing" in w and "NOT covered" in w for w in warnings)


def test_public_bounds_keep_the_claim(tmp_path):
    """The same table with --bounds is prepared from the public domain: dp stays true."""
    config = _configs(tmp_path)["table"]
    bounded = RunConfig("table", seed=None, T=2,
                        options={**config.options, "bounds": "0:10,0:10"})
    service = prepare_service(bounded)
    assert not service.problem.preparation
    assert service.release.dp is True and service.privacy_unit()["dataset"]["dp"] is True
    assert not_dp_reasons(service.settings, service.problem) == []


def test_every_record_audit_runs_and_report_say_so(tmp_path, capsys):
    """A whole run of the table without bounds: curator.json and result.json say dp: false
    with the reason, the audit of the transcript says not DP, `pobo runs` and `pobo
    report` name the reason."""
    from pobo.auditing import audit_files
    from pobo.html_report import run_report_html
    from pobo.runs import describe_run
    from pobo.session import run_inproc

    config = _configs(tmp_path)["table"]
    out = tmp_path / "run"
    asyncio.run(run_inproc(config, out))
    for name in ("result.json", "curator.json"):
        if not (out / name).exists():
            continue
        record = json.loads((out / name).read_text())
        assert record["dp"] is False, name
        assert any(r.startswith("data-dependent preprocessing") for r in record["not_dp"])
        assert record["privacy_unit"]["dataset"]["dp"] is False
    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")
    result = json.loads((out / "result.json").read_text(), parse_constant=refuse)
    json.dumps(result, allow_nan=False)  # issue 46 item 6: strict JSON, a real run's record
    reports = audit_files([out / "curator.transcript"])
    assert reports[0].dp is False and "not DP" in reports[0].text()
    line = describe_run(result)
    assert line["dp_claim"] is False and "data-dependent preprocessing" in line["no_dp_claim"]
    page = run_report_html(out)
    assert "data-dependent preprocessing" in page
