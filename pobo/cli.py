"""The `pobo` command line: run a whole session, or one party of it, from a scenario.

  pobo run SCENARIO [options]          curator + modeler as two processes (tcp by default)
  pobo curator SCENARIO --bind EP      the curator alone (separate machines)
  pobo modeler --connect EP            the modeler alone
  pobo sweep [SCENARIO] [--preset P]   a grid of runs, with tables and plots
  pobo runs [DIR]                      the runs and sweeps under DIR, one line each
  pobo answer --journal DB [SESSION SEQ VALUE]   enter (or list) values awaited on demand

Every command is a thin wrapper over a documented Python call (scenarios.launch.run,
scenarios.remote.serve_curator, scenarios.remote.connect_modeler, scenarios.runs.list_runs).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
from dataclasses import replace
import os
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

# What the parser needs, importable without numpy; every handler imports what it runs,
# so that `pobo --help` and the parent of `pobo run` start no numerical code.
from pobo.parties.choices import (
    DEFAULT_LIFT, FIT_MODES, LIFT_MODES, STRATEGIES, HyperFit, epoch_length_option,
    strategy_spec,
)
from pobo import __version__
from pobo.parties.choices import DEFAULT_DURABILITY, DURABILITY
from pobo.protocol.errors import PoboError
from pobo.protocol.ledger import describe_ledger
from pobo.launch import PARENT_PIPE, TRANSPORTS, LaunchError, run
from pobo.scenarios.presets import PRESETS, Preset
from pobo.scenarios.registry import DISTINCT_ROWS, build_problem, is_known, is_script, scenario_names
from pobo.config import CONFIGURABLE, apply_config, check_required
from pobo.progress import configure_logging
from pobo.runspec import RunConfig, nominal_reason, startup_warnings

if TYPE_CHECKING:
    from pobo.protocol.messages import ReleaseRequest
    from pobo.sweep import SweepSpec

NEEDED = {"run": ("scenario",), "curator": ("scenario",), "modeler": ("connect",),
          "sweep": (), "export-data": ("scenario",),
          "risk": ("scenario",)}  # what a command needs from its flags or its --config
SCENARIO_OPTIONS = ("grid", "data", "n", "f_kernel", "noise", "features", "objective",
                    "minimise", "bounds", "prep")


DEFAULT_MAX_SESSIONS = 1024  # sessions a curator serves at once (each costs ~35 kB, no Z)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `pobo` console script; returns the exit status."""
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    configure_logging(getattr(args, "verbose", 0) or 0, getattr(args, "quiet", False))
    _terminate_like_interrupt()
    args.parent = _stop_with_parent()
    args.under_run = args.parent is not None
    try:
        if args.command in CONFIGURABLE:
            sub = parser.subcommands[args.command]
            if args.config is not None:
                apply_config(sub, args, argv, args.config)
                configure_logging(args.verbose or 0, args.quiet)  # the file may set them
            check_required(sub, args, NEEDED[args.command])
        status = args.handler(args)
        sys.stdout.flush()  # a reader that went away (`| head`) is found here, not at exit
        return status
    except BrokenPipeError:  # the reader of our output stopped reading: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (PoboError, ValueError, OSError, sqlite3.Error, ArithmeticError,
            MemoryError) as exc:  # (a dataset too large for memory: one line, not a trace)
        print(f"pobo {args.command}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:
        result = getattr(exc, "result", None)
        if result is not None:
            print(summary(result))
            print(f"result (interrupted): {Path(exc.out) / 'result.json'}")
        print(f"pobo {args.command}: interrupted", file=sys.stderr)
        return 130


def _terminate_like_interrupt() -> None:
    """SIGTERM (what `pobo run` sends a party that will not stop) unwinds like Ctrl-C, so
    that every record is still written (a curator's own loop also watches both)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupt)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


PARENT_GRACE = 30.0  # seconds a party whose `pobo run` died has to unwind before exiting


class ParentPipe:
    """A party's standard input when `pobo run` started it: a pipe whose first line is the
    curator's endpoint (for a modeler started with `--connect -`) and whose end says the
    run died (the party then stops like on SIGTERM, and exits PARENT_GRACE s later if it
    has not by then: no party outlives its run)."""

    def __init__(self) -> None:
        self._line: list[str] = []
        self._read = threading.Event()  # the first line, or the end, was read
        threading.Thread(target=self._watch, name="pobo-parent-watch", daemon=True).start()

    def first_line(self) -> str:
        """The pipe's first line, once written ("" if it ended first)."""
        while not self._read.wait(0.5):  # (a timed wait: signals are handled meanwhile)
            pass
        return self._line[0] if self._line else ""

    def _watch(self) -> None:
        pending = b""
        try:
            while chunk := os.read(0, 1 << 16):  # returns at end of file
                if not self._read.is_set():
                    pending += chunk
                    if b"\n" in pending:
                        self._line.append(pending.split(b"\n", 1)[0].decode().strip())
                        self._read.set()
        except OSError:
            pass
        self._read.set()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(PARENT_GRACE)
        os._exit(143)


def _stop_with_parent() -> ParentPipe | None:
    """The pipe from `pobo run` of a party it started (its stdin, scenarios.launch),
    watched; None for a command a person typed."""
    if os.environ.pop(PARENT_PIPE, None) != "1":  # popped: not for the party's children
        return None
    return ParentPipe()


def _endpoint(args: argparse.Namespace) -> str:
    """The curator's endpoint: --connect, or with `--connect -` the first line of the
    standard input (how `pobo run` starts its modeler before the curator has bound)."""
    if args.connect != "-":
        return args.connect
    line = args.parent.first_line() if args.parent is not None else sys.stdin.readline()
    if not line.strip():
        raise ValueError("--connect -: no endpoint on the standard input")
    return line.strip()


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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every pobo subcommand."""
    parser = Parser(prog="pobo", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"pobo {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    parser.subcommands = sub.choices  # name -> its parser (for --config)

    p = sub.add_parser("run", help="run curator and modeler of a scenario end to end")
    _scenario_arguments(p, default_seed=0)
    _output_arguments(p, "-v: every answer line, no bar")
    _modeler_arguments(p)
    _authors_code_argument(p, "both sides")
    p.add_argument("--transport", choices=TRANSPORTS, default="tcp",
                   help="tcp/ipc: two OS processes over loopback; inproc: one process")
    p.add_argument("--out", type=Path, help="output folder (default runs/SCENARIO-TIME)")
    p.add_argument("--curve", type=Path, metavar="DIR",
                   help="encrypt and authenticate with CURVE keys from DIR (made if missing)")
    p.add_argument("--journal", type=Path,
                   help="the curator's SQLite journal (default: in memory; with "
                        "--objective-wait: OUT/curator.journal)")
    _durability_argument(p)
    _spin_argument(p, "each party's event loop (tcp, ipc; inproc has no wait to poll)")
    p.add_argument("--max-batch", type=positive_int,
                   help="the most queries the curator lets the modeler keep outstanding "
                        "(default: --batch)")
    _risk_argument(p, "after the run, measure")
    p.set_defaults(handler=_cmd_run)

    p = sub.add_parser("sweep", help="run every combination of eps, r, strategy and seed")
    _output_arguments(p, "-v: a line per run, no bar")
    p.add_argument("scenario", nargs="?", type=scenario_arg, metavar="SCENARIO",
                   help="the scenario (optional with --preset)")
    p.add_argument("--config", type=Path, metavar="FILE.toml",
                   help="read settings from a TOML file (every flag as a key; a [sweep] "
                        "table for this command); flags given here override it")
    p.add_argument("--preset", choices=sorted(PRESETS), help="one of the paper's experiments")
    p.add_argument("--eps", type=positive, nargs="+", help="epsilons")
    p.add_argument("--log-eps", type=log_epsilon, nargs="+",
                   help="epsilons as e^x (the paper's way)")
    p.add_argument("--r", type=positive_int, nargs="+", help="projection dimensions")
    p.add_argument("--seeds", type=positive_int, help="seeds 0..N-1 (default 10, presets 50)")
    p.add_argument("--T", type=positive_int, help="query budget")
    p.add_argument("--non-private", action="store_true", help="add the non-private baseline")
    p.add_argument("--strategies", nargs="+", choices=STRATEGIES,
                   help="default gp-ucb (a --preset's own)")
    p.add_argument("--workers", type=positive_int, default=2,
                   help="local worker processes (1: run in this process)")
    p.add_argument("--dask", metavar="ADDRESS", help="run on a dask.distributed scheduler")
    p.add_argument("--transcripts", action="store_true", help="keep both transcripts of every run")
    p.add_argument("--lift", choices=LIFT_MODES,
                   help="the dataset release (default: paper for a table --preset or "
                        "--authors-code, else "
                        f"{DEFAULT_LIFT}); see pobo run --help")
    _authors_code_argument(p, "every run")
    p.add_argument("--grid", type=positive_int, help="synthetic, branin: grid side")
    p.add_argument("--data", help="hospital, bank, realestate: the public CSV")
    p.add_argument("--n", type=positive_int, help="hospital, bank, realestate: use n random rows")
    p.add_argument("--prep", choices=("default", "paper"),
                   help="bank, realestate: the paper's preparation (the presets pass it)")
    _ldp_synthetic_arguments(p)
    p.add_argument("--ldp-eps", type=positive, nargs="+",
                   help="make every reward eps-LDP (CTL Laplace); several values are swept")
    p.add_argument("--beta-scales", type=beta_scale, nargs="+",
                   help="exploration scales S to sweep (default: each strategy's default)")
    _distinct_argument(p, "; a paper --preset: off, as the paper's GP-UCB")
    p.add_argument("--moma-k", type=moma_k_value, nargs="+", metavar="K",
                   help="moma-gp-ucb epoch lengths to sweep (default: the theorem's k)")
    p.add_argument("--kernel", choices=("se", "ard-se", "matern52", "ard-matern52"))
    p.add_argument("--fit", choices=FIT_MODES, default="auto")
    p.add_argument("--n-init", type=at_least_two, default=5)
    p.add_argument("--fit-every", type=positive_int, default=10)
    p.add_argument("--fit-hold", type=at_least_two, default=20)
    p.add_argument("--restarts", type=count, default=3)
    p.add_argument("--out", type=Path, help="output folder (default runs/sweep-NAME)")
    _risk_argument(p, "for every release swept, measure (the frontier preset: K = 20)")
    p.set_defaults(handler=_cmd_sweep)

    p = sub.add_parser("risk", help="measure what a modeler could learn about rows from a "
                                    "release: recovery per feature against the marginals")
    _scenario_arguments(p, default_seed=0)
    for action in p._actions:  # SCENARIO, or a run folder holding a transcript
        if action.dest == "scenario":
            action.type, action.metavar = scenario_or_run, "SCENARIO|RUN_DIR"
            action.help = ("a scenario (its release prepared as the curator would, with the "
                           "options below), or a run folder: Z from its transcript, X rebuilt "
                           "with the options the run used (--data, --n) and checked against "
                           "its dataset digest; the result is added to its result.json")
    p.add_argument("--anchors", type=positive_int, default=20, metavar="K",
                   help="rows the modeler knows already, with their positions (default 20)")
    p.add_argument("--repeats", type=positive_int, default=1,
                   help="draws of the K known rows to average (default 1)")
    p.add_argument("--json", action="store_true", help="print the measurement as JSON")
    p.set_defaults(handler=_cmd_risk)

    p = sub.add_parser("audit", help="verify transcripts: chain, policy, ledger, agreement")
    p.add_argument("transcripts", nargs="+", type=Path,
                   help="a party's transcript, the curator's and the modeler's of one session, "
                        "or those of several sessions of one dataset (their signed ledger "
                        "heads must form one chain: a rolled-back journal shows as a fork)")
    p.add_argument("--data", type=Path,
                   help="the curator's data (.npz with X and f, or .npy X): check that none of "
                        "it appears in anything sent")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--blobs", type=Path,
                   help="folder of the shared frames the transcripts reference (default: "
                        "blobs/ beside the transcript or its parent)")
    p.add_argument("--curator-key", type=Path, metavar="FILE",
                   help="the curator's public signing key (curator.sign_public): verify "
                        "every signature it made")
    p.add_argument("--modeler-key", type=Path, metavar="FILE",
                   help="the modeler's public signing key (modeler.sign_public)")
    p.add_argument("--keys", type=Path, metavar="DIR",
                   help="a `pobo keys` folder holding both public signing keys (default: "
                        "the keys of your key store, $POBO_HOME or ~/.pobo: keys/ and "
                        "trusted/; never a keys/ folder beside the transcripts)")
    p.add_argument("--allow-unsigned", action="store_true",
                   help="exit 0 for transcripts without a signature verified against a key "
                        "you trust (by default: exit status 3)")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="exit 0 for a transcript audited alone that holds no End from its "
                        "peer, whose tail it cannot vouch for (by default: exit status 4)")
    p.set_defaults(handler=_cmd_audit)

    p = sub.add_parser("report", help="write one self-contained HTML page about a run, a "
                                      "sweep or a deployment's curator or modeler folder: "
                                      "answer, privacy, ledger, audit, curves")
    p.add_argument("folder", type=Path, metavar="RUN_OR_SWEEP_DIR",
                   help="a run folder (result.json), a sweep folder (runs.csv), or a "
                        "curator's session or a modeler's folder (curator.json, "
                        "modeler.json)")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="where to write the page (default RUN_OR_SWEEP_DIR/report.html)")
    p.set_defaults(handler=_cmd_report)

    p = sub.add_parser("runs", help="list the runs and sweeps under a folder, oldest first: "
                                    "scenario, time, status, policy, ε spent, result")
    p.add_argument("folder", type=Path, nargs="?", default=Path("runs"), metavar="DIR",
                   help="where to look (default ./runs), down to 4 levels: a folder with "
                        "result.json is a run, one with runs.csv a sweep (its runs/ are "
                        "summarised on its line, not listed), one with a party's record a "
                        "deployment's curator or modeler (or a run not merged); STATUS is "
                        "ok, failed or interrupted; TIME is when its record was written")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(handler=_cmd_runs)

    p = sub.add_parser("export-data", help="write a scenario's preprocessed X and f (.npz), "
                                           "the curator's private data, for `pobo audit --data`")
    _scenario_arguments(p, default_seed=0)
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(handler=_cmd_export)

    p = sub.add_parser("curator", help="run the curator alone, bound to an endpoint")
    _scenario_arguments(p, default_seed=None)
    _authors_code_argument(p, "the curator's part: the sigma + omega lift")
    _output_arguments(p, "-v: every answer line, no bar")
    p.add_argument("--bind", default="tcp://127.0.0.1:5555",
                   help="ZeroMQ endpoint to bind (tcp://HOST:PORT or ipc://PATH; default "
                        "loopback: another interface in plaintext needs --insecure)")
    p.add_argument("--insecure", action="store_true",
                   help="allow binding a non-loopback address without CURVE (plaintext on "
                        "the network: anyone on the path reads Z and the rewards)")
    p.add_argument("--max-sessions", type=count, default=DEFAULT_MAX_SESSIONS,
                   help="sessions served at once; a Hello past it is refused with 'busy' "
                        f"(default {DEFAULT_MAX_SESSIONS}; 0: no cap)")
    p.add_argument("--max-sessions-per-key", type=count, default=None, metavar="N",
                   help="sessions one modeler key may hold at once; a Hello past it is "
                        "refused with 'busy' (default: half of --max-sessions; 0: no cap). "
                        "The key is the peer's CURVE key, else its signing key when "
                        "--sign-allow names the admitted ones; a peer with neither has no "
                        "key and only --max-sessions caps it")
    p.add_argument("--accept-timeout", type=positive, default=600.0,
                   help="seconds to wait for a modeler to connect")
    p.add_argument("--sessions", type=count, default=1,
                   help="modeler sessions to serve concurrently, in OUT/SESSION/ (0: until "
                        "SIGINT/SIGTERM); all share the dataset's projection, ledger and budget")
    p.add_argument("--journal", type=Path,
                   help="SQLite journal of the dataset: its projection, ledger and sessions; "
                        "answers are committed before they are sent, and a restarted curator "
                        "serves the same Z, keeps the same ledger and resumes the sessions in "
                        "it (default: the dataset's own journal under $POBO_HOME/ledgers, "
                        "unless --ephemeral-ledger or a seeded run)")
    p.add_argument("--ledger-head", type=Path, metavar="FILE",
                   help="where the curator keeps the last ledger head it signed, outside the "
                        "journal (default JOURNAL.head; beside its keys is better): it refuses "
                        "to start on a journal behind it")
    _durability_argument(p)
    _spin_argument(p)
    p.add_argument("--curve-secret", type=Path, help="CURVE: the curator's secret key file")
    p.add_argument("--curve-allow", type=Path,
                   help="CURVE: directory of the modeler public keys to admit")
    p.add_argument("--sign-secret", type=Path, metavar="FILE",
                   help="the curator's signing key (curator.sign_secret): sign every frame "
                        "(default: your key store's, made once: $POBO_HOME or ~/.pobo)")
    p.add_argument("--unsigned", action="store_true",
                   help="sign nothing (an audit of it then exits 3 without --allow-unsigned)")
    p.add_argument("--sign-allow", type=Path, metavar="DIR",
                   help="admit only modelers signing with a key in DIR/*.sign_public")
    p.add_argument("--max-batch", type=positive_int, default=1,
                   help="the most queries one session may keep outstanding (a modeler's "
                        "--batch is capped by it; default 1)")
    p.add_argument("--out", type=Path, default=Path("runs/curator"))
    p.set_defaults(handler=_cmd_curator)

    p = sub.add_parser("answer", help="enter the value of an evaluation a curator awaits "
                                      "(--objective-wait), or list the ones pending")
    p.add_argument("--journal", type=Path, required=True, help="the curator's SQLite journal")
    p.add_argument("session", nargs="?", help="the session id (as `--list` prints it)")
    p.add_argument("seq", nargs="?", type=positive_int, help="the query's sequence number")
    p.add_argument("value", nargs="?", type=float, help="the measured value of f at its row")
    p.add_argument("--list", action="store_true",
                   help="list the pending evaluations (the default without SESSION SEQ VALUE)")
    p.add_argument("--json", action="store_true", help="list them as JSON")
    p.set_defaults(handler=_cmd_answer)

    p = sub.add_parser("ledger", help="print a curator journal's privacy ledger (the dataset's "
                                      "central total and budget, every entry, per-row LDP) "
                                      "and check it against the heads the curator signed")
    p.add_argument("--journal", type=Path, required=True, help="the curator's SQLite journal")
    p.add_argument("transcripts", nargs="*", type=Path, metavar="TRANSCRIPT",
                   help="transcripts of the dataset's sessions: every ledger head their "
                        "Welcomes and Ends carry must be what the journal held after that "
                        "many entries (chain and totals); exit 2 otherwise (their signatures "
                        "are `pobo audit`'s to check)")
    p.add_argument("--ledger-head", type=Path, metavar="FILE",
                   help="the head file the curator keeps (default JOURNAL.head, if there): "
                        "the journal must hold that head too")
    p.add_argument("--json", action="store_true", help="print it as JSON")
    p.set_defaults(handler=_cmd_ledger)

    p = sub.add_parser("keys", help="make CURVE and Ed25519 signing key pairs for a curator "
                                    "and a modeler")
    p.add_argument("directory", type=Path)
    p.add_argument("--force", action="store_true",
                   help="overwrite key pairs already in DIRECTORY")
    p.set_defaults(handler=_cmd_keys)

    p = sub.add_parser("modeler", help="run the modeler alone, connected to a curator")
    p.add_argument("--config", type=Path, metavar="FILE.toml",
                   help="read settings from a TOML file (every flag as a key; a [modeler] "
                        "table for this command); flags given here override it")
    p.add_argument("--connect", help="the curator's endpoint (required; '-': the first line "
                                      "of the standard input)")
    p.add_argument("--seed", type=count, default=None, help="modeler seed (default: OS entropy)")
    _modeler_arguments(p)
    _authors_code_argument(p, "the modeler's part: GP-UCB's mean + beta_{t-1}^1/2 variance, "
                           "delta 0.1")
    p.add_argument("--non-private", action="store_true",
                   help="accept the curator's non-private identity release of X")
    p.add_argument("--timeout", type=positive, default=60.0,
                   help="seconds to wait for a reply from a curator that is listening")
    p.add_argument("--resume", action="store_true",
                   help="continue the session recorded in OUT/modeler.transcript")
    p.add_argument("--patience", type=non_negative, default=86400.0,
                   help="seconds to wait for a curator that is not listening yet (one still "
                        "preparing binds when ready), and to keep reconnecting to one that "
                        "vanished while an evaluation was pending (default 1 day)")
    _spin_argument(p)
    p.add_argument("--curve-secret", type=Path, help="CURVE: the modeler's secret key file")
    p.add_argument("--curve-server", type=Path, help="CURVE: the curator's public key file")
    p.add_argument("--sign-secret", type=Path, metavar="FILE",
                   help="the modeler's signing key (modeler.sign_secret): sign every frame "
                        "(default: your key store's, made once: $POBO_HOME or ~/.pobo)")
    p.add_argument("--unsigned", action="store_true",
                   help="sign nothing (an audit of it then exits 3 without --allow-unsigned)")
    p.add_argument("--curator-sign-key", type=Path, metavar="FILE",
                   help="the curator's public signing key (curator.sign_public): refuse a "
                        "curator that signs with another key or none")
    p.add_argument("--ledger-heads", type=Path, metavar="FILE",
                   help="where the last ledger head seen of each curator key's ledger is "
                        "kept and checked (a head that does not extend it refuses the "
                        "session; default: $POBO_HOME/ledger_heads.json)")
    p.add_argument("--out", type=Path, default=Path("runs/modeler"))
    _output_arguments(p, "-v: one line per query")
    p.set_defaults(handler=_cmd_modeler)
    return parser


def _output_arguments(p: argparse.ArgumentParser, verbose: str) -> None:
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


def _scenario_arguments(p: argparse.ArgumentParser, default_seed: int | None) -> None:
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
    p.add_argument("--features", metavar="A,B,C",
                   help="table: the CSV columns that are the inputs X")
    p.add_argument("--objective", metavar="COLUMN", help="table: the CSV column that is f")
    p.add_argument("--minimise", action="store_true", default=None,
                   help="table: minimise the objective (default: maximise)")
    p.add_argument("--bounds", metavar="LO:HI,LO:HI",
                   help="table: each feature's public bounds (rows clipped to them); without "
                        "them the preprocessing is fitted on the rows and not covered")
    _ldp_synthetic_arguments(p)
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


def _authors_code_argument(p: argparse.ArgumentParser, who: str) -> None:
    """--authors-code: the PO-GP-UCB authors' code's two departures from the paper's text."""
    p.add_argument("--authors-code", action="store_true", default=None,
                   help=f"reproduction switch ({who}): run as the PO-GP-UCB authors' code "
                        "does -- the curator lifts sigma + omega (the text: sqrt(sigma^2 + "
                        "omega^2); --lift paper), GP-UCB scores mean + beta_{t-1}^1/2 variance "
                        "with delta 0.1 (the text: beta_t^1/2 std, delta 0.05). Never a "
                        "default; recorded in result.json")


def _ldp_synthetic_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--f-kernel", choices=("se", "matern52"),
                   help="ldp-synthetic: the kernel f is built from (default se)")
    p.add_argument("--noise", choices=("uniform", "student-t"),
                   help="ldp-synthetic: U[-1, 1] noise (default) or Student-t(3)")


