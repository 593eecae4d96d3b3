"""The `pobo` commands around sessions: audit (transcripts), ledger and answer (a
curator's journal), runs and report (run folders), risk (a release's risk), export-data
(a scenario's private data) and keys. Each handler imports what it runs when it runs."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from pobo.scenarios.registry import build_problem
from pobo.cli_config import SCENARIO_OPTIONS, config_from_args


def cmd_risk(args: argparse.Namespace) -> int:
    """`pobo risk`: what a release lets a modeler recover, for a scenario or a run folder."""
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


def cmd_audit(args: argparse.Namespace) -> int:
    """`pobo audit`: verify transcripts against the keys the user trusts."""
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


def cmd_report(args: argparse.Namespace) -> int:
    """`pobo report`: one HTML page about a run, a sweep or a party's folder."""
    from pobo.html_report import write_html_report

    print(write_html_report(args.folder, args.out))
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    """`pobo runs`: the runs and sweeps under a folder, one line each."""
    from pobo.runs import list_runs, runs_json, runs_table

    entries = list_runs(args.folder)
    print(runs_json(entries) if args.json else runs_table(entries))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """`pobo export-data`: the scenario's preprocessed X and f, for `pobo audit --data`."""
    import numpy as np

    config = config_from_args(args)
    problem = build_problem(config.scenario, config.seed, **config.options)
    with open(args.out, "wb") as out:  # the name given (numpy would add .npz to a path)
        np.savez(out, X=problem.X, f=problem.f)
    print(f"wrote X {problem.X.shape} and f to {args.out} (private: keep it with the curator)")
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    """`pobo keys`: CURVE and signing key pairs for a curator and a modeler."""
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


def cmd_ledger(args: argparse.Namespace) -> int:
    """`pobo ledger`: a journal's privacy ledger, checked against its signed heads (else 2)."""
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


def cmd_answer(args: argparse.Namespace) -> int:
    """`pobo answer`: enter a value a curator awaits, or list the pending ones."""
    from pobo.parties.journal import Journal

    given = [a is not None for a in (args.session, args.seq, args.value)]
    if any(given) and not all(given):
        raise ValueError("give SESSION SEQ VALUE together, or none to list what is pending")
    journal = Journal(existing_journal(args.journal))
    try:
        if all(given):
            entered = journal.supply(args.session, args.seq, args.value)
            order = session_order(journal, entered.session)
            row = entered.row if order is None else int(order[entered.row])
            print(f"entered {args.value:g} for query {entered.seq} (data row {row}) of "
                  f"session {entered.session}; the curator releases it when it next looks")
            return 0
        pending = journal.pending(live=True)
        print(describe_pending(pending, args.json, {p.session: session_order(journal, p.session)
                                                    for p in pending}))
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


def session_order(journal, session: str):
    """The secret row order of `session`'s release (released row j is data row order[j]),
    or None for a release in the data's own order: the order its curator drew with its
    randomness (its seed), as the curator's `row_order`."""
    from pobo.parties.row_order import DATA_ORDER, order_source, stored_order
    from pobo.scenarios.registry import public_inputs

    saved = journal.load(session)
    config = {} if saved is None else saved.config
    source = order_source(str(config.get("lift")), public_inputs(str(config.get("scenario")))
                          and bool(config.get("non_private")), config.get("seed"))
    return None if source == DATA_ORDER else stored_order(journal, source)


def describe_pending(pending: list, as_json: bool = False, orders: dict | None = None) -> str:
    """The evaluations a curator awaits, one line each (or JSON): `row` is the data row
    to evaluate f at (the released index, which the modeler asked for, mapped through its
    session's secret row order, `orders[session]`; `released_row` beside it)."""
    orders = orders or {}
    rows = [{"session": p.session, "seq": p.seq,
             "row": p.row if orders.get(p.session) is None else int(orders[p.session][p.row]),
             "released_row": p.row,
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
