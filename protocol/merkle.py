"""An append-only Merkle log, as Certificate Transparency keeps one (RFC 9162 section 2.1).

The dataset ledger's entries are the log's leaves, in journal order, each the canonical
record `checkpoint.entry_record`. Hashing is RFC 9162's (SHA-256 from hashlib):
leaf_hash(d) = SHA-256(0x00 || d), node_hash(l, r) = SHA-256(0x01 || l || r), and the tree
head of n leaves MTH(D[0:n]) splits at the largest power of two below n (section 2.1.1).
A tree head (size, root) commits to every entry before it; a consistency proof (section
2.1.4) shows that a head of size m is a prefix of one of size n >= m, which a linear hash
chain cannot: an operator who rolls the journal back and appends other entries past the
old size yields heads no proof links. An inclusion proof (section 2.1.3) shows that one
entry is in a head.

Pure algorithms, no sockets, no journal: proofs are computed over `hash_range(a, b)`, a
callable returning MTH(D[a:b]) as raw bytes, so a caller keeps its leaves where it likes
(`MerkleTree`, in memory; parties.ledger_log, over a journal). Hashes travel as 64
lowercase hex digits; the functions here take and give raw 32-byte digests.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

EMPTY_ROOT = hashlib.sha256(b"").digest()  # MTH({}), the head of an empty log
HashRange = Callable[[int, int], bytes]  # (a, b) -> MTH(D[a:b]), 0 <= a < b


def leaf_hash(record: bytes) -> bytes:
    """RFC 9162 section 2.1.1: a leaf's hash, SHA-256(0x00 || record)."""
    return hashlib.sha256(b"\x00" + record).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 9162 section 2.1.1: an interior node's hash, SHA-256(0x01 || left || right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def split(n: int) -> int:
    """k, the largest power of two smaller than n (n >= 2): where MTH(D[n]) splits."""
    return 1 << ((n - 1).bit_length() - 1)


def root_of(leaves: Sequence[bytes]) -> bytes:
    """MTH of a list of leaf hashes (the definition, recursively; a reference)."""
    if not leaves:
        return EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    k = split(len(leaves))
    return node_hash(root_of(leaves[:k]), root_of(leaves[k:]))


def inclusion_proof(index: int, size: int, hash_range: HashRange) -> list[bytes]:
    """PATH(index, D[0:size]) of RFC 9162 section 2.1.3.1, from `hash_range`."""
    if not 0 <= index < size:
        raise ValueError(f"leaf {index} is not in a tree of {size} leaves")
    path: list[bytes] = []
    lo, hi, m = 0, size, index
    while hi - lo > 1:
        k = split(hi - lo)
        if m < k:
            path.append(hash_range(lo + k, hi))
            hi = lo + k
        else:
            path.append(hash_range(lo, lo + k))
            lo, m = lo + k, m - k
    return path[::-1]  # RFC order: from the leaf up


def consistency_proof(first: int, second: int, hash_range: HashRange) -> list[bytes]:
    """PROOF(first, D[0:second]) of RFC 9162 section 2.1.4.1 (empty when first is 0 or
    equals second), from `hash_range`."""
    if not 0 <= first <= second:
        raise ValueError(f"no consistency proof from a tree of {first} leaves to one of "
                         f"{second}")
    if first == 0 or first == second:
        return []
    proof: list[bytes] = []
    lo, hi, m, whole = 0, second, first, True  # SUBPROOF(m, D[lo:hi], whole)
    while m != hi - lo:
        k = split(hi - lo)
        if m <= k:
            proof.append(hash_range(lo + k, hi))
            hi = lo + k
        else:
            proof.append(hash_range(lo, lo + k))
            lo, m, whole = lo + k, m - k, False
    if not whole:
        proof.append(hash_range(lo, hi))
    return proof[::-1]  # RFC order: the innermost subproof first


