"""What a run is, and what comes back from it, without numpy or any party's code.

`RunConfig` (the parameters of one session), the line a curator prints once bound and
merging the parties' records into result.json: what the parent of a two-process `pobo
run` needs, so that it starts no numerical code itself. scenarios.session re-exports
them.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from pobo.parties.choices import DEFAULT_DURABILITY, DEFAULT_LIFT, HyperFit, strategy_spec
from pobo.scenarios.registry import distinct_by_default, public_inputs

LISTENING = "[curator] listening on "  # then the endpoint: what `pobo run` waits for
# the fields of a curator's records that must not leave it: the unsalted SHA-256 of
# (X, f) (a guess of the data is checked against it), the exact sigma_min of X (the
# statistic the private lift test protects) and f*, the best value of f over every row.
# Every curator.json names them in its "curator_private" field; the curator's own
# commands use them (`pobo audit --data` checks a file by the digest), `pobo report` and
# anything made for an auditor leave them out (pobo.party_records.without_curator_private).
CURATOR_PRIVATE = ("dataset_digest", "sigma_min", "f_star")
ROLES = ("curator", "modeler")  # protocol.policy's CURATOR and MODELER (no numpy here)


@dataclass(frozen=True)
class RunConfig:
    """Parameters of a run; None means the scenario's paper default."""

    scenario: str = "synthetic"
    epsilon: float | None = None
    delta: float | None = None
    r: int | str | None = None  # "auto": the largest r whose omega passes the lift test
    T: int | None = None
    seed: int | None = 0
    non_private: bool | None = None  # None: the scenario's default (public inputs or not)
    strategy: str = "gp-ucb"
    hyper: HyperFit = HyperFit()
    timeout: float = 60.0
    options: dict = field(default_factory=dict)
    ldp_epsilon: float | None = None  # local DP on every reward (CTL of Zhou & Tan)
    beta_scale: float | None = None  # None: the strategy's documented default
    release: str | None = None  # DP release of the result: noisy, noise-free, lipschitz
    release_epsilon: float = 1.0
    release_delta: float = 1e-8  # pobo.session.DEFAULT_RELEASE_DELTA: below 1/n
    budget_epsilon: float | None = None  # the dataset's central privacy budget
    budget_delta: float | None = None
    budget_releases: int | None = None  # how many results may ever be released
    raise_budget: bool = False  # a budget above the one the dataset's journal holds
    new_release: bool = False  # a second release of a dataset whose journal holds one
    ephemeral_ledger: bool = False  # the ledger in memory: covers this process only
    ldp_row_budget: float | None = None  # the LDP epsilon any one row may accumulate
    ldp_row_delta: float | None = None  # the delta of that row budget (None: ROW_DELTA)
    lift: str = DEFAULT_LIFT  # paper | always | private (PO-GP-UCB Algorithm 1's branch)
    lift_epsilon: float | None = None  # the private lift test's (eps, delta); default 0.1 eps, delta
    lift_delta: float | None = None
    reward_bound: float | None = None  # B and R: declared public bounds (scenario constants)
    noise_bound: float | None = None
    objective_cmd: str | None = None  # measure f on demand by a command ('CMD {index}')
    objective_wait: bool = False  # measure f on demand: wait for `pobo answer` / results file
    results_file: str | None = None  # with objective_wait: a file of 'SESSION SEQ VALUE' lines
    eval_timeout: float = 3600.0  # seconds an objective command may run
    batch: int = 1  # queries the modeler keeps outstanding (GP-BUCB)
    max_batch: int = 1  # the most the curator lets a session keep outstanding
    journal: str | None = None  # the curator's SQLite journal (None: in memory)
    durability: str = DEFAULT_DURABILITY  # the journal's commits: full (power loss) | normal (kill)
    moma_k: int | None = None  # MoMA's epoch length (None: the theorem's)
    distinct: bool | None = None  # never re-query a row; None: the scenario's default
    authors_code: bool = False  # reproduce the PO-GP-UCB authors' code (lift, UCB score)

    def __post_init__(self) -> None:
        if self.non_private is None:
            object.__setattr__(self, "non_private", public_inputs(self.scenario))
        if self.distinct is None:
            on_demand = self.objective_cmd is not None or self.objective_wait
            object.__setattr__(self, "distinct", distinct_by_default(self.scenario, on_demand))

    @property
    def strategy_spec(self) -> str:
        """The modeler's strategy with its options, as `make_strategy` reads it."""
        return strategy_spec(self.strategy, self.moma_k, bool(self.distinct), self.authors_code)


