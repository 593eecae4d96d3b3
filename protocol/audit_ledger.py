"""The audit's ledger and budget checks: the ledger recomputed from a transcript's
handshake and messages, the ledger heads the curator signed in its Welcomes and Ends
(`checkpoints`), what the session's own messages prove it charged (`session_charges`,
`charged_floors`), heads that commit to less (`undercharged`, `unannounced_charges`), and
changes of the dataset's budget between sessions (`budget_changes`)."""
from __future__ import annotations

import math

from pobo.protocol.audit_records import role_of_messages
from pobo.protocol.checkpoint import Checkpoint, charged_floor
from pobo.protocol.ledger import CENTRAL, LOCAL, Entry, Ledger
from pobo.protocol.messages import NO_LEDGER_HEAD, End, Hello, Release, Reward, Welcome
from pobo.protocol.policy import CURATOR, LDP_REWARD

RELEASE_COST = {"noisy": 2, "noise-free": 1, "lipschitz": 1}


def budget_of(params) -> dict:
    """The dataset's budget a Welcome announces, and the ledger's size then (its head's
    entries): what `pobo audit` compares across sessions to show a raise."""
    return {"central": (params.budget_epsilon, params.budget_delta),
            "row": (params.row_budget_epsilon, params.row_budget_delta),
            "releases": params.budget_releases}


def budget_changes(reports: list) -> list[str]:
    """One note per change of the dataset's budget between the sessions of `reports`, in
    the order of their Welcome's ledger head, then its time (a raise is --raise-budget,
    recorded in the curator's journal: `pobo ledger` shows its history)."""
    seen = sorted(((r.checkpoints[0].head.entries if r.checkpoints else 0,
                    r.checkpoints[0].time if r.checkpoints else 0.0, r.session or "",
                    r.budget) for r in reports if r.budget is not None), key=lambda t: t[:2])
    out, last = [], None
    for entries, _, session, budget in seen:
        if last is not None and budget != last[2]:
            raised = any(b > a for a, b in zip((*last[2]["central"], *last[2]["row"]),
                                               (*budget["central"], *budget["row"]))) or (
                budget["releases"] == -1 and last[2]["releases"] != -1) or (
                last[2]["releases"] != -1 and budget["releases"] > last[2]["releases"])
            out.append(f"the dataset's budget {'was RAISED' if raised else 'changed'} between "
                       f"session {last[1][:12]} (ledger of {last[0]} entries) and session "
                       f"{session[:12]} ({entries}): {_budget_text(last[2])} -> "
                       f"{_budget_text(budget)} (a raise needs --raise-budget; `pobo ledger` "
                       "shows the journal's budget history)")
        last = (entries, session, budget)
    return out


def _budget_text(budget: dict) -> str:
    (eps, dlt), (row, _), releases = budget["central"], budget["row"], budget["releases"]
    return (f"central ({eps:g}, {dlt:g})" + (f", row {row:g}" if row else "")
            + ("" if releases < 0 else f", {releases} release(s)"))


def checkpoints(messages: list, role: str, path: str) -> list[Checkpoint]:
    """The ledger heads the curator's Welcomes and Ends carry in a transcript, in order."""
    by_curator = "sent" if role == CURATOR else "recv"
    session, opened, out = "", 0.0, []
    hello, welcomed = None, NO_LEDGER_HEAD  # the connection's Hello and Welcome's head
    for r, m in messages:
        if r.kind == "hello":  # a connection opens: the heads it carries are computed later
            opened, hello, welcomed = r.time, m, NO_LEDGER_HEAD
        if isinstance(m, Welcome):
            session = m.session
        if (isinstance(m, (Welcome, End)) and r.dir == by_curator
                and m.ledger != NO_LEDGER_HEAD):
            start = _proof_start(m, hello, welcomed)  # version 6: where its proof starts
            out.append(Checkpoint(session, r.kind, r.time, m.ledger, path, r.seq, opened,
                                  start, m.consistency))
            if isinstance(m, Welcome):
                welcomed = m.ledger
    return out


def _proof_start(message: Welcome | End, hello, welcomed) -> int:
    """The ledger size a Welcome's or End's consistency proof starts from: the head its
    connection's Hello named, or its Welcome's (-1: none of this log)."""
    if isinstance(message, Welcome):
        named = isinstance(hello, Hello) and hello.ledger_log == message.ledger.log
        return hello.ledger_seen if named and hello.ledger_seen else -1
    return welcomed.entries if welcomed.log and welcomed.log == message.ledger.log else -1


def charged_floors(messages: list, role: str, heads: list[Checkpoint]) -> list[Checkpoint]:
    """For a fresh session (its Hello resumes nothing), what its transcript proves the
    curator's ledger held: its Welcome's head count plus one entry per LDP report
    (a Reward with noise, each seq once) the curator sent, by the last of them
    (protocol.checkpoint.charged_floor). A resumed connection proves nothing this way:
    its rewards may be resends of answers charged before."""
    welcome = next((c for c in heads if c.kind == "welcome"), None)
    hello = next((m for _, m in messages if isinstance(m, Hello)), None)
    if welcome is None or hello is None or hello.resume:
        return []
    by_curator = "sent" if role == CURATOR else "recv"
    seqs, last = set(), None
    for r, m in messages:
        if isinstance(m, Reward) and r.dir == by_curator and m.noise and m.seq not in seqs:
            seqs.add(m.seq)
            last = Checkpoint(welcome.session, "reward", r.time, welcome.head,
                              welcome.path, r.seq, welcome.opened)
    return [] if last is None else [charged_floor(welcome, len(seqs), last)]