def _modeler_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--strategy", choices=STRATEGIES, default="gp-ucb")
    p.add_argument("--beta-scale", type=beta_scale,
                   help="multiply the strategy's exploration width beta_t (default: its "
                        "documented default; 1 = the theorem's value)")
    p.add_argument("--kernel", choices=("se", "ard-se", "matern52", "ard-matern52"),
                   help="modeler's kernel (default: the one the curator declares)")
    p.add_argument("--moma-k", type=moma_k_value, metavar="K",
                   help="moma-gp-ucb: plays per epoch (default: the theorem's "
                        "ceil(24 ln(4eT/delta)), 312 at T = 2000)")
    _distinct_argument(p, "")
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


def _distinct_argument(p: argparse.ArgumentParser, default_note: str) -> None:
    """--distinct / --no-distinct: the session's rule that a row is queried at most once."""
    rows = ", ".join(sorted(DISTINCT_ROWS))
    p.add_argument("--distinct", action=argparse.BooleanOptionalAction, default=None,
                   help=f"gp-ucb, random: never query a row twice (default: on for {rows}, "
                        f"whose tabulated outcome is exact{default_note})")


def _risk_argument(p: argparse.ArgumentParser, when: str) -> None:
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


def _cmd_risk(args: argparse.Namespace) -> int:
    from pobo.risk import folder_risk, risk_lines, scenario_risk

    if args.scenario is None:
        raise ValueError("name a scenario or a run folder")
    if (Path(args.scenario) / "result.json").is_file():
        options = {k: getattr(args, k) for k in SCENARIO_OPTIONS
                   if getattr(args, k, None) is not None}
        risk = folder_risk(args.scenario, options, args.anchors, args.repeats)
    else:
        risk = scenario_risk(config_from_args(args), args.anchors, args.repeats)
    print(json.dumps(risk, indent=1) if args.json else "\n".join(risk_lines(risk)))
    return 0


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


