"""The order the curator releases its rows in: a secret permutation (issue 46 item 2).

A dataset file is often sorted (sg-private-projects.csv by district, so a row's position
says roughly where a project is and what it costs). Released in file order, the row index
alone would cross the boundary outside every mechanism. So the curator releases row
`order[j]` of its data as released row j, `order` a uniformly random permutation drawn
from the OS CSPRNG (a seeded Generator in simulation). The modeler's indices name
released rows; the curator maps one to its data row only where f is evaluated (the
tabulated f is held in released order, an on-demand objective gets the data row), so
transcripts, the journal's answers and the per-row ledger are all in released indices.

One order per dataset and randomness, kept in the journal (meta `row_order:<randomness>`,
so that a seeded start on a deployed curator's journal leaves its order alone): every
projection of the dataset, every restart and every session use the same one, so a
released index names the same data row wherever it appears (the per-row LDP budget
stays per data row). The order never crosses the boundary.
"""
from __future__ import annotations

import base64
import json

import numpy as np

from pobo.parties.noise import NoiseSource

ROW_ORDER_META = "row_order"


def keeps_data_order(lift: str, inputs_public: bool = False) -> bool:
    """Whether a release keeps its rows in the data's order: public inputs (a public grid,
    the tuning candidates: the modeler knows every row, so their order hides nothing),
    and the paper's Algorithm 1 as published (`--lift paper`, which makes no DP claim and
    reproduces the paper's tables: its trajectories, and the committed fidelity CSVs,
    depend on which row is which index)."""
    return lift == "paper" or inputs_public


def draw_order(n: int, source: NoiseSource) -> np.ndarray:
    """A uniformly random permutation of range(n): the data rows in the order of 128
    random bits each (from `source`: the OS CSPRNG or a seeded Generator; a tie, of
    probability < n^2 / 2^129, would keep two rows in file order)."""
    keys = np.frombuffer(source.random_bytes(16 * n), dtype=np.uint64).reshape(n, 2)
    return np.lexsort((keys[:, 1], keys[:, 0])).astype(np.int64)


def encode_order(order: np.ndarray, randomness: str) -> str:
    """The order as journal text: its randomness (a deployed curator never serves a
    seeded run's order) and the permutation, little-endian int64, base64."""
    return json.dumps({"randomness": randomness, "n": int(order.size),
                       "order": base64.b64encode(order.astype("<i8").tobytes()).decode()})


def decode_order(text: str) -> tuple[str, np.ndarray]:
    """(randomness, order) from `encode_order`'s text; ValueError unless a permutation."""
    data = json.loads(text)
    order = np.frombuffer(base64.b64decode(data["order"]), dtype="<i8").astype(np.int64)
    if order.size != int(data["n"]) or not np.array_equal(np.sort(order),
                                                          np.arange(order.size)):
        raise ValueError("the journal's row order is not a permutation of its rows")
    return str(data["randomness"]), order


def order_key(randomness: str) -> str:
    """The journal meta key of the order drawn with `randomness`."""
    return f"{ROW_ORDER_META}:{randomness}"


def stored_order(journal, randomness: str) -> np.ndarray | None:
    """The order the journal holds for `randomness`, or None: under its own key, or under
    `row_order` (one order a journal, before each randomness kept its own) if drawn
    with it."""
    for key in (order_key(randomness), ROW_ORDER_META):
        held = journal.meta(key)
        if held is not None:
            kind, order = decode_order(held)
            if kind == randomness:
                return order
    return None


def row_order(journal, n: int, randomness: str, source: NoiseSource) -> np.ndarray:
    """The dataset's release order: the journal's, when it holds one for `n` rows drawn
    with this `randomness`, else drawn from `source` and kept in the journal (beside the
    orders of other randomness: a seeded start never replaces a deployed one's)."""
    order = stored_order(journal, randomness)
    if order is not None and order.size == n:
        return order
    order = draw_order(n, source)
    journal.set_meta(order_key(randomness), encode_order(order, randomness))
    return order


def randomness_id(seed: int | None) -> str:
    """Which randomness a curator with `seed` draws from: 'os-csprng', or 'seeded:' +
    SHA-256 of the seed (a deployed curator never serves a seeded run's order or Z)."""
    import hashlib

    from pobo.parties.noise import SECURE, SEEDED
    if seed is None:
        return SECURE
    return f"{SEEDED}:{hashlib.sha256(str(int(seed)).encode()).hexdigest()}"


DATA_ORDER = "data"  # `order_source` of a release kept in the data's own order


def order_source(lift: str, inputs_public: bool, seed: int | None) -> str:
    """Which row order a curator with these settings serves: DATA_ORDER
    (`keeps_data_order`), or the randomness its secret order is drawn with (the journal
    key of that order). Two curators serve a session alike exactly when these agree."""
    return DATA_ORDER if keeps_data_order(lift, inputs_public) else randomness_id(seed)


def in_release_order(release, order: np.ndarray):
    """The release with its rows in the secret order: released row j is Z[order[j]]."""
    from dataclasses import replace
    return replace(release, Z=np.asarray(release.Z)[order])


def permute_rows(Z: np.ndarray, order: np.ndarray, parts: int = 4) -> None:
    """Put Z's rows in `order` in place (row j becomes the old row order[j]): the values
    of Z[order] bit for bit, a block of about r / `parts` columns at a time, so the
    scratch is ~Z / `parts` where Z[order] holds a second Z beside the first (1.6 GB at
    n = 1e7: docs/performance.md, "Ten million candidates"). Z must be writeable."""
    r = Z.shape[1]
    width = max(1, -(-r // max(1, int(parts))))
    for start in range(0, r, width):
        block = Z[:, start:start + width]
        block[...] = block[order]  # (np.take would copy the strided block first)


def in_data_order(release, order: np.ndarray):
    """A release in the secret order put back in the data's order (what the curator, who
    holds `order`, measures a release's risk on: a modeler who located every row)."""
    return in_release_order(release, np.argsort(order))


def seeded_order(n: int, seed: int) -> np.ndarray:
    """The order a curator seeded with `seed` releases n rows in (simulation only: the
    seed gives it away, as it gives the noise away)."""
    from pobo.parties.noise import rng_for
    return draw_order(n, NoiseSource(rng_for(seed, "row-order")))
