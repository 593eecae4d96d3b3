"""The curator's release handler: Kusner et al.'s three mechanisms on its own record.

The modeler asks (ReleaseRequest); the curator charges the ledger first -- a request
past the budget is refused before any noise is drawn -- then computes the release from
the true observations it holds, never from what the modeler claims.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from parties.curator import Curator
from parties.gp import IncrementalGP
from parties.kernels import kernel_by_name
from parties.noise import NoiseSource
from parties.release import (
    DEFAULT_SIMILARITY, ReleaseResult, gamma_bound, lipschitz_release, noise_free_release,
    noisy_release,
)
from protocol.errors import ErrorCode, ProtocolError
from protocol.ledger import Entry, Ledger
from protocol.messages import KernelParams, Release, ReleaseRequest
from scenarios.problem import Problem

# Algorithm 1 releases both the row and the value, each (eps, delta)-DP: (2 eps, 2 delta)
COST = {"noisy": 2, "noise-free": 1, "lipschitz": 1}


def release_handler(problem: Problem, Z: np.ndarray, kernel: KernelParams, curator: Curator,
                    ledger: Ledger, source: NoiseSource,
                    similarity: float = DEFAULT_SIMILARITY,
                    record: Callable[[ReleaseResult], None] | None = None
                    ) -> Callable[[ReleaseRequest], Release]:
    """A handler for `serve_session(on_release=...)` bound to this session's record."""

    def handle(request: ReleaseRequest) -> Release:
        k = COST[request.algorithm]
        delta = request.delta if request.algorithm != "lipschitz" else 0.0
        if request.algorithm != "lipschitz" and not request.delta > 0:
            raise ProtocolError(f"the {request.algorithm} release needs delta > 0")
        if request.algorithm == "lipschitz" and not problem.release:
            raise ProtocolError(f"scenario {problem.name} has no Lipschitz validation loss "
                                "(Algorithm 3 runs on the tuning scenario)", ErrorCode.POLICY)
        ledger.charge(Entry(f"release:{request.algorithm}", k * request.epsilon, k * delta))
        result = compute(request, problem, Z, kernel, curator, source, similarity)
        if record is not None:
            record(result)
        return Release(result.algorithm, result.epsilon, result.delta, result.index,
                       result.value, result.laplace_scale)

    return handle


def compute(request: ReleaseRequest, problem: Problem, Z: np.ndarray, kp: KernelParams,
            curator: Curator, source: NoiseSource, similarity: float) -> ReleaseResult:
    """The release itself, from the curator's true observations."""
    observed = np.asarray(curator.measured, dtype=float)
    T = len(observed)
    if request.algorithm == "noisy":
        kernel = kernel_by_name(kp.kernel, kp.lengthscale, kp.signal_var, dims=Z.shape[1])
        gp = IncrementalGP(Z, kernel, kp.noise_var, T)
        for i, y in zip(curator.queries, observed):
            gp.add(i, float(y))
        gamma = gamma_bound(Z, kernel, kp.noise_var, T)
        return noisy_release(gp.mean, observed, T, request.epsilon, request.delta, gamma,
                             math.sqrt(kp.noise_var), source, similarity)
    if request.algorithm == "noise-free":
        A, tau = problem.release.get("A", 1.0), problem.release.get("tau", 1.0)
        return noise_free_release(observed, Z.shape[0], problem.X.shape[1], request.epsilon,
                                  request.delta, A, tau, source, similarity)
    p = problem.release
    return lipschitz_release(observed, request.epsilon, p["lam_min"], p["lam_max"], p["L"],
                             p["g_star"], p["m"], source)
