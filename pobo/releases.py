"""The curator's release handler: Kusner et al.'s three mechanisms on its own record.

The modeler asks (ReleaseRequest); the curator first checks that the release's proof
holds for this session and that its noise can be a number (`check_computable`, from the
request and the declarations only) -- refused with a typed `policy` error otherwise --
then charges the ledger -- a request past the budget is refused before any noise is
drawn -- then computes the release from the true observations it holds, never from what
the modeler claims. Nothing is computed from the data before the charge: a computation
that fails after it keeps the charge and answers without saying why (the why may depend
on the data; the curator's log has it).

When a release is granted (Kusner et al., full paper):
- 'noisy' (Algorithm 1): Theorems 1 and 3 bound the sensitivity through Srinivas et
  al.'s GP-UCB guarantees at Kusner's beta_t = 2 log(|X| t^2 pi^2 / (3 delta)) (line 3)
  under one known kernel (Assumption 1). Granted only when the Hello declared GP-UCB at
  the request's delta and a replay over Z -- with the session's kernel and the rewards
  the curator actually released (with LDP, the noisy values the modeler saw) -- shows
  every query was a UCB maximiser within `UCB_RTOL` (parties.release). The GP's noise
  variance must be positive and at least the declared one (q = sigma sqrt(8 log(3/delta))
  must cover the measurement noise).
- 'noise-free' (Algorithm 2): Theorem 5 rests on de Freitas et al.'s regret bound for
  their own branch-and-bound UCB method on noise-free observations, not on GP-UCB with
  Kusner's beta_t, so the replay above would be neither necessary nor sufficient. What
  the curator can check is the premise: its measurements are exact and the modeler saw
  them unperturbed (no LDP), and that the scenario declares A and tau; the query rule
  remains that scenario's declared assumption (no built-in scenario declares them, so
  pobo refuses Algorithm 2 unless a user's scenario does).
- 'lipschitz' (Algorithm 3): any acquisition function (section 5); the scenario must
  declare the Lipschitz constants.
"""
from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable

import numpy as np

from pobo.parties.budget import DatasetLedger
from pobo.parties.curator import Curator, Oracle
from pobo.parties.gp import IncrementalGP, NumericalError
from pobo.parties.kernels import Kernel, kernel_by_name
from pobo.parties.noise import NoiseSource
from pobo.parties.release import (
    DEFAULT_SIMILARITY, MAX_RELEASE_EPSILON, MIN_RELEASE_EPSILON, UCB_RTOL, ReleaseResult,
    gamma_bound, kusner_c1, kusner_q, lipschitz_release, noise_free_release, noisy_release,
    ucb_replay,
)
from pobo.protocol.errors import ErrorCode, ProtocolError
from pobo.protocol.ledger import Entry, Ledger, PrivacyBudgetExceeded
from pobo.protocol.messages import Hello, KernelParams, Release, ReleaseRequest
from pobo.protocol.policy import KUSNER_UCB
from pobo.scenarios.problem import Problem

log = logging.getLogger("pobo.curator")

# Algorithm 1 releases both the row and the value, each (eps, delta)-DP: (2 eps, 2 delta)
COST = {"noisy": 2, "noise-free": 1, "lipschitz": 1}


def release_handler(problem: Problem, Z: np.ndarray, kernel: KernelParams, curator: Curator,
                    ledger: Ledger, source: NoiseSource,
                    similarity: float = DEFAULT_SIMILARITY,
                    record: Callable[[ReleaseResult], None] | None = None, *,
                    hello: Hello | None = None) -> Callable[[ReleaseRequest], Release]:
    """A handler for `serve_session(on_release=...)` bound to this session's record and
    the session's Hello (None: no declared strategy, so no 'noisy' release)."""

    def handle(request: ReleaseRequest) -> Release:
        k = COST[request.algorithm]
        delta = request.delta if request.algorithm != "lipschitz" else 0.0
        if request.algorithm != "lipschitz" and not request.delta > 0:
            raise ProtocolError(f"the {request.algorithm} release needs delta > 0")
        if request.algorithm == "lipschitz" and not problem.release:
            raise ProtocolError(f"scenario {problem.name} has no Lipschitz validation loss "
                                "(Algorithm 3 runs on the tuning scenario)", ErrorCode.POLICY)
        check_computable(request, kernel, Z.shape[1])  # from public values only: free
        if request.algorithm == "noisy":
            check_noisy(request, hello, Z, kernel, curator)
        elif request.algorithm == "noise-free":
            check_noise_free(curator, problem)
        entry = Entry(f"release:{request.algorithm}", k * request.epsilon, k * delta)
        try:
            if isinstance(ledger, DatasetLedger):  # once per session, for ever (the journal)
                ledger.charge_release(entry, request.algorithm)
            else:
                ledger.charge(entry)
        except PrivacyBudgetExceeded as exc:
            if k == 1:
                raise
            raise PrivacyBudgetExceeded(  # say why the figure is not the one asked for
                f"the {request.algorithm} release of (eps={request.epsilon:g}, "
                f"delta={delta:g}) releases a row and a value, each at that (eps, delta): "
                f"it is charged (eps={entry.epsilon:g}, delta={entry.delta:g}); {exc}") from None
        try:  # charged first: whatever the computation does with the data is paid for
            result = compute(request, problem, Z, kernel, curator, source, similarity)
        except Exception as exc:  # its text may be data-dependent: logged, never sent
            log.error("the %s release failed after its charge: %s: %s", request.algorithm,
                      type(exc).__name__, exc)
            raise ProtocolError(f"the {request.algorithm} release could not be computed; "
                                "its charge stands (the attempt used the data)",
                                ErrorCode.INTERNAL) from None
        if record is not None:
            record(result)
        return Release(result.algorithm, result.epsilon, result.delta, result.index,
                       result.value, result.laplace_scale)

    return handle


