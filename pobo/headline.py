"""The answer of a run or a sweep in a few numbers: what `pobo report` puts first and
`pobo runs` lists. Pure Python (no numpy), so that listing many folders stays light.

A run's answer is the best f it found against f* (simple regret S_T, in sigma_y), or for
a hits scenario (hospital) the distinct positives found against random selection's
expectation. A sweep's is the best private setting's mean metric beside random selection
and the non-private baseline, where the sweep ran them.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict

# sweep row column of each metric, its name, and whether more is better
METRIC_COLUMNS = {"hits": ("hits", "hits", True),
                  "simple_regret": ("simple_regret_sigma_y", "S_T / σ_y", False)}


def mean_se(values) -> tuple[float, float]:
    """Mean and standard error of the mean (0 for one value; NaN, NaN for none)."""
    a = [float(v) for v in values]
    if not a:
        return math.nan, math.nan
    se = statistics.stdev(a) / math.sqrt(len(a)) if len(a) > 1 else 0.0
    return math.fsum(a) / len(a), se


def eps_text(eps: float | None) -> str:
    """Epsilon as given (%.4g), or "non-private"."""
    return "non-private" if eps is None else f"{float(eps):.4g}"


def eps_label(eps: float | None) -> str:
    """'ε = 3.004' (as given), or "non-private": a curve's or a setting's name."""
    return "non-private" if eps is None else f"ε = {eps_text(eps)}"


def number(value: float | None, digits: int = 4) -> str:
    """A number for a person: %.{digits}g, or "—" for none, "unbounded" for infinity."""
    if value is None:
        return "—"
    value = float(value)
    return "unbounded" if math.isinf(value) else f"{value:.{digits}g}"


def policy_text(result: dict) -> str:
    """private (its release) or non-private, as the run recorded it."""
    policy = result.get("policy") or "?"
    lift = result.get("lift")
    return f"{policy} ({lift})" if policy == "private" and lift else str(policy)


def ledger_spent(ledger: object) -> dict:
    """The central (epsilon, delta) a run's ledger records as spent on the dataset, and
    its budget (None: no budget was set); empty when there is no readable ledger."""
    central = ledger.get("central") if isinstance(ledger, dict) else None
    if not isinstance(central, dict) or "epsilon" not in central:
        return {}
    return {"epsilon": central.get("epsilon"), "delta": central.get("delta"),
            "delta_spent": central.get("delta_basic", central.get("delta")),
            "budget_epsilon": central.get("budget_epsilon"),
            "budget_delta": central.get("budget_delta")}


def spent_text(spent: dict) -> str:
    """'ε 8 at δ 0.002 (δ spent 1e-06); budget ε 10, δ 0.002': the accountant's epsilon
    at the delta it is stated at (the budget's), and the delta the entries spent, which a
    reader would otherwise take the stated one for (a review's finding)."""
    if not spent:
        return "no ledger recorded"
    budget = ("no budget set" if spent.get("budget_epsilon") is None else
              f"budget ε {number(spent['budget_epsilon'])}, δ {number(spent.get('budget_delta'), 3)}")
    return (f"ε {number(spent.get('epsilon'))} spent at δ {number(spent.get('delta'), 3)} "
            f"(δ spent {number(spent.get('delta_spent'), 3)}); " + budget)


def run_headline(result: dict) -> dict:
    """One run's answer: metric, value (S_T / sigma_y or hits), best f found and f* in the
    objective's own sense, random selection's expectation for hits, and one line of text."""
    queries = result.get("queries") or []
    out: dict = {"metric": result.get("metric") or "simple_regret", "value": None,
                 "best": None, "optimum": None, "regret": None, "random": None}
    if not queries:
        out["text"] = out["short"] = f"no query answered (status {result.get('status', '?')})"
        return out
    if out["metric"] == "hits" and result.get("hits"):
        out["value"] = float(result["hits"][-1])
        out["random"] = result.get("random_hits_expected")
        out["text"] = (f"{out['value']:.0f} distinct positives in {len(queries)} queries"
                       + ("" if out["random"] is None else
                          f"; random selection expects {float(out['random']):.1f}"))
        out["short"] = (f"{out['value']:.0f} hits" + ("" if out["random"] is None else
                                                      f" (random {float(out['random']):.1f})"))
        return out
    if result.get("simple_regret") is None or result.get("f_star") is None:
        measured = [float(v) for v in result.get("measured") or []]
        if not measured:
            out["text"] = out["short"] = f"{len(queries)} queries, no value recorded"
            return out
        best = max(range(len(measured)), key=measured.__getitem__)
        out.update(metric="measured", best=measured[best])
        out["text"] = (f"best measured {measured[best]:.6g} at row {queries[best]} "
                       "(f is known only at the queried rows: no regret)")
        out["short"] = f"best measured {measured[best]:.4g}"
        return out
    regret = float(result["simple_regret"][-1])
    sigma_y = float(result.get("sigma_y") or result.get("sigma_f") or 1.0)
    sign = -1.0 if result.get("sense") == "minimise" else 1.0  # f is stored maximised
    f_star = float(result["f_star"])
    out.update(value=regret / sigma_y, regret=regret, best=sign * (f_star - regret),
               optimum=sign * f_star, sigma_y=sigma_y)
    out["text"] = (f"best f found {out['best']:.4g} (f* = {out['optimum']:.4g}): simple "
                   f"regret {out['value']:.3g} σ_y after {len(queries)} queries")
    out["short"] = f"S_T {out['value']:.3g} σ_y (best f {out['best']:.4g}, f* {out['optimum']:.4g})"
    # without f* (curator-private: pobo.party_records), for a page that may be sent on
    out["public"] = (f"best f found {out['best']:.4g}: simple regret {out['value']:.3g} σ_y "
                     f"after {len(queries)} queries")
    return out


def setting_label(setting: tuple, varied: tuple[bool, ...]) -> str:
    """A sweep setting (strategy, release, beta scale, LDP eps, eps, r) as text, naming
    only what the sweep varied besides the strategy and epsilon."""
    strategy, lift, scale, ldp, eps, r = setting
    bits = [strategy]
    bits += [f"{lift} release"] if varied[1] and eps is not None and lift else []
    bits += [f"β scale {number(scale)}"] if varied[2] else []
    bits += [f"LDP ε {number(ldp)}"] if varied[3] else []
    bits += [eps_label(eps)]
    bits += [f"r = {r}"] if varied[5] and eps is not None else []
    return ", ".join(bits)


def strategy_label(row: dict) -> str:
    """The strategy's name, with MoMA's epoch length k when it was set."""
    k = row.get("moma_k")
    return row["strategy"] if k in (None, "") else f"{row['strategy']} (k={int(float(k))})"


def setting_of(row: dict) -> tuple:
    """The key of a sweep row's setting: everything but the seed."""
    private = row.get("epsilon") is not None
    return (strategy_label(row), row.get("lift") if private else None, row.get("beta_scale"),
            row.get("ldp_epsilon"), row.get("epsilon"), row.get("r") if private else None)


def varied_fields(settings) -> tuple[bool, ...]:
    """Which of a setting's fields take more than one value in the sweep (the release and
    r among the private settings only: a non-private run has neither)."""
    settings = list(settings)
    private = [s for s in settings if s[4] is not None]
    return tuple(len({s[i] for s in (private if i in (1, 5) else settings)}) > 1
                 for i in range(6))


def sweep_headline(rows: list[dict]) -> dict:
    """A sweep's answer from its runs.csv rows: the best private setting (random selection
    aside), random selection, and the best non-private setting, each as mean, standard
    error and runs of the metric (S_T / sigma_y, or hits), and one line of text."""
    kind = "hits" if rows and rows[0].get("metric") == "hits" else "simple_regret"
    column, name, higher = METRIC_COLUMNS[kind]
    groups: dict[tuple, list[float]] = defaultdict(list)
    for row in rows:
        if row.get(column) is not None:
            groups[setting_of(row)].append(float(row[column]))
    varied = varied_fields(groups)

    def summary(keys: list[tuple]) -> dict | None:
        if not keys:
            return None
        scored = [(mean_se(groups[k]), k) for k in sorted(keys, key=repr)]  # ties: stable
        (m, se), key = (max if higher else min)(scored, key=lambda s: s[0][0])
        return {"setting": setting_label(key, varied), "epsilon": key[4], "mean": m,
                "se": se, "runs": len(groups[key]), "key": key}

    private = [k for k in groups if k[4] is not None and not k[0].startswith("random")]
    out = {"metric": name, "higher_is_better": higher, "runs": len(rows),
           "seeds": len({r.get("seed") for r in rows}), "private_settings": len(private),
           "best_private": summary(private),
           "non_private": summary([k for k in groups if k[4] is None
                                   and not k[0].startswith("random")])}
    randoms = [v for k, v in groups.items() if k[0].startswith("random")]
    out["random"] = (None if not randoms else dict(
        zip(("mean", "se"), mean_se([v for vs in randoms for v in vs])),
        setting="random selection", epsilon=None, runs=sum(map(len, randoms))))
    parts = [f"{label} {item['mean']:.3g} ± {item['se']:.2g}" for label, item in (
        (f"best private ({out['best_private']['setting']})" if out["best_private"] else "",
         out["best_private"]), ("random", out["random"]), ("non-private", out["non_private"]))
        if item is not None]
    out["text"] = (f"{name}{' (more is better)' if higher else ''}: " + "; ".join(parts)
                   if parts else "no run recorded the metric")
    best = out["best_private"]
    short = [f"private {best['mean']:.3g} ({eps_label(best['epsilon'])})" if best else "",
             f"random {out['random']['mean']:.3g}" if out["random"] else "",
             f"non-private {out['non_private']['mean']:.3g}" if out["non_private"] else ""]
    out["short"] = (f"{'hits' if higher else 'S_T/σ_y'} " + ", ".join(x for x in short if x)
                    if parts else out["text"])
    return out


def sweep_spent(ledgers) -> dict:
    """What a sweep's runs spent, from their ledgers: per run (min, max) epsilon, the
    largest delta, and the basic-composition sum over them (what the runs cost together
    where they released the same data)."""
    spent = [s for s in map(ledger_spent, ledgers) if s and s.get("epsilon")]
    if not spent:
        return {"runs": 0}
    eps = [float(s["epsilon"]) for s in spent]
    return {"runs": len(spent), "epsilon_min": min(eps), "epsilon_max": max(eps),
            "epsilon_sum": math.fsum(eps),
            "delta_max": max(float(s.get("delta_spent") or 0.0) for s in spent)}


def sweep_spent_text(spent: dict) -> str:
    """One line about what a sweep's runs spent (see sweep_spent)."""
    if not spent.get("runs"):
        return "no run spent any ε (non-private runs only, or no ledger recorded)"
    low, high = spent["epsilon_min"], spent["epsilon_max"]
    each = number(low) if math.isclose(low, high) else f"{number(low)}–{number(high)}"
    return (f"ε {each} spent per run (δ ≤ {number(spent['delta_max'], 3)}) by "
            f"{spent['runs']} private run(s), each a fresh release; on the same data they "
            f"compose to ε {number(spent['epsilon_sum'])} (basic composition)")