def _spin_argument(p: argparse.ArgumentParser, whose: str = "this process's event loop") -> None:
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


def _durability_argument(p: argparse.ArgumentParser) -> None:
    """--durability: how the journal commits an answer before its reward is sent."""
    p.add_argument("--durability", choices=sorted(DURABILITY), default=DEFAULT_DURABILITY,
                   help="full (default): every commit is fsynced, an answer survives a power "
                        "loss; normal: WAL synchronous=NORMAL, an answer survives the curator "
                        "being killed but not the machine losing power (faster per query)")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The RunConfig that the scenario options of a subcommand describe."""
    options = {k: getattr(args, k) for k in SCENARIO_OPTIONS if getattr(args, k, None) is not None}
    modeler = ({"strategy": args.strategy, "hyper": hyper_from_args(args),
                "beta_scale": args.beta_scale, "release": args.release,
                "release_epsilon": args.release_eps, "release_delta": args.release_delta,
                "batch": args.batch, "moma_k": args.moma_k, "distinct": args.distinct}
               if hasattr(args, "strategy") else {})
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


def _cmd_run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    out = args.out or Path("runs") / f"{config.scenario}-{time.strftime('%Y%m%d-%H%M%S')}"
    creatable(Path(out))  # refused now, before either party starts
    try:
        result = run(config, out, args.transport, curve_dir=args.curve,
                     modeler_lines=args.verbose >= 1, spin=args.spin * 1e-6)
    except LaunchError as exc:
        print(f"pobo run: error: {exc}", file=sys.stderr)
        return 1
    print(summary(result))
    from pobo.parties.statement import privacy_lines  # numpy: only once a run is done

    print("\n".join(privacy_lines(result.get("privacy_unit"))))
    print(ledger_lines(result))
    timing = timing_line(result.get("modeler") or {})
    if timing:
        print(timing)
    released, refused = result["modeler"].get("release"), result["modeler"].get("release_error")
    if released:
        print(f"DP release ({released['algorithm']}, eps={released['epsilon']:g}, "
              f"delta={released['delta']:g}): row {released['index']}, value "
              f"{released['value']:.6g} (Laplace scale {released['scale']:.4g})")
    elif refused:
        print(f"DP release refused: {refused}")
    if args.risk:
        from pobo.risk import folder_risk, risk_lines

        print("\n".join(risk_lines(folder_risk(out, config.options, args.risk))))
    print(f"result: {Path(out) / 'result.json'}")
    print(next_commands(Path(out)))
    return 0


def next_commands(out: Path) -> str:
    """What a person does after `pobo run`: the report page and the audit of the two
    transcripts (as shell words: a folder name with spaces is quoted)."""
    import shlex

    folder = shlex.quote(str(out))
    transcripts = " ".join(shlex.quote(str(out / f"{role}.transcript"))
                           for role in ("curator", "modeler"))
    return ("next: pobo report " + folder + "   (one HTML page: answer, privacy, ledger, "
            "audit)\n      pobo audit " + transcripts + "   (check both records, trusting "
            "neither party)\n      pobo runs " + shlex.quote(str(out.parent)) +
            "   (every run there, one line each)")


def timing_line(modeler: dict) -> str | None:
    """The modeler's time per step and its preparation, for the closing note (None when
    its record has none)."""
    if modeler.get("step_seconds") is None:
        return None
    return (f"time: {modeler['step_seconds']:.3g} s per step over {modeler['steps']} steps "
            f"(the modeler's query to reward, its choice included), after "
            f"{modeler['prepare_seconds']:.3g} s of preparation (handshake, dataset, GP)")


def summary(result: dict) -> str:
    """One human line about a finished run."""
    sy = result.get("sigma_y") or result["sigma_f"] or 1.0
    gaussian = result.get("lift") in ("gaussian", "jl")
    priv = ("non-private" if result["epsilon"] is None else
            f"eps={result['epsilon']:.4g} delta={result['delta']:.3g} "
            + (f"{'sigma' if result['lift'] == 'gaussian' else 'omega'}={result['omega']:.4g} "
               f"(lift {result['lift']})" if gaussian else
               f"omega={result['omega']:.4g} sigma_min={result['sigma_min']:.4g} "
               f"{'lifted' if result['lifted'] else 'not lifted'} (lift {result.get('lift')})"))
    why = nominal_reason(result)
    if why is not None:
        priv += f" NOT DP ({why})"
    head = f"{result['scenario']}: n={result['n']} d={result['d']} r={result['r']} T={result['T']} {priv}"
    head += " [--authors-code: the authors' lift and UCB]" if result.get("authors_code") else ""
    if not result["queries"]:
        return f"{head}: no query answered (status {result['status']})"
    if result.get("simple_regret") is None:  # f measured on demand: only the queried rows
        import numpy as np

        best = int(np.argmax(result["measured"]))
        return (f"{head}: {len(result['queries'])} evaluations ({result.get('objective')}); "
                f"best measured {result['measured'][best]:.6g} at row {result['queries'][best]}"
                " (no regret: f is not known for every row)")
    rank = ("" if result.get("best_rank") is None else
            f"; best row found ranks {result['best_rank']} of {result['n']}")
    if result.get("metric") == "hits":
        return (f"{head}: {result['hits'][-1]:.0f} distinct positives in "
                f"{len(result['queries'])} queries ({len(set(result['queries']))} distinct rows) "
                f"(random selection expects {result['random_hits_expected']:.1f})" + rank)
    top = ("" if result.get("top1_hits") is None else
           f"; top-1% rows found {result['top1_hits']} of {result['top1_rows']} (random "
           f"selection expects {result['random_top1_expected']:.2g})")
    sf = result.get("simple_regret_sigma_f")
    return (f"{head}: simple regret {result['simple_regret'][-1]:.4g} ("
            + ("" if sf is None else f"{sf:.3g} sigma_f, ")
            + f"{result['simple_regret'][-1] / sy:.3g} sigma_y), cumulative "
            f"{result['cumulative_regret'][-1]:.4g}" + top + rank)


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


def _cmd_sweep(args: argparse.Namespace) -> int:
    from pobo.allocator import keep_freed_memory
    from pobo.report import admissible_r, write_report
    from pobo.sweep import dask_executor, run_sweep

    spec, preset = sweep_spec_from_args(args)
    out = args.out or Path("runs") / f"sweep-{args.preset or spec.scenario}"
    executor = dask_executor(args.dask) if args.dask else None
    if executor is None and args.workers == 1:  # the runs go on in this process
        keep_freed_memory()  # (spawned workers get the same through their environment)
    dataset = admissible_r(spec.scenario, spec.options, spec.epsilons, spec.rs)
    print(dataset, flush=True)  # once: sigma_min, sigma_y and the admissible r of the data
    rows = run_sweep(spec, out, executor=executor, workers=args.workers)
    print(write_report(rows, out, scenario=spec.scenario, options=spec.options,
                       epsilons=spec.epsilons, rs=spec.rs,
                       paper=preset.paper if preset else None,
                       title=preset.caption if preset else f"{spec.scenario} sweep",
                       dataset=dataset))
    return 0


def _cmd_audit(args: argparse.Namespace) -> int:
    from pobo.auditing import audit_files, trusted_keys

    trusts: dict[Path, object] = {}  # each transcript's Trust: the keys of its own session

    def keys_for(group: list[Path]):
        """The keys to verify one session's transcripts with (its own modeler's)."""
        trust = trusted_keys(group, args.curator_key, args.modeler_key, args.keys)
        trusts.update(dict.fromkeys(group, trust))
        return trust.keys

    reports = audit_files(args.transcripts, args.data, args.blobs, keys_for)
    for r in reports:  # say why no key checked them, not that none was given
        missing = trusts[Path(r.path)].missing
        if missing and r.signatures.startswith("unverified"):
            r.signatures = f"unverified ({'; '.join(missing)})"
    if args.json:
        print(json.dumps([{**r.to_dict(), "trusted_keys": trusts[Path(r.path)].sources,
                           "not_verified": list(trusts[Path(r.path)].missing)}
                          for r in reports], indent=1))
    else:
        said = list(dict.fromkeys(line for t in trusts.values() for line in t.lines()))
        print("\n".join([*said, *(r.text() for r in reports)]))
    return audit_status(reports, args.allow_unsigned, args.allow_incomplete)


def audit_status(reports: list, allow_unsigned: bool = False,
                 allow_incomplete: bool = False) -> int:
    """`pobo audit`'s exit status: 2 for a violation, 3 when some frame is not verified
    against a trusted key (unsigned, or signed by a key the user does not trust) unless
    `allow_unsigned`, 4 when a transcript audited without its peer's holds no End from
    the peer (nothing then vouches for its tail: a party may have cut it, a release
    say, and rehashed) unless `allow_incomplete`, else 0."""
    if not all(r.ok for r in reports):
        return 2
    if not allow_unsigned and not all(r.signatures == "verified" for r in reports):
        print("pobo audit: not every frame verifies against a key you trust (exit 3; "
              "--allow-unsigned accepts it)", file=sys.stderr)
        return 3
    alone = [r.path for r in reports if not r.complete and not r.paired]
    if alone and not allow_incomplete:
        print(f"pobo audit: {', '.join(alone)} holds no End from its peer: alone it cannot "
              "vouch for its tail, which its party may have cut (give the peer's transcript "
              "too; exit 4; --allow-incomplete accepts it)", file=sys.stderr)
        return 4
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from pobo.html_report import write_html_report

    print(write_html_report(args.folder, args.out))
    return 0


def _cmd_runs(args: argparse.Namespace) -> int:
    from pobo.runs import list_runs, runs_json, runs_table

    entries = list_runs(args.folder)
    print(runs_json(entries) if args.json else runs_table(entries))
    return 0


def _cmd_export(args: argparse.Namespace) -> int:
    import numpy as np

    config = config_from_args(args)
    problem = build_problem(config.scenario, config.seed, **config.options)
    with open(args.out, "wb") as out:  # the name given (numpy would add .npz to a path)
        np.savez(out, X=problem.X, f=problem.f)
    print(f"wrote X {problem.X.shape} and f to {args.out} (private: keep it with the curator)")
    return 0


def _cmd_keys(args: argparse.Namespace) -> int:
    from pobo.transport.security import make_keys

    paths = make_keys(args.directory, force=args.force)
    print(f"curator: {paths['curator_secret']} (secret, stays on the curator) and "
          f"{paths['curator_public']} (public, give it to the modeler)")
    print(f"modeler: {paths['modeler_secret']} (secret, stays on the modeler) and "
          f"{paths['modeler_public']} (public, copied to {paths['allowed']}/ for the curator)")
    print(f"signing (Ed25519): {paths['curator_sign_secret']}, {paths['modeler_sign_secret']} "
          f"(secret, each stays with its party); {paths['curator_sign_public']}, "
          f"{paths['modeler_sign_public']} (public: for the peer and the auditor, "
          f"`pobo audit --keys {args.directory}`)")
    return 0


def own_signer(args: argparse.Namespace, role: str):
    """The Signer a party signs with: --sign-secret, else its key in the user's key store
    (made once), else None with --unsigned."""
    from pobo.protocol.signing import key_id, load_signing_key
    from pobo.transport.keyfiles import store_signing_key

    if args.unsigned:
        if args.sign_secret is not None:
            raise ValueError("give --sign-secret or --unsigned, not both")
        print(f"pobo {role}: warning: --unsigned: no frame is signed; an audit cannot tell "
              "an edited transcript from this run's", file=sys.stderr, flush=True)
        return None
    path = args.sign_secret or store_signing_key(role)
    signer = load_signing_key(path)
    logging.getLogger(f"pobo.{role}").debug("signing with %s (%s)", key_id(signer.public_hex),
                                           path)
    return signer


def _curve_pair(secret: Path | None, other: Path | None, what: str):
    if (secret is None) != (other is None):
        raise ValueError(f"CURVE needs both --curve-secret and --curve-{what}")
    return secret, other


PREPARING_FIRST, PREPARING_EVERY = 2.0, 10.0  # seconds to the first "preparing" line, between


@contextlib.contextmanager
def preparing(scenario: str):
    """Say that the curator prepares its dataset when that takes more than a moment
    (PREPARING_FIRST s), then every PREPARING_EVERY s until it is done (a fit can take
    minutes): the operator sees it work, and `pobo run` waits for a curator that says so
    (scenarios.launch) instead of giving up on it. On stderr: stdout's first line is the
    endpoint."""
    start, done, said = time.monotonic(), threading.Event(), []

    def tick() -> None:
        wait = PREPARING_FIRST
        while not done.wait(wait):
            print(f"pobo curator: preparing the dataset ({scenario}, "
                  f"{time.monotonic() - start:.0f} s)", file=sys.stderr, flush=True)
            said.append(True)
            wait = PREPARING_EVERY

    ticker = threading.Thread(target=tick, name="pobo-preparing", daemon=True)
    ticker.start()
    try:
        yield
    finally:
        done.set()
        ticker.join()
    if said:
        print(f"pobo curator: dataset prepared in {time.monotonic() - start:.1f} s",
              file=sys.stderr, flush=True)


def open_files_for(sessions: int) -> None:
    """Raise this process's open-file limit (soft, up to the hard one) so that
    `sessions` sessions, each with its transcript and socket, fit."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4 * sessions + 256
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY
                                                    else min(want, hard), hard))