def startup_warnings(config: RunConfig, n: int | None = None,
                     command: str = "curator", preparation: str = "") -> list[str]:
    """What a curator started with `config` (on `n` rows, when known, prepared by
    `preparation` when the rows are prepared from the data) says loudly before it serves:
    every setting that removes or weakens the DP guarantee or its budget, a delta given
    at or above 1/n among them. `command`: what the user typed, `pobo curator` or `pobo
    run` (which seeds every run: its seed is not a flag the user gave)."""
    out = []
    if preparation and not config.non_private:
        out.append(f"data-dependent preprocessing ({preparation}): the privacy unit depends "
                   "on X, so the release is NOT covered by the DP claim (every record says "
                   "dp: false); declare a public domain (e.g. table --bounds) for one")
    given = [("--delta", config.delta), ("--budget-delta", config.budget_delta),
             ("--ldp-row-delta", config.ldp_row_delta)]
    for flag, delta in given:
        if n and delta is not None and delta >= 1.0 / n and not config.non_private:
            out.append(f"{flag} {delta:g} is at least 1/n = {1 / n:.3g}: a mechanism at it "
                       "may release a row in the clear with that probability, and an "
                       "epsilon stated at it means little (use a delta much smaller than 1/n)")
    if config.non_private:
        out.append("--non-private: X itself is sent to the modeler; NOT differentially "
                   "private (every record says dp: false)")
    elif config.lift == "paper":
        out.append("--lift paper: Algorithm 1 as published branches on the exact sigma_min; "
                   "the release is NOT covered by the DP claim (every record says dp: false)")
    if config.seed is not None and command == "run":
        out.append(f"this run is a seeded simulation (seed {config.seed}; pobo run seeds "
                   "every run, 0 unless --seed): its projection, noise and measurements can "
                   "be recomputed, so it is NOT differentially private (every record says "
                   "randomness: seeded, dp: false); a deployment runs `pobo curator` "
                   "without --seed")
    elif config.seed is not None:
        out.append(f"--seed {config.seed} draws the projection, the noise and the session's "
                   "measurements from a known seed: for simulation only, NOT differentially "
                   "private (every record says randomness: seeded, dp: false)")
    if config.budget_epsilon == math.inf:
        out.append("--budget-eps inf: no central privacy budget; releases are never refused")
    if config.ldp_row_budget == math.inf and config.ldp_epsilon is not None:
        out.append("--ldp-row-budget inf: no per-row LDP budget; a row may be reported on "
                   "without limit")
    return out


def merge_results(curator: dict, modeler: dict, out: Path, transcripts: bool = True) -> dict:
    """result.json: the curator's record plus the modeler's view and the paths of the
    transcripts (looked for in `out` unless the run wrote none: `transcripts` False)."""
    result = dict(curator)
    result["modeler"] = modeler
    result["consistent"] = (modeler.get("queries") == curator["queries"]
                            and modeler.get("rewards") == curator["rewards"])
    result["transcripts"] = {role: str(out / f"{role}.transcript") for role in ROLES
                             if transcripts and (out / f"{role}.transcript").exists()}
    write_json(out / "result.json", result)
    return result


def release_conflict(config: RunConfig) -> str | None:
    """Why the release `config` asks for could never be granted in its own session (None:
    it could): Kusner et al.'s noisy release needs every query to be GP-UCB's maximiser
    (PROTOCOL.md 10.1), which may be a row asked before (the `distinct` rule forbids it)
    and is one query at a time (no batch). The curator would refuse the Hello; `pobo run`
    says so before either party starts."""
    if config.release != "noisy" or config.strategy != "gp-ucb":
        return None
    if config.distinct:
        return (f"--release noisy needs every query to be GP-UCB's maximiser, which may be a "
                f"row asked before, and {config.scenario}'s rule is distinct (a row at most "
                "once): add --no-distinct")
    if config.batch > 1:
        return (f"--release noisy needs one query at a time (every query GP-UCB's "
                f"maximiser), not --batch {config.batch}")
    return None


def nominal_reason(result: dict) -> str | None:
    """Why a run's record carries no DP claim (seeded, `--lift paper`, non-private: its
    ledger is then nominal), or None when it carries one."""
    if result.get("dp") is not False:
        return None
    return "; ".join(result.get("not_dp") or []) or "dp: false"


def _strict_json(value: object) -> str:
    """`value` as strict JSON (RFC 8259 has no Infinity or NaN): a float that is not
    finite is written as null, and in a mapping a key `<name>_reason` beside it says why
    (unless the record gives its own reason there): an epsilon past what the calculators
    resolve, a budget with no limit, a mean of nothing."""
    try:
        return _STRICT.encode(value)
    except ValueError:
        return _STRICT.encode(_finite(value))


def _non_finite_reason(v: float) -> str:
    """Why a record's figure is null: what the non-finite float stood for."""
    if math.isnan(v):
        return "undefined (NaN): no value exists"
    return ("infinite: unbounded (no limit, or past what pobo's calculators resolve)"
            if v > 0 else "minus infinity: unbounded below")


def _finite(v: object) -> object:
    """`v` with every non-finite float replaced by None, and its reason added beside it."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        out = {k: _finite(x) for k, x in v.items()}
        for k, x in v.items():
            if isinstance(x, float) and not math.isfinite(x) and f"{k}_reason" not in v:
                out[f"{k}_reason"] = _non_finite_reason(x)
        return out
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


# one encoder for every value: json.dumps with any keyword builds a new JSONEncoder per call
# (~4 us: a result.json's 67 keys took 0.28 ms, against 0.16 for the whole record at once)
_STRICT = json.JSONEncoder(allow_nan=False)


def write_json(path: Path, data: dict) -> None:
    """Write JSON atomically (temp file + rename), so a crash never leaves half a file.
    One line per top-level key: readable, and the long lists (queries, regret) go through
    json's C encoder (an indented dump is pure Python: ~5 ms a run in a sweep)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    lines = [f" {json.dumps(key)}: {_strict_json(value)}" for key, value in data.items()]
    try:
        tmp.write_text("{\n" + ",\n".join(lines) + "\n}\n")
        tmp.replace(path)
    except OSError:  # a full disk, say: no half-written temporary file is left behind
        tmp.unlink(missing_ok=True)
        raise
