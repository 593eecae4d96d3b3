"""The `pobo` commands that run sessions: run (both parties), sweep (a grid of runs),
curator and modeler (one party each), with the lines they print and their exit status.
Each handler imports what it runs (numpy, ZeroMQ) when it runs."""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from pobo.parties.choices import strategy_spec
from pobo.protocol.ledger import describe_ledger
from pobo.launch import LaunchError, run
from pobo.runspec import nominal_reason, startup_warnings
from pobo.cli_config import (
    config_from_args, hyper_from_args, release_from_args, sweep_spec_from_args,
)

DEFAULT_MAX_SESSIONS = 1024  # sessions a curator serves at once (each costs ~35 kB, no Z)


def _endpoint(args: argparse.Namespace) -> str:
    """The curator's endpoint: --connect, or with `--connect -` the first line of the
    standard input (how `pobo run` starts its modeler before the curator has bound)."""
    if args.connect != "-":
        return args.connect
    line = args.parent.first_line() if args.parent is not None else sys.stdin.readline()
    if not line.strip():
        raise ValueError("--connect -: no endpoint on the standard input")
    return line.strip()


def cmd_run(args: argparse.Namespace) -> int:
    """`pobo run`: both parties of a session, then its summary, privacy and ledger lines."""
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


def cmd_sweep(args: argparse.Namespace) -> int:
    """`pobo sweep`: every run of the grid, then its tables and plots."""
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


def cmd_curator(args: argparse.Namespace) -> int:
    """`pobo curator`: serve the scenario's sessions at --bind; exit 1 if one failed."""
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


def cmd_modeler(args: argparse.Namespace) -> int:
    """`pobo modeler`: one session with the curator at --connect."""
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