def verify_inclusion(index: int, size: int, leaf: bytes, proof: Sequence[bytes],
                     root: bytes) -> bool:
    """RFC 9162 section 2.1.3.2: whether `proof` shows leaf hash `leaf` at `index` in the
    tree of `size` leaves whose root is `root`."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            fn, sn = _to_right_child(fn, sn)
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


def _to_right_child(fn: int, sn: int) -> tuple[int, int]:
    """Steps 2.1.3.2 3.b and 2.1.4.2 6.b.2: with LSB(fn) not set, right-shift fn and sn
    equally until LSB(fn) is set or fn is 0."""
    while fn and not fn & 1:
        fn, sn = fn >> 1, sn >> 1
    return fn, sn


def verify_consistency(first: int, second: int, proof: Sequence[bytes], first_root: bytes,
                       second_root: bytes) -> bool:
    """RFC 9162 section 2.1.4.2: whether `proof` shows that the tree of `first` leaves and
    root `first_root` is a prefix of the tree of `second` leaves and root `second_root`.
    A tree of 0 leaves is a prefix of any (its proof is empty); a tree is a prefix of
    itself only with an empty proof and the same root."""
    if not 0 <= first <= second:
        return False
    if first == 0:
        return not proof and first_root == EMPTY_ROOT
    if first == second:
        return not proof and first_root == second_root
    if not proof:
        return False
    path = list(proof)
    if first & (first - 1) == 0:  # an exact power of two: the first root is a node
        path.insert(0, first_root)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            fn, sn = _to_right_child(fn, sn)
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return fr == first_root and sr == second_root and sn == 0


class MerkleTree:
    """A Merkle log's perfect subtrees, appended to one leaf at a time (RFC 9162 trees).

    Level h holds the hashes of the aligned subtrees of 2^h leaves, for h >= `floor`
    (levels below it are not kept: `leaves(a, b)` gives those leaf hashes again when a
    proof needs them, e.g. read back from a journal). MTH(D[a:b]) of any node of the
    tree is then O(log n) stored hashes plus at most 2^floor leaves: a head and a
    consistency proof cost O(log n) hashes each, never the whole log. With floor 0 every
    leaf is kept (64 bytes a leaf in all); with floor 8 a leaf costs 1/4 byte."""

    def __init__(self, floor: int = 0,
                 leaves: Callable[[int, int], list[bytes]] | None = None) -> None:
        if floor < 0 or (floor > 0 and leaves is None):
            raise ValueError("a tree that keeps no leaves (floor > 0) needs `leaves`")
        self.floor = floor
        self._leaves = leaves
        self.levels: list[list[bytes]] = [[] for _ in range(floor + 1)]
        self.tail: list[bytes] = []  # the leaves past the last whole block of 2^floor
        self._blocks: dict[int, list[list[bytes]]] = {}  # whole blocks read back, levels
        self.size = 0

    def append(self, leaf: bytes) -> None:
        """Add one leaf hash at the end of the log."""
        self.size += 1
        if self.floor:
            self.tail.append(leaf)
            if len(self.tail) < 1 << self.floor:
                return
            leaf = root_of(self.tail)
            self.tail = []
        h = self.floor
        self.levels[h].append(leaf)
        while len(self.levels[h]) % 2 == 0:
            node = node_hash(self.levels[h][-2], self.levels[h][-1])
            h += 1
            if h == len(self.levels):
                self.levels.append([])
            self.levels[h].append(node)

    def hash_range(self, a: int, b: int) -> bytes:
        """MTH(D[a:b]) for a range of the tree's shape (0 <= a < b <= size): an aligned
        perfect subtree, or a left-aligned run of them split as section 2.1.1 splits."""
        if not 0 <= a < b <= self.size:
            raise ValueError(f"leaves [{a}, {b}) are not in a log of {self.size}")
        n = b - a
        if n & (n - 1) == 0 and a % n == 0:  # a perfect, aligned subtree
            h = n.bit_length() - 1
            if h >= self.floor:
                return self.levels[h][a >> h]
            base = (a >> self.floor) << self.floor
            if base == self.size - len(self.tail):  # the open block, in memory
                return root_of(self.tail[a - base:b - base])
            return self._block(base >> self.floor)[h][(a - base) >> h]
        k = split(n)
        return node_hash(self.hash_range(a, a + k), self.hash_range(a + k, b))

    def _block(self, index: int) -> list[list[bytes]]:
        """The levels below `floor` of whole block `index` (its leaves read back once and
        kept with the block read before it: a proof needs at most two blocks)."""
        levels = self._blocks.get(index)
        if levels is None:
            start = index << self.floor
            levels = [self._leaves(start, start + (1 << self.floor))]
            while len(levels) < self.floor:
                below = levels[-1]
                levels.append([node_hash(below[i], below[i + 1])
                               for i in range(0, len(below), 2)])
            if len(self._blocks) >= 2:
                self._blocks.pop(next(iter(self._blocks)))
            self._blocks[index] = levels
        return levels

    def root(self, size: int | None = None) -> bytes:
        """The tree head's root of the first `size` leaves (all: None)."""
        size = self.size if size is None else size
        if not 0 <= size <= self.size:
            raise ValueError(f"no head of {size} leaves in a log of {self.size}")
        return EMPTY_ROOT if size == 0 else self.hash_range(0, size)

    def consistency(self, first: int, second: int | None = None) -> list[bytes]:
        """The consistency proof from the head of `first` leaves to that of `second`."""
        return consistency_proof(first, self.size if second is None else second,
                                 self.hash_range)

    def inclusion(self, index: int, size: int | None = None) -> list[bytes]:
        """The inclusion proof of leaf `index` in the head of `size` leaves."""
        return inclusion_proof(index, self.size if size is None else size, self.hash_range)