def check_computable(request: ReleaseRequest, kp: KernelParams, dims: int) -> None:
    """Refuse (typed, before any charge and without looking at the data) a request whose
    noise could not be a number: an epsilon outside [MIN_RELEASE_EPSILON,
    MAX_RELEASE_EPSILON], or (Algorithm 1) a GP noise variance whose C1 = 8 / log(1 +
    sigma^-2) or q = sigma sqrt(8 log(3/delta)) is not finite (1e308, say). Every value
    here is the request's or the curator's declaration: the answer tells nothing of the
    data, so a refusal here may be free."""
    if not MIN_RELEASE_EPSILON <= request.epsilon <= MAX_RELEASE_EPSILON:
        raise refuse(f"a release epsilon must lie in [{MIN_RELEASE_EPSILON:g}, "
                     f"{MAX_RELEASE_EPSILON:g}], not {request.epsilon:g}")
    if request.algorithm == "noisy":
        _, noise_var = session_kernel(request, kp, dims)
        with contextlib.suppress(ArithmeticError, ValueError):
            sigma = math.sqrt(noise_var)
            if math.isfinite(kusner_c1(sigma) * kusner_q(sigma, request.delta)):
                return
        raise refuse(f"a GP noise variance of {noise_var:g} gives Algorithm 1 no finite "
                     "sensitivity (C1 = 8 / log(1 + sigma^-2), q = sigma sqrt(8 log(3/delta)))")


def refuse(why: str) -> ProtocolError:
    """A typed `policy` refusal of a release whose proof does not hold here."""
    return ProtocolError(why, ErrorCode.POLICY)


def session_kernel(request: ReleaseRequest, kp: KernelParams, dims: int) -> tuple[Kernel, float]:
    """The kernel and noise variance of the session's GP: the request's, each zero or
    empty field standing for the curator's declared value."""
    kernel = kernel_by_name(request.kernel or kp.kernel, request.lengthscale or kp.lengthscale,
                            request.signal_var or kp.signal_var, dims=dims)
    return kernel, request.noise_var or kp.noise_var


def check_noisy(request: ReleaseRequest, hello: Hello | None, Z: np.ndarray, kp: KernelParams,
                curator: Curator) -> None:
    """Refuse Algorithm 1 unless its queries were GP-UCB's at Kusner's beta_t (line 3)."""
    rule = ("Algorithm 1's sensitivity proofs (Kusner et al. Theorems 1 and 3) hold only for "
            "queries chosen by GP-UCB with beta_t = 2 log(|X| t^2 pi^2 / (3 delta)) (line 3)")
    if hello is None:
        raise refuse(f"{rule}; the curator holds no Hello for this session, so no declaration")
    if hello.strategy != KUSNER_UCB or not hello.release_delta > 0:
        raise refuse(f"{rule}; this session's Hello declared strategy {hello.strategy!r} with "
                     f"release delta {hello.release_delta:g} (0: not Kusner's beta)")
    if hello.release_delta != request.delta:
        raise refuse(f"{rule}; the Hello declared beta_t at delta {hello.release_delta:g}, "
                     f"the request asks for delta {request.delta:g}")
    overridden = ((request.kernel or kp.kernel, request.lengthscale or kp.lengthscale,
                   request.signal_var or kp.signal_var)
                  != (kp.kernel, kp.lengthscale, kp.signal_var))
    if kp.status == "public" and overridden:  # (a larger noise variance only adds noise)
        raise refuse("the curator declared its kernel public: the release is sized with it, "
                     "and a session that used another kernel gets no noisy release")
    kernel, noise_var = session_kernel(request, kp, Z.shape[1])
    if not (noise_var > 0 and noise_var >= kp.noise_var):
        raise refuse(f"Algorithm 1 needs the GP's noise variance ({noise_var:g}) positive and at "
                     f"least the declared measurement noise ({kp.noise_var:g}): q = sigma "
                     "sqrt(8 log(3/delta)) must cover it")
    declared = kernel_by_name(kp.kernel, kp.lengthscale, kp.signal_var, dims=Z.shape[1])
    for which, k in (("the session's", kernel), ("the declared", declared)):
        check_unit_variance(k, Z, which)
    try:
        miss = ucb_replay(Z, kernel, noise_var, curator.queries, curator.rewards, request.delta)
    except (NumericalError, ValueError) as exc:
        raise refuse(f"{rule}; the replay with the session's kernel failed: {exc}") from None
    if miss is not None:
        raise refuse(f"{rule}; replayed with kernel {kernel.name} (l={kernel.lengthscales[0]:g}, "
                     f"s2={kernel.variance:g}, noise={noise_var:g}), query {miss.t} (row "
                     f"{miss.index}, ucb {miss.ucb:.10g}) was not a maximiser: row "
                     f"{miss.best_index} has ucb {miss.best_ucb:.10g} (tolerance "
                     f"{UCB_RTOL:g} (1 + |max ucb|))")


