"""The pieces of the `pobo` parser (pobo.cli.build_parser): its argparse class with
one-line errors, the argument groups several subcommands share, and the argument types
that check a value as it is parsed (a one-line error for a bad one)."""
from __future__ import annotations

import argparse
import math
from pathlib import Path

# importable without numpy: `pobo --help` and the parent of `pobo run` start no numerical code
from pobo.parties.choices import (
    DEFAULT_DURABILITY, DEFAULT_LIFT, DURABILITY, FIT_MODES, LIFT_MODES, STRATEGIES,
    epoch_length_option,
)
from pobo.scenarios.registry import DISTINCT_IF_TABULATED, DISTINCT_ROWS, is_known, is_script, scenario_names


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors: the mistake, the nearest flag or choice to what was
    mistyped (difflib), and where help is, not the whole usage. A flag no subcommand
    knows is reported by the subcommand it was given to (`pobo run: error: ...`), not by
    `pobo`."""

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            subcommands = getattr(self, "subcommands", {})
            where = subcommands.get(getattr(parsed, "command", None), self)
            where.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}{self.nearest(message)} "
                     f"(see {self.prog} --help)\n")

    def nearest(self, message: str) -> str:
        """'; did you mean --eps?' for a mistyped flag or choice named in `message`."""
        import difflib
        import re

        if message.startswith("unrecognized arguments:"):
            known = [o for o in self._option_string_actions if o.startswith("--")]
            typed = [t.split("=")[0] for t in message.split(":", 1)[1].split()
                     if t.startswith("-")]
        else:
            found = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
            if found is None:
                return ""
            typed, known = [found.group(1)], re.findall(r"'?([\w.+-]+)'?", found.group(2))
        guesses = [g for t in typed for g in difflib.get_close_matches(t, known, n=1)]
        return f"; did you mean {' or '.join(dict.fromkeys(guesses))}?" if guesses else ""


def output_arguments(p: argparse.ArgumentParser, verbose: str) -> None:
    """-v/--verbose and -q/--quiet (`verbose`: what -v shows for this command)."""
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help=f"more output ({verbose}; -vv: debugging detail); on a terminal "
                        "progress is a bar unless -v")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="only warnings, errors and the final summary")


class _ScenarioHelp(argparse.HelpFormatter):
    """Help that names the scenarios -- built in and installed -- only when it is shown
    (looking up installed entry points costs every command tens of milliseconds)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        return text.replace(SCENARIO_NAMES, ", ".join(scenario_names())) if text else text


SCENARIO_NAMES = "<scenario names>"  # filled in by _ScenarioHelp


