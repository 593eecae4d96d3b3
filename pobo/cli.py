"""The `pobo` command line: run a whole session, or one party of it, from a scenario.

  pobo run SCENARIO [options]          curator + modeler as two processes (tcp by default)
  pobo curator SCENARIO --bind EP      the curator alone (separate machines)
  pobo modeler --connect EP            the modeler alone
  pobo sweep [SCENARIO] [--preset P]   a grid of runs, with tables and plots
  pobo runs [DIR]                      the runs and sweeps under DIR, one line each
  pobo answer --journal DB [SESSION SEQ VALUE]   enter (or list) values awaited on demand

Every command is a thin wrapper over a documented Python call (scenarios.launch.run,
scenarios.remote.serve_curator, scenarios.remote.connect_modeler, scenarios.runs.list_runs).
Here: main and the parser; its argument groups and types are in pobo.cli_args, what the
options describe (RunConfig, SweepSpec) in pobo.cli_config, the handlers in
pobo.cli_sessions (run, sweep, curator, modeler) and pobo.cli_records (the others).
"""
from __future__ import annotations

import argparse
import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

# What the parser needs, importable without numpy; every handler imports what it runs,
# so that `pobo --help` and the parent of `pobo run` start no numerical code.
from pobo.parties.choices import DEFAULT_LIFT, FIT_MODES, LIFT_MODES, STRATEGIES
from pobo import __version__
from pobo.protocol.errors import PoboError
from pobo.launch import PARENT_PIPE, TRANSPORTS
from pobo.scenarios.presets import PRESETS
from pobo.config import CONFIGURABLE, apply_config, check_required
from pobo.progress import configure_logging
from pobo.cli_args import (
    Parser, at_least_two, authors_code_argument, beta_scale, count, distinct_argument,
    durability_argument, ldp_synthetic_arguments, log_epsilon, modeler_arguments, moma_k_value,
    non_negative, output_arguments, positive, positive_int, risk_argument, scenario_arg,
    scenario_arguments, scenario_or_run, spin_argument, table_arguments,
)
from pobo.cli_config import config_from_args, sweep_spec_from_args
from pobo.cli_records import (
    cmd_answer, cmd_audit, cmd_export, cmd_keys, cmd_ledger, cmd_report, cmd_risk, cmd_runs,
)
from pobo.cli_sessions import (
    DEFAULT_MAX_SESSIONS, cmd_curator, cmd_modeler, cmd_run, cmd_sweep, summary,
)

# what Python callers take from here (config_from_args, sweep_spec_from_args: pobo.cli_config's)
__all__ = ["main", "build_parser", "config_from_args", "sweep_spec_from_args"]