class KernelNotNormalised(ProtocolError):
    """A release whose kernel has k(x, x) != 1, which Kusner et al.'s proofs assume."""

    def __init__(self, why: str) -> None:
        super().__init__(why, ErrorCode.POLICY)


def check_unit_variance(kernel: Kernel, Z: np.ndarray, which: str = "the") -> None:
    """Refuse (KernelNotNormalised) unless k(x, x) = 1 on every row of Z: Kusner et al.
    Algorithm 1 bounds the posterior deviation by sigma_t(x) <= k(x, x)^1/2 = 1 and sets
    c from the multi-task kernel k((D, x), (D', x)) = k(D, D') k(x, x); with another
    signal variance its sensitivities (Theorems 1 and 3) are not the ones computed."""
    diag = kernel.diag(Z)
    worst = float(np.max(np.abs(diag - 1.0))) if len(diag) else 0.0
    if not worst <= 1e-12:
        raise KernelNotNormalised(
            f"Kusner et al.'s release assumes k(x, x) = 1; {which} kernel {kernel.name} has "
            f"k(x, x) = {float(diag[int(np.argmax(np.abs(diag - 1.0)))]):g} (signal variance "
            f"{kernel.variance:g}): no release is granted with it")


def exact(oracle: Oracle) -> bool:
    """Whether the curator's measurements are noise-free: y_t = f(x_t)."""
    if oracle.noise == "gaussian":
        return oracle.noise_var == 0
    return oracle.noise == "uniform" and oracle.R == 0


def check_noise_free(curator: Curator, problem: Problem) -> None:
    """Refuse Algorithm 2 unless the observations behind it were noise-free (line 2) and
    the scenario declares de Freitas et al.'s constants A and tau (its stated assumption,
    with their query rule, which no curator can check: pobo ships no such optimizer)."""
    rule = ("Algorithm 2 (Kusner et al. Theorem 5) needs noise-free observations y_t = f(x_t), "
            "queried by de Freitas et al.'s method on those exact values")
    if not {"A", "tau"} <= problem.release.keys():
        raise refuse(f"{rule}, and de Freitas et al.'s constants A and tau: scenario "
                     f"{problem.name} declares none, so no noise-free release is granted")
    if not exact(curator.oracle):
        raise refuse(f"{rule}; this curator measures with {curator.oracle.noise} noise "
                     "(use the noisy release)")
    if curator.ldp is not None:
        raise refuse(f"{rule}; in this session every reward left through the local-DP "
                     "mechanism, so the queries were chosen on noisy values")
    if len(curator.measured) < 2:
        raise refuse("Algorithm 2's bound A e^(-T tau/(log T)^(d/4)) needs T >= 2 samples")


def compute(request: ReleaseRequest, problem: Problem, Z: np.ndarray, kp: KernelParams,
            curator: Curator, source: NoiseSource, similarity: float) -> ReleaseResult:
    """The release itself, from the curator's true observations."""
    observed = np.asarray(curator.measured, dtype=float)
    T = len(observed)
    if request.algorithm == "noisy":
        kernel, noise_var = session_kernel(request, kp, Z.shape[1])
        gp = IncrementalGP(Z, kernel, noise_var, T)
        for i, y in zip(curator.queries, observed):
            gp.add(i, float(y))
        declared = kernel_by_name(kp.kernel, kp.lengthscale, kp.signal_var, dims=Z.shape[1])
        # the information gain sets the noise: never below the declared kernel's, so that
        # hyperparameters a modeler fitted (or chose) cannot shrink it
        gamma = max(gamma_bound(Z, kernel, noise_var, T),
                    gamma_bound(Z, declared, noise_var, T))
        return noisy_release(gp.mean, observed, T, request.epsilon, request.delta, gamma,
                             math.sqrt(noise_var), source, similarity)
    if request.algorithm == "noise-free":
        A, tau = problem.release["A"], problem.release["tau"]
        return noise_free_release(observed, Z.shape[0], problem.X.shape[1], request.epsilon,
                                  request.delta, A, tau, source, similarity)
    p = problem.release
    return lipschitz_release(observed, request.epsilon, p["lam_min"], p["lam_max"], p["L"],
                             p["g_star"], p["m"], source)
