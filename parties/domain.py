"""A scenario's public input domain: what "distance 1" means before the release.

The Gaussian releases protect a row moved by a distance measured in preprocessed units
(parties/gaussian.py). That distance means something only if the preprocessing is
public: here every constant comes from the scenario's declaration (bounds and kernel
length-scales in the features' own units), none from the rows. A row is clipped to the
declared box, moved to its centre, divided by the length-scales (so one isotropic kernel
fits, as PO-GP-UCB's preprocessing intends) and scaled so the box's corners lie at
`radius` (25, the paper's max norm). Clipping and all constants are row-wise and
data-independent, so neighbouring raw rows stay neighbours, with their distance scaled
per feature as `unit_in_features` says.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_NORM = 25.0


@dataclass(frozen=True)
class PublicDomain:
    """Per-feature public bounds and length-scales (the features' own units) and where they
    come from. `conversions` optionally names another unit per feature, e.g. (111.32, "km")
    for degrees of latitude, for the privacy statement."""

    names: tuple[str, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    lengthscales: tuple[float, ...]
    units: tuple[str, ...]
    source: str
    radius: float = MAX_NORM
    conversions: tuple[tuple[float, str] | None, ...] = ()

    def __post_init__(self) -> None:
        d = len(self.names)
        if not all(len(t) == d for t in (self.lower, self.upper, self.lengthscales, self.units)):
            raise ValueError("a public domain needs names, bounds, length-scales and units "
                             "for every feature")
        if self.conversions and len(self.conversions) != d:
            raise ValueError("conversions must name one entry (or None) per feature")
        lo, hi, ls = map(np.asarray, (self.lower, self.upper, self.lengthscales))
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)):
            raise ValueError("every public bound must be finite with lower < upper")
        if not (np.all(np.isfinite(ls)) and np.all(ls > 0)) or not self.radius > 0:
            raise ValueError("length-scales and the radius must be positive")

    @property
    def scale(self) -> float:
        """k: preprocessed = k (x - centre) / lengthscale, so the box's corners are at radius."""
        half = (np.asarray(self.upper) - np.asarray(self.lower)) / 2 / np.asarray(self.lengthscales)
        return float(self.radius / np.linalg.norm(half))

    @property
    def kernel_lengthscale(self) -> float:
        """The declared length-scales in preprocessed units: one isotropic value, k."""
        return self.scale

    @property
    def diameter(self) -> float:
        """The largest distance between two rows of the domain (preprocessed units): the
        move that replaces a whole row by any other row."""
        return 2.0 * self.radius

    def prepare(self, X_raw: np.ndarray) -> tuple[np.ndarray, int]:
        """(preprocessed rows, number of rows clipped): clip to the box, centre, divide
        by the length-scales and scale by k."""
        X_raw = np.asarray(X_raw, dtype=float)
        if X_raw.ndim != 2 or X_raw.shape[1] != len(self.names):
            raise ValueError(f"rows of {X_raw.shape[1:]} features, the domain declares "
                             f"{len(self.names)}")
        lo, hi = np.asarray(self.lower), np.asarray(self.upper)
        clipped = np.clip(X_raw, lo, hi)
        moved = int(np.count_nonzero(np.any(clipped != X_raw, axis=1)))
        X = (clipped - (lo + hi) / 2) / np.asarray(self.lengthscales) * self.scale
        return X, moved

    def unit_in_features(self) -> list[str]:
        """What one preprocessed unit is along each feature, in its own units."""
        out = []
        for j, name in enumerate(self.names):
            step = self.lengthscales[j] / self.scale
            text = f"{name}: {_fmt(step)} {self.units[j]}".rstrip()
            if self.conversions and self.conversions[j] is not None:
                factor, unit = self.conversions[j]
                text += f" (about {_fmt(step * factor)} {unit})"
            out.append(text)
        return out

    def to_dict(self) -> dict:
        """The declaration as JSON (public)."""
        return {"features": list(self.names), "lower": list(self.lower),
                "upper": list(self.upper), "lengthscales": list(self.lengthscales),
                "units": list(self.units), "radius": self.radius, "source": self.source,
                "unit_in_features": self.unit_in_features()}


def box_domain(names, lower, upper, units, source: str, fraction: float = 0.25,
               **extra) -> PublicDomain:
    """A domain whose length-scales are a fixed `fraction` of each declared range (the
    rule of the authors' code, l = 0.25 x max norm): public, and no fit on rows."""
    ls = tuple(fraction * (h - l) for l, h in zip(lower, upper))
    return PublicDomain(tuple(names), tuple(map(float, lower)), tuple(map(float, upper)), ls,
                        tuple(units), source, **extra)


def _fmt(x: float) -> str:
    return f"{x:.3g}" if 1e-3 <= abs(x) < 1e4 else f"{x:.2e}" if x else "0"


KM_PER_DEG_LAT = 111.32


def km_per_deg_lon(latitude: float) -> float:
    """Kilometres per degree of longitude at a latitude (spherical Earth)."""
    return KM_PER_DEG_LAT * math.cos(math.radians(latitude))