def scenario_arguments(p: argparse.ArgumentParser, default_seed: int | None) -> None:
    """The scenario and its privacy, budget and objective options (run, curator, risk...)."""
    p.formatter_class = _ScenarioHelp
    p.add_argument("--config", type=Path, metavar="FILE.toml",
                   help="read settings from a TOML file: every flag as a key (ldp-eps = 1.0, "
                        "a table [run]/[curator]/[modeler]/[sweep] for one command); flags "
                        "given here override it")
    p.add_argument("scenario", nargs="?", type=scenario_arg, metavar="SCENARIO",
                   help=f"one of {SCENARIO_NAMES}, or a path to a scenario script "
                        "(.py defining build(seed, **options) -> Problem; see examples/)")
    p.add_argument("--eps", type=positive, help="DP epsilon of the projection")
    p.add_argument("--delta", type=probability, help="DP delta of the projection")
    p.add_argument("--r", type=r_value, help="projection dimension, or 'auto': the largest r "
                                              "whose omega passes the lift test (private/paper)")
    p.add_argument("--T", type=positive_int, help="query budget (BO iterations)")
    p.add_argument("--seed", type=count, default=default_seed,
                   help=f"run seed (default: {'OS entropy' if default_seed is None else default_seed})")
    p.add_argument("--non-private", action="store_true",
                   help="send X itself (non-private GP-UCB baseline, recorded as such)")
    p.add_argument("--timeout", type=positive, default=60.0, help="seconds to wait for the peer")
    p.add_argument("--grid", type=positive_int, help="synthetic, branin: grid side (n = grid^2, default 100)")
    p.add_argument("--data", help="hospital, bank, realestate: the public CSV (.csv or .csv.gz); "
                                  "default: an embedded dataset generated from the seed")
    p.add_argument("--n", type=positive_int, help="hospital, bank, realestate: use n random rows")
    p.add_argument("--prep", choices=("default", "paper"),
                   help="bank, realestate: prepare as the PO-GP-UCB paper (bank: n = 36,000, "
                        "inputs standardised, regret in std(f); realestate: ARD length-scales), "
                        "outside the privacy claim; the fidelity presets pass paper")
    table_arguments(p)
    ldp_synthetic_arguments(p)
    p.add_argument("--ldp-eps", type=positive,
                   help="make every reward eps-LDP with the CTL Laplace mechanism (Zhou & Tan)")
    p.add_argument("--budget-eps", type=budget_value,
                   help="the dataset's central privacy budget over every session and restart: "
                        "refuse what would exceed it (default: the projection, its lift test "
                        "and one release of eps 1; 'inf': none, warned)")
    p.add_argument("--budget-delta", type=probability,
                   help="the budget's delta (default 1/n with --budget-eps; else the "
                        "projection's, its test's and one release's)")
    p.add_argument("--budget-releases", type=count, metavar="N",
                   help="how many results (Kusner et al.'s releases) the dataset may ever "
                        "release, at any (eps, delta) (default: 1 with the default budget; no "
                        "limit but the budget's with --budget-eps)")
    p.add_argument("--raise-budget", action="store_true",
                   help="let this start's budget flags exceed the budget the dataset's journal "
                        "fixed at its first serve (recorded in the journal, shown by pobo "
                        "ledger); without it a start asking for more is refused")
    p.add_argument("--new-release", action="store_true",
                   help="draw (and charge) a second release of a dataset whose journal holds "
                        "one already under other settings (--eps, --r, --lift); without it such "
                        "a start is refused, and the same settings serve the stored release")
    p.add_argument("--ephemeral-ledger", action="store_true",
                   help="keep the ledger in memory, for this process only (default without "
                        "--journal: the dataset's own journal in $POBO_LEDGERS or $POBO_HOME/ledgers, so "
                        "every restart on the same data spends from one budget); every record "
                        "then says 'budget covers this process only'")
    p.add_argument("--ldp-row-budget", type=budget_value, metavar="E",
                   help="refuse a query whose LDP report would take its row past E in total "
                        "(the PLD accountant's eps at --ldp-row-delta, or the basic sum; "
                        "default T x --ldp-eps: one session's worth; 'inf': none, warned)")
    p.add_argument("--ldp-row-delta", type=probability, metavar="D",
                   help="the delta at which a row's composed LDP eps is stated and its row "
                        "budget enforced (default 1e-6; 0: pure eps, the basic sum)")
    p.add_argument("--lift", choices=LIFT_MODES,
                   help="the dataset release: gaussian (the Gaussian mechanism on the rows, "
                        "then rotated; the default), jl ((X_c M + omega G)/sqrt(r), omega by "
                        "the chi^2-mixture bound), private or always (PO-GP-UCB's lift at "
                        "Blocki et al.'s constant, for comparison) or paper (Algorithm 1 as "
                        f"published: not DP); default {DEFAULT_LIFT}, paper with --authors-code")
    p.add_argument("--lift-eps", type=positive, help="the private lift test's epsilon (default "
                                                  "0.1 x --eps)")
    p.add_argument("--lift-delta", type=probability, help="the private lift test's delta (default "
                                                    "--delta)")
    p.add_argument("--objective-cmd", metavar="'CMD {index}'",
                   help="measure f on demand: run CMD for each query ({index}: the row; also "
                        "{session}, {seq}); its stdout is the value, a failure a typed "
                        "evaluation_failed the modeler may retry")
    p.add_argument("--objective-wait", action="store_true",
                   help="measure f on demand: wait for each value to be entered with `pobo "
                        "answer --journal DB SESSION SEQ VALUE` (needs --journal)")
    p.add_argument("--results-file", metavar="FILE",
                   help="with --objective-wait: also take values from lines "
                        "'SESSION SEQ VALUE' of FILE, watched while waiting")
    p.add_argument("--eval-timeout", type=positive, default=3600.0,
                   help="seconds an --objective-cmd may run before it is killed (default 3600)")
    p.add_argument("--reward-bound", type=non_negative, metavar="B",
                   help="declared public bound on |f| (default: the scenario's constant)")
    p.add_argument("--noise-bound", type=non_negative, metavar="R",
                   help="declared public bound on the measurement noise")


