"""What the parsed `pobo` options describe: the RunConfig of a session (run, curator,
risk, export-data), the SweepSpec of a sweep, and the modeler's HyperFit and
ReleaseRequest."""
from __future__ import annotations

import argparse
import math
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from pobo.parties.choices import DEFAULT_DURABILITY, DEFAULT_LIFT, HyperFit
from pobo.scenarios.presets import PRESETS, Preset
from pobo.runspec import RunConfig

if TYPE_CHECKING:
    from pobo.protocol.messages import ReleaseRequest
    from pobo.sweep import SweepSpec

SCENARIO_OPTIONS = ("grid", "data", "n", "f_kernel", "noise", "features", "objective",
                    "minimise", "bounds", "prep")


def release_from_args(args: argparse.Namespace) -> ReleaseRequest | None:
    """The release request the modeler options describe."""
    if args.release is None:
        return None
    from pobo.protocol.messages import ReleaseRequest

    return ReleaseRequest(args.release, args.release_eps, args.release_delta)


def hyper_from_args(args: argparse.Namespace) -> HyperFit:
    """The modeler's hyperparameter policy that the options describe."""
    return HyperFit(args.fit, args.n_init, args.fit_every, args.restarts, args.kernel,
                    args.fit_hold)


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The RunConfig that the scenario options of a subcommand describe."""
    options = {k: getattr(args, k) for k in SCENARIO_OPTIONS if getattr(args, k, None) is not None}
    modeler = ({"strategy": args.strategy, "hyper": hyper_from_args(args),
                "beta_scale": args.beta_scale, "release": args.release,
                "release_epsilon": args.release_eps, "release_delta": args.release_delta,
                "batch": args.batch, "moma_k": args.moma_k}
               if hasattr(args, "strategy") else {})
    modeler["distinct"] = getattr(args, "distinct", None)  # run, modeler and the curator's rule
    batch = getattr(args, "batch", 1)
    max_batch = getattr(args, "max_batch", None) or batch
    journal = getattr(args, "journal", None)
    if getattr(args, "objective_wait", False) and journal is None:
        if args.command != "run":
            raise ValueError("--objective-wait needs --journal DB: `pobo answer --journal DB` "
                             "enters the values there")
        journal = (args.out or Path("runs") / f"{Path(args.scenario).stem}-wait") / \
            "curator.journal"
    if batch < 1 or max_batch < 1:
        raise ValueError("--batch and --max-batch must be >= 1")
    authors = bool(getattr(args, "authors_code", False))
    return RunConfig(scenario=args.scenario, epsilon=args.eps, delta=args.delta, r=args.r,
                     T=args.T, seed=args.seed, non_private=args.non_private or None,
                     timeout=args.timeout, options=options, ldp_epsilon=args.ldp_eps,
                     budget_epsilon=args.budget_eps, budget_delta=args.budget_delta,
                     ldp_row_budget=args.ldp_row_budget, ldp_row_delta=args.ldp_row_delta,
                     budget_releases=args.budget_releases, raise_budget=args.raise_budget,
                     new_release=args.new_release, ephemeral_ledger=args.ephemeral_ledger,
                     lift=args.lift or ("paper" if authors else DEFAULT_LIFT),
                     lift_epsilon=args.lift_eps, lift_delta=args.lift_delta,
                     reward_bound=args.reward_bound, noise_bound=args.noise_bound,
                     objective_cmd=getattr(args, "objective_cmd", None),
                     objective_wait=getattr(args, "objective_wait", False),
                     results_file=getattr(args, "results_file", None),
                     eval_timeout=getattr(args, "eval_timeout", 3600.0), max_batch=max_batch,
                     journal=None if journal is None else str(journal),
                     durability=getattr(args, "durability", DEFAULT_DURABILITY),
                     authors_code=authors, **modeler)


def sweep_spec_from_args(args: argparse.Namespace) -> tuple[SweepSpec, Preset | None]:
    """The sweep (and the preset it starts from) that the options describe."""
    from pobo.sweep import SweepSpec

    preset = PRESETS[args.preset] if args.preset else None
    scenario = args.scenario or (preset.scenario if preset else None)
    if scenario is None:
        raise ValueError("name a scenario or a --preset")
    if args.eps or args.log_eps:
        epsilons = tuple(args.eps or ()) + tuple(math.exp(x) for x in args.log_eps or ())
    else:
        epsilons = preset.epsilons if preset else (None,)
    options = {**(preset.options if preset else {}),
               **{k: getattr(args, k) for k in SCENARIO_OPTIONS
                  if getattr(args, k, None) is not None}}
    strategies = args.strategies or (preset.strategies if preset else ("gp-ucb",))
    spec = SweepSpec(
        scenario, epsilons, tuple(args.r) if args.r else (preset.rs if preset else (None,)),
        seeds=args.seeds or (preset.seeds if preset else 10),
        T=args.T or (preset.T if preset else None),
        non_private=args.non_private or bool(preset and preset.non_private),
        strategies=tuple(strategies),
        hyper=(replace(hyper_from_args(args), mode=preset.fit)
               if preset and args.fit == "auto" else hyper_from_args(args)),
        options=options,
        transcripts=args.transcripts, ldp_epsilons=tuple(args.ldp_eps or (None,)),
        beta_scales=tuple(args.beta_scales or (None,)),
        moma_ks=tuple(args.moma_k or (None,)),
        lift=args.lift or (preset.lifts[0] if preset else
                           "paper" if args.authors_code else DEFAULT_LIFT),
        lifts=() if args.lift or not preset else preset.lifts,
        authors_code=bool(args.authors_code),
        risk_anchors=args.risk or (preset.risk_anchors if preset else None),
        distinct=args.distinct if args.distinct is not None or not preset else preset.distinct)
    return spec, preset
