"""The parties' public vocabulary -- strategy names, fit modes, lift modes -- without numpy.

The command line builds its parser (and a `pobo run` parent process its configuration)
from these alone, so that `pobo --help` and the parent of two party processes import no
numerical code. parties.strategies, parties.modeler and parties.service re-export them.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

ROBUST_NAMES = ("tgp-ucb", "ata-gp-ucb", "moma-gp-ucb")
STRATEGIES = ("gp-ucb", "random", *ROBUST_NAMES)
FIT_MODES = ("auto", "fixed", "map", "once", "every", "paper")
# the dataset release (--lift): "gaussian" (default) and "jl" are the Gaussian releases of
# parties/gaussian.py; "private" and "always" are PO-GP-UCB's lift at Blocki et al.'s
# constant (a labelled comparison); "paper" is Algorithm 1 as published (not DP)
LIFT_MODES = ("gaussian", "jl", "private", "always", "paper")
GAUSSIAN_LIFTS = ("gaussian", "jl")
DEFAULT_LIFT = "gaussian"


@dataclass(frozen=True)
class HyperFit:
    """How the modeler sets its GP hyperparameters (and which kernel it uses).

    `auto` keeps the declared values when the curator marks them 'public', and when it
    marks them 'initial' (starting values only) it is `map`: the declared values until
    `hold` rewards are told, then every `every` rounds a maximum-a-posteriori fit with
    log-normal priors centred on the declared values, kept only while its evidence beats
    the declared kernel's at its best constant mean (parties/fitting.py). `once` and
    `every` are plain maximum likelihood after an initial design of `n_init` random rows.
    `paper` is the papers' experiments' (and pobo's `auto` before its MAP fit): the
    declared values where public, else `every`. No mode fits on rewards that are all
    equal.
    """

    mode: str = "auto"
    n_init: int = 5
    every: int = 10
    restarts: int = 3
    kernel: str | None = None  # None: the kernel the curator declared
    hold: int = 20  # map: rewards told before the first fit

    def __post_init__(self) -> None:
        if self.mode not in FIT_MODES:
            raise ValueError(f"unknown fit mode {self.mode!r}; choose from {FIT_MODES}")
        if self.mode != "fixed" and (self.n_init < 2 or self.every < 1 or self.hold < 2):
            raise ValueError("fitting needs n_init >= 2, hold >= 2 observations and every >= 1")

    def resolved(self, status: str) -> HyperFit:
        """This policy with `auto` decided by the declared hyperparameters' status."""
        if self.mode == "paper":  # the papers' experiments: ML where the values are not public
            return replace(self, mode="fixed" if status == "public" else "every")
        if self.mode != "auto":
            return self
        return replace(self, mode="fixed" if status == "public" else "map")

    @property
    def design(self) -> int:
        """Rows of the initial random design (`once`, `every`; none for `map`, which
        starts from the declared values)."""
        return self.n_init if self.mode in ("once", "every") else 0

    def refit_due(self, t: int) -> bool:
        """Whether to fit after the t-th observation."""
        if self.mode == "map":
            return t >= self.hold and (t - self.hold) % self.every == 0
        if self.mode in ("fixed", "auto") or t < self.n_init:
            return False
        return t == self.n_init or (self.mode == "every" and (t - self.n_init) % self.every == 0)


def strategy_spec(name: str, moma_k: int | None = None, distinct: bool = False,
                  authors_code: bool = False) -> str:
    """The strategy as one string, 'name[+k=K][+distinct][+authors]', the form a session's
    `strategy` travels in (so a separate modeler process gets the same options).
    `authors_code`: GP-UCB scored as the PO-GP-UCB authors' code does (mean +
    beta_{t-1}^1/2 variance, delta 0.1); the other strategies have no such departure and
    ignore it."""
    distinct = distinct and name in ("gp-ucb", "random")  # the others pick rows their own way
    authors = authors_code and name == "gp-ucb"
    return (name + ("" if moma_k is None else f"+k={int(moma_k)}")
            + ("+distinct" if distinct else "") + ("+authors" if authors else ""))


def epoch_length_option(text: str) -> int:
    """MoMA's --moma-k: an integer of at least 2 (a median needs two estimates)."""
    try:
        k = int(text)
    except ValueError:
        raise ValueError(f"MoMA's k must be an integer >= 2, got {text!r}") from None
    if k < 2:
        raise ValueError(f"MoMA's k must be an integer >= 2, got {k}")
    return k

DURABILITY = {"full": "FULL", "normal": "NORMAL"}  # --durability -> the journal's PRAGMA synchronous
DEFAULT_DURABILITY = "full"  # survives power loss; "normal" survives a killed process