def authors_code_argument(p: argparse.ArgumentParser, who: str) -> None:
    """--authors-code: the PO-GP-UCB authors' code's two departures from the paper's text."""
    p.add_argument("--authors-code", action="store_true", default=None,
                   help=f"reproduction switch ({who}): run as the PO-GP-UCB authors' code "
                        "does -- the curator lifts sigma + omega (the text: sqrt(sigma^2 + "
                        "omega^2); --lift paper), GP-UCB scores mean + beta_{t-1}^1/2 variance "
                        "with delta 0.1 (the text: beta_t^1/2 std, delta 0.05). Never a "
                        "default; recorded in result.json")


def ldp_synthetic_arguments(p: argparse.ArgumentParser) -> None:
    """--f-kernel and --noise: how the ldp-synthetic scenario builds f."""
    p.add_argument("--f-kernel", choices=("se", "matern52"),
                   help="ldp-synthetic: the kernel f is built from (default se)")
    p.add_argument("--noise", choices=("uniform", "student-t"),
                   help="ldp-synthetic: U[-1, 1] noise (default) or Student-t(3)")


def modeler_arguments(p: argparse.ArgumentParser) -> None:
    """The modeler's strategy, hyperparameter and release options (run, modeler)."""
    p.add_argument("--strategy", choices=STRATEGIES, default="gp-ucb")
    p.add_argument("--beta-scale", type=beta_scale,
                   help="multiply the strategy's exploration width beta_t (default: its "
                        "documented default; 1 = the theorem's value)")
    p.add_argument("--kernel", choices=("se", "ard-se", "matern52", "ard-matern52"),
                   help="modeler's kernel (default: the one the curator declares)")
    p.add_argument("--moma-k", type=moma_k_value, metavar="K",
                   help="moma-gp-ucb: plays per epoch (default: the theorem's "
                        "ceil(24 ln(4eT/delta)), 312 at T = 2000)")
    distinct_argument(p, "")
    p.add_argument("--fit", choices=FIT_MODES, default="auto",
                   help="hyperparameters: fixed (declared); map: the declared values until "
                        "--fit-hold rewards, then every --fit-every rounds a fit with log-normal "
                        "priors centred on them, kept only while its evidence beats theirs; "
                        "once after --n-init random rows, or every --fit-every rounds "
                        "(maximum likelihood on Z and rewards); "
                        "auto: fixed if the curator declares them public, else map; paper: "
                        "fixed if public, else every (the papers' experiments; the "
                        "presets' default)")
    p.add_argument("--n-init", type=at_least_two, default=5,
                   help="initial design size for --fit once/every")
    p.add_argument("--fit-every", type=positive_int, default=10, help="refit period (map, every)")
    p.add_argument("--fit-hold", type=at_least_two, default=20,
                   help="--fit map: rewards told before the first fit (default 20)")
    p.add_argument("--restarts", type=count, default=3,
                   help="L-BFGS-B starts per maximum-likelihood fit (once, every; map starts "
                        "from the declared values and the fit held)")
    p.add_argument("--release", choices=("noisy", "noise-free", "lipschitz"),
                   help="ask the curator for a DP release of the result at the end "
                        "(Kusner et al. Algorithm 1, 2 or 3)")
    p.add_argument("--release-eps", type=positive, default=1.0, help="epsilon of the release")
    p.add_argument("--release-delta", type=probability, default=1e-8,
                   help="delta of the release (default 1e-8: below 1/n for every n < 5e7; "
                        "Kusner's two-part releases charge 2 x delta)")
    p.add_argument("--batch", type=positive_int, default=1,
                   help="keep up to q queries outstanding, chosen by GP-BUCB (Desautels et "
                        "al. 2014); the curator's --max-batch caps it (default 1)")


def table_arguments(p: argparse.ArgumentParser) -> None:
    """The table scenario's columns and bounds (pobo run, curator, sweep, risk)."""
    p.add_argument("--features", metavar="A,B,C",
                   help="table: the CSV columns that are the inputs X")
    p.add_argument("--objective", metavar="COLUMN", help="table: the CSV column that is f")
    p.add_argument("--minimise", action="store_true", default=None,
                   help="table: minimise the objective (default: maximise)")
    p.add_argument("--bounds", metavar="LO:HI,LO:HI",
                   help="table: each feature's public bounds (rows clipped to them); without "
                        "them the preprocessing is fitted on the rows and not covered")


def distinct_argument(p: argparse.ArgumentParser, default_note: str) -> None:
    """--distinct / --no-distinct: the session's rule that a row is queried at most once."""
    rows = ", ".join(sorted(DISTINCT_ROWS) + [f"{name} with an --objective column"
                                              for name in sorted(DISTINCT_IF_TABULATED)])
    p.add_argument("--distinct", action=argparse.BooleanOptionalAction, default=None,
                   help=f"gp-ucb, random: never query a row twice (default: on for {rows}, "
                        f"whose tabulated outcome is exact{default_note})")


