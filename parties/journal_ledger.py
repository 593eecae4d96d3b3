"""The journal's privacy ledger: charges checked against the budget inside their
transaction, and the totals, entries and checks that `pobo ledger` and a start read."""
from __future__ import annotations

import json
import math
import sqlite3
from collections import Counter, defaultdict

from pobo.protocol.errors import ProtocolError
from pobo.protocol.accounting import part_of, parts_counter
from pobo.protocol.ledger import (
    CENTRAL, LOCAL, Budget, Entry, ExactSum, PrivacyBudgetExceeded, local_summary,
)
from pobo.parties.journal_core import (
    JournalError, ReleaseAlreadyGranted, entry_fault,
)


class LedgerTables:
    """The privacy ledger a journal holds (a part of `parties.journal.Journal`)."""


    @staticmethod
    def _spent(cur: sqlite3.Cursor, entry: Entry) -> tuple[float, float]:
        """(eps, delta) spent so far in `entry`'s scope (central, or its row's reports):
        the exactly rounded sums of the hash-chained entries themselves (`ledger`, by
        index), never a running total a writer could have edited or let drift."""
        if entry.scope == CENTRAL:
            rows = cur.execute("SELECT epsilon, delta FROM ledger WHERE scope = ?", (CENTRAL,))
        else:
            rows = cur.execute("SELECT epsilon, delta FROM ledger WHERE row = ? AND scope = ?",
                               (entry.row, LOCAL))
        eps, dlt = ExactSum(), ExactSum()
        for e, d in rows:
            eps.add(e)
            dlt.add(d)
        return float(eps), float(dlt)

    @staticmethod
    def _parts(cur: sqlite3.Cursor, scope: str, row: int = -1) -> Counter:
        """The composition so far of the central entries, or of one row's reports, for
        the accountant: (kind, eps, delta) -> count (read only when the basic sums no
        longer fit the budget)."""
        sql = ("SELECT mechanism, epsilon, delta, COUNT(*) FROM ledger WHERE scope = ?"
               + ("" if scope == CENTRAL else " AND row = ?")
               + " GROUP BY mechanism, epsilon, delta")
        return parts_counter(cur.execute(sql, (scope,) if scope == CENTRAL else (scope, row)))

    def charge(self, session: str, entries: list[Entry], budget: Budget,
               generation: int | None = None) -> None:
        """Charge entries on their own (a release, before its noise is drawn)."""
        self._transaction([], session, entries, budget, generation)

    def charge_release(self, session: str, generation: int | None, entries: list[Entry],
                       budget: Budget, algorithm: str) -> None:
        """Charge a release and mark the session as released, in one transaction, before
        its noise is drawn: refused (ReleaseAlreadyGranted, nothing charged) when the
        session was already granted one -- by this connection, an earlier one, or before
        a restart -- and past the budget like any charge."""
        def mark() -> list[tuple[str, tuple]]:
            row = self._db.execute("SELECT release FROM sessions WHERE id = ?",
                                   (session,)).fetchone()
            if row is not None and row[0] is not None:
                raise ReleaseAlreadyGranted(session)
            if math.isfinite(budget.releases):
                (granted,) = self._db.execute(
                    "SELECT COUNT(*) FROM sessions WHERE release IS NOT NULL").fetchone()
                if granted >= budget.releases:
                    raise PrivacyBudgetExceeded(
                        f"the dataset's budget admits {int(budget.releases)} release(s) of a "
                        f"result, and {granted} was granted already (over every session and "
                        "restart): refused at any (eps, delta)")
            return [("UPDATE sessions SET release = ? WHERE id = ?",
                     (json.dumps({"algorithm": algorithm, "state": "charged"}), session))]

        mark()  # said first, before the budget's refusal; checked again in the transaction
        self._transaction(mark, session, entries, budget, generation)

    def record_release(self, session: str, generation: int, release: dict) -> None:
        """The release a session was granted."""
        self._transaction([("UPDATE sessions SET release = ? WHERE id = ?",
                            (json.dumps(release), session))], session, generation=generation)

    # -- the ledger ---------------------------------------------------------------------

    def entries(self, session: str | None = None, scope: str | None = None) -> list[Entry]:
        """Ledger entries, oldest first: all, or one session's, or one scope's."""
        sql, args = "SELECT mechanism, epsilon, delta, scope, row FROM ledger", []
        where = [(c, v) for c, v in (("session", session), ("scope", scope)) if v is not None]
        if where:
            sql += " WHERE " + " AND ".join(f"{c} = ?" for c, _ in where)
            args = [v for _, v in where]
        return [Entry(*r) for r in self._db.execute(sql + " ORDER BY n", args)]

    def ledger_rows(self, after: int = 0, limit: int = -1) -> list[tuple]:
        """The ledger entries numbered past `after` (at most `limit`; -1: all), in journal
        order, as (n, session, mechanism, epsilon, delta, scope, row, time): what the
        ledger's hash chain covers."""
        return self._db.execute(
            "SELECT n, session, mechanism, epsilon, delta, scope, row, time FROM ledger "
            "WHERE n > ? ORDER BY n LIMIT ?", (after, limit)).fetchall()

    def bad_entries(self, limit: int = 3) -> list[str]:
        """Why ledger entries are not charges any mechanism makes, one line each (at most
        `limit`; empty: none): epsilon not a finite number >= 0, delta not in [0, 1), a
        scope other than central or local, a local entry with no row. Such an entry (an
        edit, say a negative epsilon that refunds a row's budget) would let the budget
        check pass what it must refuse. O(the entries): once when a curator starts, and in
        `pobo ledger`."""
        out = []
        for n, e, d, scope, row in self._db.execute(
                "SELECT n, epsilon, delta, scope, row FROM ledger ORDER BY n"):
            why = entry_fault(e, d, scope, row)
            if why is not None:
                out.append(f"{self.path}: ledger entry n={n} has {why}: the journal was "
                           "edited")
                if len(out) >= limit:
                    break
        return out

    def uncharged_answers(self, limit: int = 3) -> list[str]:
        """Why the ledger does not hold a local charge for every answer (and every charged
        reservation) of a session whose Welcome announced LDP rewards, one line per row
        short of them (at most `limit`; empty: it does): entries taken out after the last
        head kept (a curator killed before its session's end keeps none) leave answers
        with no charge, which the journal itself shows (a review). O(the answers), once
        when a curator starts, and in `pobo ledger`."""
        from pobo.protocol.codec import decode
        from pobo.protocol.policy import LDP_REWARD

        out: list[str] = []
        for session, welcome in self._db.execute("SELECT id, welcome FROM sessions "
                                                 "ORDER BY ordinal").fetchall():
            if isinstance(welcome, bytes) and LDP_REWARD.encode() not in welcome:
                continue  # no LDP mechanism named in it: not decoded (a service's many)
            try:
                ldp = any(m.name == LDP_REWARD for m in decode(welcome).params.mechanisms)
            except (ProtocolError, AttributeError, ValueError) as exc:
                out.append(f"{self.path}: session {session[:12]}'s welcome cannot be read "
                           f"({exc}): the journal was edited")
                continue
            if not ldp:
                continue
            for row, asked, charged in self._db.execute(
                    "SELECT a.row, a.n, COALESCE(c.n, 0) FROM (SELECT row, COUNT(*) AS n "
                    "FROM (SELECT row FROM answers WHERE session = ? UNION ALL SELECT row "
                    "FROM pending WHERE session = ?) GROUP BY row) AS a LEFT JOIN (SELECT "
                    "row, COUNT(*) AS n FROM ledger WHERE scope = ? AND session = ? GROUP BY "
                    "row) AS c ON a.row = c.row WHERE COALESCE(c.n, 0) < a.n ORDER BY a.row",
                    (session, session, LOCAL, session)):
                out.append(f"{self.path}: session {session[:12]} answered row {row} {asked} "
                           f"time(s) with LDP rewards; its ledger holds {charged} charge(s) "
                           "on that row: entries were taken out")
                if len(out) >= limit:
                    return out
        return out

    def check_row_totals(self) -> None:
        """Raise JournalError unless the per-row running totals (`row_ledger`, which picks
        the worst-off row for a ledger head) agree with the hash-chained entries: a total
        edited down on disk would let that row's reports past its budget unnoticed. O(the
        local entries), once when a curator starts. (The budget itself is always checked
        against the entries: `_spent`.) A journal in memory has no other writer."""
        if self.path == ":memory:":
            return
        held = {r: (e, d, n) for r, e, d, n in self._db.execute(
            "SELECT row, epsilon, delta, reports FROM row_ledger")}
        sums: dict[int, list] = {}
        for r, e, d in self._db.execute("SELECT row, epsilon, delta FROM ledger "
                                        "WHERE scope = ?", (LOCAL,)):
            acc = sums.get(r)
            if acc is None:
                acc = sums[r] = [ExactSum(), ExactSum(), 0]
            acc[0].add(e)
            acc[1].add(d)
            acc[2] += 1
        for r in held.keys() | sums.keys():
            e, d, n = held.get(r, (0.0, 0.0, 0))
            acc = sums.get(r, (ExactSum(), ExactSum(), 0))
            exact = (float(acc[0]), float(acc[1]))
            if n != acc[2] or any(abs(a - b) > 1e-9 * max(1.0, abs(b))  # a running float
                                  for a, b in zip((e, d), exact)):  # sum's drift, no more
                raise JournalError(
                    f"{self.path}: row {r}'s running totals ({n} reports, eps {e:g}, delta "
                    f"{d:g}) disagree with its ledger entries ({acc[2]} reports, eps "
                    f"{exact[0]:g}, delta {exact[1]:g}): the journal was edited; refusing "
                    "to start on it")

    def basic_totals(self) -> dict:
        """The ledger's basic-composition totals (no accountant), exactly summed from the
        entries: central (epsilon, delta) and the worst-off row's local (epsilon, delta),
        in the layout a ledger head commits to (protocol.checkpoint.ledger_head)."""
        eps, dlt = self.central_spent()
        top = self._db.execute("SELECT row FROM row_ledger ORDER BY epsilon DESC, delta DESC "
                               "LIMIT 1").fetchone()  # the worst-off row (checked at start)
        row = (0.0, 0.0) if top is None else self.row_spent(top[0])
        return {"central": {"epsilon_basic": eps, "delta_basic": dlt},
                "local": {"max_row_epsilon_basic": row[0], "max_row_delta_basic": row[1]}}

    def central_entries(self) -> list[dict]:
        """Every central entry with its session and time, oldest first."""
        return [{"mechanism": m, "epsilon": e, "delta": d, "scope": CENTRAL, "session": s,
                 "time": t} for m, e, d, s, t in self._db.execute(
                    "SELECT mechanism, epsilon, delta, session, time FROM ledger WHERE scope = ? "
                    "ORDER BY n", (CENTRAL,))]

    def central_parts(self) -> Counter:
        """The central entries so far, (kind, eps, delta) -> count."""
        return self._parts(self._db.cursor(), CENTRAL)

    def central_spent(self) -> tuple[float, float]:
        """(eps, delta) of the central entries so far, over all sessions (exact sums)."""
        return self._spent(self._db.cursor(), Entry("", 0.0, 0.0, CENTRAL))

    def row_spent(self, row: int) -> tuple[float, float]:
        """(eps, delta) of the LDP reports on one row so far, over all sessions."""
        return self._spent(self._db.cursor(), Entry("", 0.0, 0.0, LOCAL, row))

    def row_parts(self, row: int) -> Counter:
        """One row's reports so far, (kind, eps, delta) -> count, over all sessions."""
        return self._parts(self._db.cursor(), LOCAL, row)

    def local_summary(self, budget: Budget = Budget()) -> dict:
        """Reports, rows with any, and the worst-off row over all sessions (one pass over
        the local entries: each row's composition for the accountant)."""
        rows: dict[int, Counter] = defaultdict(Counter)
        counts: dict[int, int] = defaultdict(int)
        for row, mechanism, eps, dlt, count in self._db.execute(
                "SELECT row, mechanism, epsilon, delta, COUNT(*) FROM ledger WHERE scope = ? "
                "GROUP BY row, mechanism, epsilon, delta", (LOCAL,)):
            rows[row][part_of(mechanism, eps, dlt)] += int(count)
            counts[row] += int(count)
        return local_summary(sum(counts.values()), rows, budget, counts)