def recompute_ledger(messages: list, welcome: Welcome) -> Ledger:
    """The ledger implied by the handshake's mechanisms and the messages that crossed."""
    ledger = Ledger()
    for mech in welcome.params.mechanisms:
        if mech.name != LDP_REWARD:
            ledger.charge(Entry(mech.name, mech.epsilon, mech.delta, CENTRAL))
    for entry in session_charges(messages, welcome):
        ledger.charge(entry)
    return ledger


def session_charges(messages: list, welcome: Welcome) -> list[Entry]:
    """The entries the session's own messages prove the curator charged, in order: one
    LDP report per Reward with noise it sent (each seq once: an idempotent resend of a
    reward is not a new report) and its Release (once: a session is granted one)."""
    ldp = next((m for m in welcome.params.mechanisms if m.name == LDP_REWARD), None)
    by_curator = "sent" if role_of_messages(messages) == CURATOR else "recv"
    seen: set[int] = set()
    released: set[tuple] = set()
    out = []
    for r, m in messages:
        if r.dir != by_curator:
            continue
        if isinstance(m, Reward) and ldp is not None and m.seq not in seen:
            seen.add(m.seq)
            out.append(Entry(LDP_REWARD, ldp.epsilon, ldp.delta, LOCAL, m.index))
        elif isinstance(m, Release) and (m.algorithm, m.epsilon, m.delta) not in released:
            released.add((m.algorithm, m.epsilon, m.delta))
            k = RELEASE_COST.get(m.algorithm, 1)
            out.append(Entry(f"release:{m.algorithm}", k * m.epsilon, k * m.delta))
    return out


def unannounced_charges(welcome: Welcome, heads: list[Checkpoint]) -> list[str]:
    """Why a ledger head the curator signed does not hold the central mechanisms its
    Welcome announces as in force (the dataset's release, a lift test): fewer entries
    than there are of them, or central totals below their sums (a review's attack: a
    curator that never charged the projection signed heads of 0 entries, and passed)."""
    central = [m for m in welcome.params.mechanisms if m.name != LDP_REWARD]
    if not central:
        return []
    need = {"entries": len(central),
            "central epsilon": math.fsum(m.epsilon for m in central),
            "central delta": math.fsum(m.delta for m in central)}
    out = []
    for c in heads:
        held = {"entries": c.head.entries, "central epsilon": c.head.central_epsilon,
                "central delta": c.head.central_delta}
        short = [what for what, v in need.items() if held[what] < v - 1e-9 * abs(v)]
        if short:
            out.append(f"record {c.record}: the curator's ledger head in its {c.kind} commits "
                       f"to {short[0]} {held[short[0]]:.12g}, less than the "
                       f"{need[short[0]]:.12g} of the mechanisms its Welcome announces "
                       f"({', '.join(m.name for m in central)}): the release was not "
                       "charged to the curator's ledger")
            break
    return out


def undercharged(messages: list, welcome: Welcome, heads: list[Checkpoint]) -> list[str]:
    """Why the curator's closing ledger head commits to less than the session's own
    messages prove it charged since its first Welcome (empty: it does not): fewer
    entries than that Welcome's count plus the session's charges (`session_charges`),
    central totals below that Welcome's plus its releases', or a worst-off row's totals
    below the worst of the rows its LDP reports went to. A signed End under-charging is
    a curator that did not journal what it released. Only for a transcript that starts
    the session (its first Hello resumes nothing), whose first Welcome carries a head.
    Every head, in any transcript, must also hold the central mechanisms the Welcome
    announces (the dataset's release, charged once before any session sees it):
    `unannounced_charges`."""
    out = unannounced_charges(welcome, heads)
    hello = next((m for _, m in messages if isinstance(m, Hello)), None)
    first = next((c for c in heads if c.kind == "welcome"), None)
    if hello is None or hello.resume or first is None:
        return out
    charges = session_charges(messages, welcome)
    central = [e for e in charges if e.scope == CENTRAL]
    rows: dict[int, list[Entry]] = {}
    for e in charges:
        if e.scope == LOCAL:
            rows.setdefault(e.row, []).append(e)
    w = first.head
    # the worst-off row of a head is the row of the largest (epsilon, delta) pair: at
    # least the Welcome's, and at least each row this session reported on
    worst = max([(w.max_row_epsilon, w.max_row_delta), *(
        (math.fsum(e.epsilon for e in es), math.fsum(e.delta for e in es))
        for es in rows.values())])
    floor = {  # what the head must reach; plain sums, compared with a relative 1e-9 slack
        "entries": w.entries + len(charges),
        "central epsilon": math.fsum([w.central_epsilon, *(e.epsilon for e in central)]),
        "central delta": math.fsum([w.central_delta, *(e.delta for e in central)]),
        "worst-off row epsilon": worst[0],
        "worst-off row delta": worst[1],
    }
    for end in (c for c in heads if c.kind == "end"):
        h = end.head
        held = {"entries": h.entries, "central epsilon": h.central_epsilon,
                "central delta": h.central_delta, "worst-off row epsilon": h.max_row_epsilon,
                "worst-off row delta": h.max_row_delta}
        for what, need in floor.items():
            if what == "worst-off row delta" and h.max_row_epsilon > worst[0] * (1 + 1e-9):
                continue  # a row with more epsilon is the worst off: its delta may be less
            if held[what] < need - 1e-9 * abs(need):
                out.append(f"record {end.record}: the curator's closing ledger head commits "
                           f"to {what} {held[what]:.12g}, less than the {need:.12g} its "
                           f"first Welcome's head (record {first.record}) and this "
                           f"session's {len(charges)} charges prove: charges were left out "
                           "of the curator's ledger")
                break
    return out