def risk_argument(p: argparse.ArgumentParser, when: str) -> None:
    """--risk [K]: measure the release's risk (`pobo risk`) with K known rows."""
    p.add_argument("--risk", type=positive_int, nargs="?", const=20, metavar="K",
                   help=f"{when} what a modeler recovers from the release with K known rows "
                        "(default 20) and with none, as `pobo risk` does; kept in "
                        "result.json under risk")


def scenario_or_run(text: str) -> str:
    """`pobo risk`'s target: a run folder (one with result.json), else a scenario."""
    if (Path(text) / "result.json").is_file():
        return text
    return scenario_arg(text)


def spin_argument(p: argparse.ArgumentParser, whose: str = "this process's event loop") -> None:
    """--spin: how long the event loop polls before it sleeps (transport.spin)."""
    from pobo.transport.spin import MAX_SPIN, SHARE, SPIN

    most = MAX_SPIN * 1e6
    p.add_argument("--spin", type=_number(float, lambda v: 0 <= v <= most,
                                          f"microseconds in [0, {most:g}]"),
                   default=SPIN * 1e6, metavar="MICROSECONDS",
                   help=f"while frames come this close together, {whose} polls "
                        "until this long after the last one before it sleeps (a lower "
                        "round-trip latency for CPU: at most this much after a frame and "
                        f"{SHARE * 100:g}%% of the time; 0: never poll; default {SPIN * 1e6:g}, "
                        f"at most {most:g})")


def durability_argument(p: argparse.ArgumentParser) -> None:
    """--durability: how the journal commits an answer before its reward is sent."""
    p.add_argument("--durability", choices=sorted(DURABILITY), default=DEFAULT_DURABILITY,
                   help="full (default): every commit is fsynced, an answer survives a power "
                        "loss; normal: WAL synchronous=NORMAL, an answer survives the curator "
                        "being killed but not the machine losing power (faster per query)")


def scenario_arg(text: str) -> str:
    """A scenario name or script path that resolves (one-line argparse error otherwise)."""
    if is_script(text):
        if not Path(text).is_file():
            raise argparse.ArgumentTypeError(f"no scenario script at {text}")
        return str(Path(text).resolve())  # absolute: a curator process may run elsewhere
    if not is_known(text):
        raise argparse.ArgumentTypeError(f"unknown scenario {text!r}; choose from "
                                         f"{', '.join(scenario_names())} or a .py script")
    return text


def moma_k_value(text: str) -> int:
    """--moma-k: an integer of at least 2 (one-line argparse error otherwise)."""
    try:
        return epoch_length_option(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _number(kind: type, test, what: str):
    """An argparse type: `kind(text)` that passes `test`, else a one-line error."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not (math.isfinite(value) and test(value)):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value
    parse.__name__ = what  # what argparse names in its message
    return parse


positive_int = _number(int, lambda v: v >= 1, "an integer >= 1")
count = _number(int, lambda v: v >= 0, "an integer >= 0")
positive = _number(float, lambda v: v > 0, "a number > 0")
non_negative = _number(float, lambda v: v >= 0, "a number >= 0")
finite = _number(float, lambda v: True, "a finite number")
probability = _number(float, lambda v: 0 <= v < 1, "a number in [0, 1)")
at_least_two = _number(int, lambda v: v >= 2, "an integer >= 2")
# an exploration scale S multiplies sqrt(beta_t); past 1e6 it only overflows
beta_scale = _number(float, lambda v: 0 < v <= 1e6, "a number in (0, 1e6]")
log_epsilon = _number(float, lambda v: abs(v) <= 100, "a number in [-100, 100]")  # e^x finite


def budget_value(text: str) -> float:
    """--budget-eps, --ldp-row-budget: a number > 0, or 'inf' (no budget: warned at start)."""
    if text.strip().lower() in ("inf", "infinity"):
        return math.inf
    return positive(text)


budget_value.__name__ = "a number > 0 or inf"


def r_value(text: str) -> int | str:
    """--r: a positive integer or 'auto'."""
    if text == "auto":
        return text
    try:
        r = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"r must be a positive integer or 'auto', got {text!r}")
    if r < 1:
        raise argparse.ArgumentTypeError(f"r must be a positive integer or 'auto', got {text!r}")
    return r
