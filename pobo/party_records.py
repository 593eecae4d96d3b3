"""What one party's folder records, for `pobo runs` and `pobo report`: a deployment
curator's session folder (curator.json), a modeler's or an ask/tell client's folder
(modeler.json), or a `pobo run` folder whose result.json was never merged (a run that
failed or was stopped). Each side is described by what that side can know: the
curator its own record (answers, ledger, privacy statement); the modeler its record and
what its transcript holds from the curator (the session's public parameters, whether
the release claims DP, the ledger head the curator signed).

A run's status is said in three words: `ok`, `failed` (with its cause) or
`interrupted` (stopped before its end: Ctrl-C, a signal, a peer that vanished; a
session interrupted so is resumable). `status_of` maps a record's own status to them.
"""
from __future__ import annotations

import json
from pathlib import Path

from pobo.runspec import CURATOR_PRIVATE

RECORDS = ("curator.json", "modeler.json")
TRANSCRIPTS = ("curator.transcript", "modeler.transcript")


def without_curator_private(record: dict) -> dict:
    """`record` without the CURATOR_PRIVATE fields (and the list naming them)."""
    return {k: v for k, v in record.items()
            if k not in CURATOR_PRIVATE and k != "curator_private"}


def status_of(record: dict) -> tuple[str, str | None]:
    """(ok | failed | interrupted, the cause or None) of a party's record or a result.json:
    a modeler's "error" is a failure; a run whose two sides disagree failed too."""
    raw = str(record.get("status") or "")
    cause = record.get("error") or None
    if raw == "ok":
        if record.get("consistent") is False:
            return "failed", "the two parties' records disagree (queries or rewards)"
        return "ok", None
    if raw in ("interrupted", "superseded"):
        return "interrupted", cause
    modeler = record.get("modeler") if isinstance(record.get("modeler"), dict) else {}
    cause = cause or modeler.get("error") or record.get("end_reason") or None
    return "failed", (str(cause) if cause else f"its record says {raw or 'no status'}")


def folder_kind(folder: Path) -> str | None:
    """run (both parties' records: a `pobo run` whose result was not merged), curator,
    modeler (an ask/tell client's folder too), or None (no party's record or
    transcript)."""
    has = {name: (folder / name).is_file() for name in (*RECORDS, *TRANSCRIPTS)}
    curator = has["curator.json"] or has["curator.transcript"]
    modeler = has["modeler.json"] or has["modeler.transcript"]
    if curator and modeler:
        return "run"
    return "curator" if curator else "modeler" if modeler else None


def read_record(path: Path) -> dict:
    """A party's JSON record; ValueError when it holds anything but an object."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def party_status(folder: Path) -> tuple[str, str | None]:
    """The status of a folder without result.json from its parties' records: failed if
    either failed, interrupted if either was, else ok; a transcript with no record is a
    party stopped before it could write one (killed): interrupted."""
    said = []
    for role in ("curator", "modeler"):
        record, transcript = folder / f"{role}.json", folder / f"{role}.transcript"
        if record.is_file():
            status, cause = status_of(read_record(record))
            said.append((status, f"{role}: {cause}" if cause else None))
        elif transcript.is_file():
            said.append(("interrupted", f"{role}: no record (its process was stopped "
                                        "before writing it)"))
    for word in ("failed", "interrupted"):
        causes = [cause for status, cause in said if status == word]
        if causes:
            return word, "; ".join(c for c in causes if c) or None
    return "ok", None


def modeler_view(transcript: Path) -> dict:
    """What a modeler's transcript shows of its session: the curator's public parameters
    (scenario, n, T, policy, randomness), the release's mechanism, epsilon and delta and
    whether it claims DP, and why not (`not_dp`); {} when there is no readable Welcome.
    Reads up to the Dataset only."""
    from pobo.protocol.codec import decode
    from pobo.protocol.messages import Dataset, Welcome
    from pobo.protocol.signing import body_of
    from pobo.protocol.transcript import read_transcript

    view: dict = {}
    try:
        for record in read_transcript(transcript):
            if record.dir != "recv" or not record.frame:
                continue
            try:
                message = decode(body_of(record.frame))
            except Exception:  # noqa: BLE001  (a frame of another kind: not ours to judge)
                continue
            if isinstance(message, Welcome):
                p = message.params
                view.update(scenario=p.scenario, n=p.n, r=p.r, T=p.T, policy=p.policy,
                            randomness=p.randomness, session=message.session)
            elif isinstance(message, Dataset) and view:
                release = message.release
                view.update(mechanism=release.mechanism, epsilon=release.epsilon,
                            delta=release.delta, dp=bool(release.dp))
                break
    except (OSError, ValueError):
        return view
    why = []
    if view.get("policy") == "non-private":
        why.append("non-private: X itself was sent")
    if view.get("randomness") == "seeded":
        why.append("seeded randomness: the noise can be recomputed")
    if view.get("dp") is False and not why:
        why.append("the release says dp: false (--lift paper)")
    if why:
        view["dp"], view["not_dp"] = False, why
    return view