def _cmd_curator(args: argparse.Namespace) -> int:
    from pobo.parties.journal import Journal
    from pobo.protocol.signing import load_allowed_keys
    from pobo.remote import serve_curator
    from pobo.session import Signing, new_journal_warning, prepare_service
    from pobo.transport import spin
    from pobo.transport.security import CurveServer
    from pobo.transport.sockets import check_bindable

    config = config_from_args(args)
    if args.ledger_head is not None and config.journal is None:
        raise ValueError("--ledger-head needs --journal (a ledger in memory has no head to keep)")
    if args.sessions < 0 or args.max_sessions < 0:
        raise ValueError("--sessions and --max-sessions must be >= 0")
    secret, allowed = _curve_pair(args.curve_secret, args.curve_allow, "allow")
    curve = CurveServer(secret, allowed) if secret else None
    open_files_for(args.max_sessions or DEFAULT_MAX_SESSIONS)
    signing = Signing(curator=own_signer(args, "curator"),
                      modeler_keys=load_allowed_keys(args.sign_allow) if args.sign_allow
                      else None)
    check_bindable(args.bind)  # before the journal or OUT is written: it could not serve
    writable(args.out)  # refused now, not after a modeler's Hello
    command = "run" if args.under_run else "curator"  # what the user typed
    warning = new_journal_warning(config)
    if warning is not None:
        print(f"pobo {command}: warning: {warning}", file=sys.stderr, flush=True)
    journal = Journal(config.journal, durability=config.durability) if config.journal else None
    service = None
    try:
        with preparing(config.scenario):
            service = prepare_service(config, journal=journal, head_file=args.ledger_head)
        for line in startup_warnings(config, service.problem.X.shape[0], command,  # built
                                     service.problem.preparation):
            print(f"pobo {command}: warning: {line}", file=sys.stderr, flush=True)
        result = spin.run(serve_curator(service, args.bind, args.out, sessions=args.sessions,
                                        max_sessions=args.max_sessions,
                                        max_sessions_per_key=args.max_sessions_per_key,
                                        accept_timeout=args.accept_timeout, curve=curve,
                                        insecure=args.insecure, signing=signing),
                          spin=args.spin * 1e-6)
    finally:
        if journal is not None:
            journal.close()
        elif service is not None:  # the dataset's default journal, opened by the service
            service.journal.close()
    results = result if isinstance(result, list) else [result]
    earlier = getattr(result, "earlier", None)
    if earlier:
        print(f"[curator] {sum(earlier.values())} earlier session(s), not listed: "
              + ", ".join(f"{n} {status}" for status, n in sorted(earlier.items()))
              + f" (each record: {args.out}/<session>/curator.json)", flush=True)
    if not args.under_run:  # under `pobo run`, which prints the merged summary
        for r in results:
            print("[curator] " + summary(r) + f" (peer {r['peer']})", flush=True)
    return curator_status(results, service=args.sessions == 0, earlier=earlier)