NEEDED = {"run": ("scenario",), "curator": ("scenario",), "modeler": ("connect",),
          "sweep": (), "export-data": ("scenario",),
          "risk": ("scenario",)}  # what a command needs from its flags or its --config


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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every pobo subcommand."""
    parser = Parser(prog="pobo", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"pobo {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    parser.subcommands = sub.choices  # name -> its parser (for --config)

    p = sub.add_parser("run", help="run curator and modeler of a scenario end to end")
    scenario_arguments(p, default_seed=0)
    output_arguments(p, "-v: every answer line, no bar")
    modeler_arguments(p)
    authors_code_argument(p, "both sides")
    p.add_argument("--transport", choices=TRANSPORTS, default="tcp",
                   help="tcp/ipc: two OS processes over loopback; inproc: one process")
    p.add_argument("--out", type=Path, help="output folder (default runs/SCENARIO-TIME)")
    p.add_argument("--curve", type=Path, metavar="DIR",
                   help="encrypt and authenticate with CURVE keys from DIR (made if missing)")
    p.add_argument("--journal", type=Path,
                   help="the curator's SQLite journal (default: in memory; with "
                        "--objective-wait: OUT/curator.journal)")
    durability_argument(p)
    spin_argument(p, "each party's event loop (tcp, ipc; inproc has no wait to poll)")
    p.add_argument("--max-batch", type=positive_int,
                   help="the most queries the curator lets the modeler keep outstanding "
                        "(default: --batch)")
    risk_argument(p, "after the run, measure")
    p.set_defaults(handler=cmd_run)

    p = sub.add_parser("sweep", help="run every combination of eps, r, strategy and seed")
    output_arguments(p, "-v: a line per run, no bar")
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
    authors_code_argument(p, "every run")
    p.add_argument("--grid", type=positive_int, help="synthetic, branin: grid side")
    p.add_argument("--data", help="hospital, bank, realestate: the public CSV")
    p.add_argument("--n", type=positive_int, help="hospital, bank, realestate: use n random rows")
    p.add_argument("--prep", choices=("default", "paper"),
                   help="bank, realestate: the paper's preparation (the presets pass it)")
    table_arguments(p)
    ldp_synthetic_arguments(p)
    p.add_argument("--ldp-eps", type=positive, nargs="+",
                   help="make every reward eps-LDP (CTL Laplace); several values are swept")
    p.add_argument("--beta-scales", type=beta_scale, nargs="+",
                   help="exploration scales S to sweep (default: each strategy's default)")
    distinct_argument(p, "; a paper --preset: off, as the paper's GP-UCB")
    p.add_argument("--moma-k", type=moma_k_value, nargs="+", metavar="K",
                   help="moma-gp-ucb epoch lengths to sweep (default: the theorem's k)")
    p.add_argument("--kernel", choices=("se", "ard-se", "matern52", "ard-matern52"))
    p.add_argument("--fit", choices=FIT_MODES, default="auto")
    p.add_argument("--n-init", type=at_least_two, default=5)
    p.add_argument("--fit-every", type=positive_int, default=10)
    p.add_argument("--fit-hold", type=at_least_two, default=20)
    p.add_argument("--restarts", type=count, default=3)
    p.add_argument("--out", type=Path, help="output folder (default runs/sweep-NAME)")
    risk_argument(p, "for every release swept, measure (the frontier preset: K = 20)")
    p.set_defaults(handler=cmd_sweep)

    p = sub.add_parser("risk", help="measure what a modeler could learn about rows from a "
                                    "release: recovery per feature against the marginals")
    scenario_arguments(p, default_seed=0)
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
    p.set_defaults(handler=cmd_risk)

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
    p.set_defaults(handler=cmd_audit)

    p = sub.add_parser("report", help="write one self-contained HTML page about a run, a "
                                      "sweep or a deployment's curator or modeler folder: "
                                      "answer, privacy, ledger, audit, curves")
    p.add_argument("folder", type=Path, metavar="RUN_OR_SWEEP_DIR",
                   help="a run folder (result.json), a sweep folder (runs.csv), or a "
                        "curator's session or a modeler's folder (curator.json, "
                        "modeler.json)")
    p.add_argument("--out", type=Path, metavar="FILE",
                   help="where to write the page (default RUN_OR_SWEEP_DIR/report.html)")
    p.set_defaults(handler=cmd_report)

    p = sub.add_parser("runs", help="list the runs and sweeps under a folder, oldest first: "
                                    "scenario, time, status, policy, ε spent, result")
    p.add_argument("folder", type=Path, nargs="?", default=Path("runs"), metavar="DIR",
                   help="where to look (default ./runs), down to 4 levels: a folder with "
                        "result.json is a run, one with runs.csv a sweep (its runs/ are "
                        "summarised on its line, not listed), one with a party's record a "
                        "deployment's curator or modeler (or a run not merged); STATUS is "
                        "ok, failed or interrupted; TIME is when its record was written")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(handler=cmd_runs)

    p = sub.add_parser("export-data", help="write a scenario's preprocessed X and f (.npz), "
                                           "the curator's private data, for `pobo audit --data`")
    scenario_arguments(p, default_seed=0)
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(handler=cmd_export)

    p = sub.add_parser("curator", help="run the curator alone, bound to an endpoint")
    scenario_arguments(p, default_seed=None)
    authors_code_argument(p, "the curator's part: the sigma + omega lift")
    distinct_argument(p, "; the rule every session's Welcome carries")
    output_arguments(p, "-v: every answer line, no bar")
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
    durability_argument(p)
    spin_argument(p)
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
    p.set_defaults(handler=cmd_curator)

    p = sub.add_parser("answer", help="enter the value of an evaluation a curator awaits "
                                      "(--objective-wait), or list the ones pending")
    p.add_argument("--journal", type=Path, required=True, help="the curator's SQLite journal")
    p.add_argument("session", nargs="?", help="the session id (as `--list` prints it)")
    p.add_argument("seq", nargs="?", type=positive_int, help="the query's sequence number")
    p.add_argument("value", nargs="?", type=float, help="the measured value of f at its row")
    p.add_argument("--list", action="store_true",
                   help="list the pending evaluations (the default without SESSION SEQ VALUE)")
    p.add_argument("--json", action="store_true", help="list them as JSON")
    p.set_defaults(handler=cmd_answer)

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
    p.set_defaults(handler=cmd_ledger)

    p = sub.add_parser("keys", help="make CURVE and Ed25519 signing key pairs for a curator "
                                    "and a modeler")
    p.add_argument("directory", type=Path)
    p.add_argument("--force", action="store_true",
                   help="overwrite key pairs already in DIRECTORY")
    p.set_defaults(handler=cmd_keys)

    p = sub.add_parser("modeler", help="run the modeler alone, connected to a curator")
    p.add_argument("--config", type=Path, metavar="FILE.toml",
                   help="read settings from a TOML file (every flag as a key; a [modeler] "
                        "table for this command); flags given here override it")
    p.add_argument("--connect", help="the curator's endpoint (required; '-': the first line "
                                      "of the standard input)")
    p.add_argument("--seed", type=count, default=None, help="modeler seed (default: OS entropy)")
    modeler_arguments(p)
    authors_code_argument(p, "the modeler's part: GP-UCB's mean + beta_{t-1}^1/2 variance, "
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
    spin_argument(p)
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
    output_arguments(p, "-v: one line per query")
    p.set_defaults(handler=cmd_modeler)
    return parser


if __name__ == "__main__":
    sys.exit(main())