def ledger_lines(result: dict) -> str:
    """The run's ledger for a person; for a run with no DP claim (seeded, --lift paper,
    non-private), said to be nominal: the epsilons charged are what the mechanisms would
    spend, not a guarantee this run gives (a review's finding)."""
    return describe_ledger(result["ledger"], nominal_reason(result))


def curator_status(results: list[dict], service: bool, earlier: dict | None = None) -> int:
    """`pobo curator`'s exit status for its sessions' records: 1 if one failed (each named
    on standard error in one line, with its error; a service's `earlier` ones, whose
    results it no longer holds, counted) or, with a number of --sessions, none was
    served. A service (--sessions 0) is stopped by SIGINT/SIGTERM: sessions cut short
    by the stop are interrupted (resumable), which is the normal way to stop it, with or
    without a session served."""
    fine = ("ok", "interrupted") if service else ("ok",)
    failed_before = sum(n for status, n in (earlier or {}).items() if status not in fine)
    if failed_before:
        print(f"pobo curator: error: {failed_before} earlier session(s) failed (their "
              "records say why)", file=sys.stderr, flush=True)
    failed = [r for r in results if r["status"] not in fine]
    for r in failed:
        why = str(r.get("error") or "")
        if why.startswith("CancelledError"):  # (its text is empty): SIGINT/SIGTERM
            why = "the curator was stopped"
        interrupted = r["status"] == "interrupted"
        print(f"pobo curator: {'' if interrupted else 'error: '}session {r['session']} "
              f"{r['status']}{' (resumable)' if interrupted else ''}"
              + (f": {why}" if why else ""), file=sys.stderr, flush=True)
    if not results and not service:
        print("pobo curator: error: no session was served", file=sys.stderr, flush=True)
        return 1
    return 1 if failed or failed_before else 0


def creatable(folder: Path) -> None:
    """Raise OSError unless `folder` is a folder, or could be made as one and written,
    changing nothing (a run that is refused later removes the folders it made)."""
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"--out {folder} is a file, not a folder")
    parent = next((p for p in folder.absolute().parents if p.exists()), None)
    if not folder.exists() and (parent is None or not parent.is_dir()
                                or not os.access(parent, os.W_OK | os.X_OK)):
        raise PermissionError(f"--out {folder} cannot be made: {parent} is not a folder "
                              "this user may write in")


def writable(folder: Path) -> None:
    """Raise OSError unless `folder` can be created and written (before any socket)."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder):
        pass


def _cmd_ledger(args: argparse.Namespace) -> int:
    from pobo.auditing import head_file_of, journal_findings
    from pobo.parties.budget import describe_journal_ledger, journal_ledger
    from pobo.parties.checkpoints import LedgerChain
    from pobo.parties.journal import Journal
    from pobo.parties.ledger_log import LOG_KEY, LedgerLog
    from pobo.session import ledger_head_path

    head_file = args.ledger_head
    if head_file is None and ledger_head_path(args.journal).exists():
        head_file = ledger_head_path(args.journal)
    for path in [*args.transcripts, *([head_file] if head_file else [])]:
        if not path.is_file():
            raise FileNotFoundError(f"no file at {path}")
    journal = Journal(existing_journal(args.journal))
    try:
        head_file = head_file_of(journal, head_file)  # where its curator noted it, if not here
        bad = journal.bad_entries()
        problems, checked = journal_findings(journal, head_file, args.transcripts, bad)
        ledger = None if bad else journal_ledger(journal)
        log = journal.meta(LOG_KEY)  # a journal that never signed a version-6 head has none
        follower = LedgerLog(journal) if log else LedgerChain(journal)
        entries, head = follower.current() if ledger is not None else (None, None)
        root = follower.root() if log and ledger is not None else None
    finally:
        journal.close()
    chain = {"entries": entries, "head": head}  # what the curator's heads commit to
    merkle = {"entries": entries, "root": root, "log": log}  # the same, as a Merkle log
    if args.json:
        print(json.dumps({**(ledger or {}), "chain": chain, "merkle": merkle,
                          "checked": {"heads": checked, "problems": problems}}, indent=1))
    else:
        print((describe_journal_ledger(ledger) + "\n" if ledger is not None else "")
              + (f"ledger chain: {entries} entries, head {head}\n" if head else "")
              + (f"ledger Merkle log {log}: root {root}\n" if root else "")
              + (f"checked: every entry is a charge, and the journal holds all {checked} "
                 f"ledger head(s) the curator committed to (head file: {head_file or 'none'};"
                 f" transcripts: {len(args.transcripts)})"
                 + (" and every charge the transcripts prove (their LDP reports, row by "
                    "row, and releases)" if args.transcripts else "")
                 if not problems else "NOT as the curator committed to:\n" + "\n".join(
                     f"  - {p}" for p in problems)))
    return 2 if problems else 0


def _cmd_answer(args: argparse.Namespace) -> int:
    from pobo.parties.journal import Journal

    given = [a is not None for a in (args.session, args.seq, args.value)]
    if any(given) and not all(given):
        raise ValueError("give SESSION SEQ VALUE together, or none to list what is pending")
    from pobo.parties.row_order import stored_order

    journal = Journal(existing_journal(args.journal))
    try:
        if all(given):
            entered = journal.supply(args.session, args.seq, args.value)
            order = stored_order(journal)
            row = entered.row if order is None else int(order[entered.row])
            print(f"entered {args.value:g} for query {entered.seq} (data row {row}) of "
                  f"session {entered.session}; the curator releases it when it next looks")
            return 0
        print(describe_pending(journal.pending(live=True), args.json,
                               stored_order(journal)))
    finally:
        journal.close()
    return 0


def existing_journal(path: Path) -> Path:
    """`path`, if a journal is there: FileNotFoundError for nothing, ValueError for a folder
    or an empty file (opening either would make a journal of it: a command that reads one
    must not create one)."""
    if not path.exists():
        raise FileNotFoundError(f"no journal at {path}")
    wal = path.with_name(path.name + "-wal")
    if path.is_dir() or (path.stat().st_size == 0
                         and not (wal.exists() and wal.stat().st_size > 0)):
        raise ValueError(f"{path} is {'a folder' if path.is_dir() else 'an empty file'}, "
                         "not a journal")
    return path


def describe_pending(pending: list, as_json: bool = False, order=None) -> str:
    """The evaluations a curator awaits, one line each (or JSON): `row` is the data row
    to evaluate f at (the released index, which the modeler asked for, mapped through the
    curator's secret row `order`; `released_row` beside it)."""
    rows = [{"session": p.session, "seq": p.seq,
             "row": p.row if order is None else int(order[p.row]), "released_row": p.row,
             "waiting_s": round(time.time() - p.requested, 1), "entered": p.measured}
            for p in pending]
    if as_json:
        return json.dumps(rows, indent=1)
    if not rows:
        return "no evaluation is pending"
    return "\n".join(f"session {r['session']} query {r['seq']}: row {r['row']}, waiting "
                     f"{r['waiting_s']:.0f} s" + ("" if r["entered"] is None else
                                                  f", entered {r['entered']:g}")
                     for r in rows)


def _cmd_modeler(args: argparse.Namespace) -> int:
    from pobo.protocol.signing import load_verify_key
    from pobo.remote import connect_modeler
    from pobo.session import Signing
    from pobo.transport import spin
    from pobo.transport.security import CurveClient

    result = spin.run(connect_modeler(_endpoint(args), args.out, seed=args.seed,
                                      strategy=strategy_spec(args.strategy, args.moma_k,
                                                             bool(args.distinct),
                                                             bool(args.authors_code)),
                                      hyper=hyper_from_args(args),
                                      beta_scale=args.beta_scale,
                                      release=release_from_args(args),
                                      non_private=args.non_private,
                                      curve=CurveClient(*_curve_pair(
                                          args.curve_secret, args.curve_server, "server"))
                                      if args.curve_secret else None,
                                      timeout=args.timeout, resume=args.resume,
                                      verbose=args.verbose, batch=args.batch,
                                      patience=args.patience,
                                      ledger_heads=args.ledger_heads, signing=Signing(
                                          modeler=own_signer(args, "modeler"),
                                          curator_key=load_verify_key(args.curator_sign_key)
                                          if args.curator_sign_key else None)))
    print(f"[modeler] {len(result['queries'])} queries; best reward {result['best_reward']} "
          f"at row {result['best_index']}", flush=True)
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
