r"""Carlin & Chib (1995) product-space sampler for ARCH order selection, with racing
(App. C.2 of Chen & Ghahramani 2016, Eq. 25).

Every order ``j`` in ``Q`` keeps its own parameter block ``u^(j)`` (softplus space, see
:mod:`subsample_mcmc.models.arch`).  The joint target is

    p~(q, u^(1..D) | r) ∝ pi~(q) p(u^(q)) prod_t p(r_t | u^(q), r_{t-q:t-1}) prod_{j != q} p_pseudo(u^(j)),

with the pseudopriors ``p_pseudo = N(mu_j, Sigma_j)`` the Laplace approximations at each
order's MAP.  One iteration (Eq. 25):

1. ``u^(j) ~ p_pseudo`` for every ``j != q`` (exact draws, no data);
2. ``u^(q)`` by a Metropolis-Hastings step whose proposal is a Langevin (SGLD) move
   preconditioned by ``Sigma_q``,
   ``u' = u + eps^2/2 Sigma_q g(u) + eps L_q xi``, with the control-variate mini-batch
   gradient ``g(u) = grad log p(u) + G_q + H_q D + (N/b) sum_{t in batch} [g_t(u) - g_t(mu_q) - H_t(mu_q) D]``,
   ``D = u - mu_q`` (``G_q``, ``H_q`` the full gradient and Hessian at the MAP, computed
   once; ``H_t D`` by a Hessian-vector product); the accept test is a two-arm
   Racing-Normal race (Sec. 4, Eq. 12);
3. ``q`` by a Gumbel-max race over the ``D`` arms (Eq. 2-3, Racing-Normal Gibbs):
   ``log f0(j) = log pi~(j) + log p(u^(j)) - log p_pseudo(u^(j))`` and rewards
   ``l_{j,t} = log p(r_t | u^(j), r_{t-j:t-1})``.

Both races use the data-space control variate of App. C.2: ``h_{j,t}`` is the
second-order Taylor expansion of ``l_{j,t}`` in the 2-D feature
``z_{j,t} = (r_t, alpha_0^(j) + alpha^(j)T r^2_{t-j:t-1})`` around the mean of ``z`` in
each of 100 bins (a 10 x 10 grid of marginal quantiles of ``r_t`` and of the MAP
log-variance); the 20% of points farthest from their reference are read exactly in every
race.  The features are linear in the data row ``y_t``, so the per-bin moments of ``z``
under the *current* parameters follow from the bin moments of ``y``
(:class:`~subsample_mcmc.racing.TaylorControlVariate` with ``features``).  A race reads
the same data row for every arm, so all orders share one binning and one exactly read
set: the bins use the MAP log-variance averaged over orders (the paper bins each ``z_{j,t}``
separately).  "Farthest from the reference" is measured by the standardised error of the
expansion at the MAPs, maximised over orders (``distance="taylor"``, default): the plain
standardised distance in ``z`` (``distance="feature"``) left residuals so heavy-tailed
(kurtosis ~450 at N = 1e5) that Racing-Normal's Normal approximation failed (error 9.5% >
delta); with the Taylor error the kurtosis is ~50 and the error ~1%.

The adjusted prior ``pi~`` is tuned by Wang-Landau, ``log pi~(q_t) -= gamma_t`` with
``gamma_t = 1 / (1 + t/100)`` (so that ``p~(q | r)`` becomes nearly uniform), together
with the Langevin step sizes (Robbins-Monro on ``log eps_q`` toward an acceptance rate of
36%, as in App. C.2); both are then frozen, and the posterior is
``p(q | r) ∝ pi(q) p~(q | r) / pi~(q)``.

The *exact* counterpart is the same sampler with every race replaced by a full pass
(``method="exact"`` of :func:`~subsample_mcmc.racing.best_arm`, coupled to the race
through the same keys) and the full-data gradient in the proposal.  With
``check_decisions=True`` the racing sampler re-runs every Gibbs and MH decision exactly
with the same random numbers and records disagreements: the empirical error rates.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import partial
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from subsample_mcmc.kernels.gradients import gradient_estimator, random_batch
from subsample_mcmc.kernels.mh import racing_mh_accept
from subsample_mcmc.kernels.proposals import langevin
from subsample_mcmc.kernels.proxy import TaylorProxy, proxy_residual, proxy_sum, taylor_proxy
from subsample_mcmc.racing import DataBins, clopper_pearson, make_data_bins, sample_discrete, taylor_control_variate

from .arch import ArchData, LaplaceFit, fit_laplace, log_likelihood_points, log_prior, student_t_logpdf

__all__ = ["ArchOrderSampler", "ArchRun", "SamplerConfig", "make_arch_bins", "total_variation"]


class SamplerArrays(NamedTuple):
    y: jax.Array  # [N, 1 + Qmax]
    masks: jax.Array  # [D, P]
    mu: jax.Array  # [D, P]
    chol: jax.Array  # [D, P, P]
    cov: jax.Array  # [D, P, P]
    grad_map: jax.Array  # [D, P] full-data gradient of sum_t l_t at mu
    log_prior_q: jax.Array  # [D] log pi(q)
    bins: DataBins
    proxy_hess: jax.Array  # [D, P, P] full-data Hessian of sum_t l_t at mu (parameter proxies)
    proxy_const: jax.Array  # [D] sum_t l_t(mu_j) - max_j (parameter proxies)


class ChainState(NamedTuple):
    q: jax.Array  # int32 index into the orders
    u: jax.Array  # [D, P]
    log_pi_adj: jax.Array  # [D] log pi~(q)
    log_step: jax.Array  # [D] log Langevin step size per order
    t: jax.Array  # adaptation iterations done


class StepInfo(NamedTuple):
    q: jax.Array
    alpha0: jax.Array
    alpha: jax.Array  # [Qmax], zero beyond the selected order
    nu: jax.Array
    accepted: jax.Array
    evals_gibbs: jax.Array
    evals_mh: jax.Array
    gibbs_error: jax.Array  # racing decision != exact decision (False when not checked)
    mh_error: jax.Array
    log_pi_adj: jax.Array  # [D]


class SamplerConfig(NamedTuple):
    """Static settings (hashable)."""

    racing: bool
    adapt: bool
    check: bool
    delta: float
    first_batch: int
    grad_batch_size: int
    target_accept: float
    control_variate: str  # "data" (App. C.2) or "parameter" (Taylor proxies at the MAPs)


def make_arch_bins(data: ArchData, laplace: LaplaceFit, *, num_bins: int = 100, exact_fraction: float = 0.2,
                   distance: str = "taylor") -> DataBins:
    """The shared data bins of App. C.2 (see the module docstring).

    ``num_bins`` cells of a ``sqrt(num_bins) x sqrt(num_bins)`` grid of marginal quantiles of
    ``r_t`` and of the MAP log-variance averaged over orders; the ``exact_fraction`` points
    with the largest ``distance`` (``"taylor"`` or ``"feature"``) are read exactly.
    """
    y = np.asarray(data.y, np.float64)
    r = y[:, 0]
    n = y.shape[0]
    side = max(1, int(round(math.sqrt(num_bins))))
    feats = []
    for j in range(len(data.orders)):
        x = np.logaddexp(0.0, laplace.mu[j]) * np.asarray(data.masks[j])  # softplus, overflow-safe
        feats.append(x[0] + y[:, 1:] @ x[1:-1])
    s = np.stack(feats)  # [D, N] MAP variances
    log_s = np.log(s).mean(0)

    def quantile_bins(v, k):
        edges = np.quantile(v, np.linspace(0, 1, k + 1)[1:-1])
        return np.searchsorted(edges, v, side="right")

    bin_of = quantile_bins(r, side) * side + quantile_bins(log_s, side)
    if distance == "taylor":
        # how far each point is from its reference *for the expansion*: the standardised
        # error of the Taylor expansion at the MAPs, maximised over orders
        plain = make_data_bins(y, bin_of=bin_of)
        mu = jnp.asarray(laplace.mu, jnp.float32)
        cv = _control_variate(mu, data.masks, plain)
        idx = jnp.arange(n)
        res = np.asarray(_arm_rewards(mu, data.masks, data.y)(idx) - cv.values(idx), np.float64)
        res = (res - res.mean(1, keepdims=True)) / (res.std(1, keepdims=True) + 1e-300)
        dist = np.abs(res).max(0)
    elif distance == "feature":
        # distance of z_{j,t} from its bin mean, standardised, maximised over orders
        _, inv = np.unique(bin_of, return_inverse=True)
        counts = np.bincount(inv)

        def standardised_deviation(v):
            return (v - (np.bincount(inv, weights=v) / counts)[inv]) / (v.std() + 1e-300)

        dev_r = standardised_deviation(r)
        dist = np.max([np.hypot(dev_r, standardised_deviation(s_j)) for s_j in s], axis=0)
    else:
        raise ValueError(f"distance must be 'taylor' or 'feature', got {distance!r}")
    return make_data_bins(y, bin_of=bin_of, exact_fraction=exact_fraction, distance=dist)


def _pseudo_log_density(u, mu, chol, mask):
    z = jax.scipy.linalg.solve_triangular(chol, u - mu, lower=True) * mask
    d = jnp.sum(mask)
    return -0.5 * jnp.sum(z * z) - jnp.sum(jnp.log(jnp.diag(chol)) * mask) - 0.5 * d * jnp.log(2 * jnp.pi)


def _features(u, masks):
    """Feature maps ``z_j = P_j y + c_j`` of App. C.2 for a batch of positions ``u`` [A, P]."""
    x = jax.nn.softplus(u) * masks
    a = u.shape[0]
    width = masks.shape[1] - 1  # 1 + Qmax
    first = jnp.zeros((a, width)).at[:, 0].set(1.0)
    second = jnp.concatenate([jnp.zeros((a, 1)), x[:, 1:-1]], axis=1)
    p_mat = jnp.stack([first, second], axis=1)  # [A, 2, 1 + Qmax]
    shift = jnp.stack([jnp.zeros(a), x[:, 0]], axis=1)  # [A, 2]
    return p_mat, shift, x[:, -1]


def _control_variate(u, masks, bins):
    p_mat, shift, nu = _features(u, masks)

    def loglik(z):  # z [A, 2] -> [A]
        return student_t_logpdf(z[:, 0], z[:, 1], nu)

    return taylor_control_variate(loglik, bins, features=(p_mat, shift))


def _arm_rewards(u, masks, y):
    """``idx -> [A, m]`` per-datum log-likelihoods of positions ``u`` [A, P]."""

    def rewards(idx):
        rows = y[idx]
        return jax.vmap(lambda uu, mm: log_likelihood_points(uu, mm, rows))(u, masks)

    return rewards


def _order_log_likelihood(mask, y):
    """``(u, idx) -> [len(idx)]`` per-datum log-likelihoods of one order (``mask``)."""
    return lambda u, idx: log_likelihood_points(u, mask, y[idx])


def _proxies(arrays: SamplerArrays) -> TaylorProxy:
    """The orders' Taylor proxies at their MAPs, stacked ``[D, ...]`` (constants relative
    to the largest, so that arms with different references compare)."""
    return TaylorProxy(arrays.mu, arrays.grad_map, arrays.proxy_hess, arrays.proxy_const)


def _proxy_residual_rewards(u, masks, proxies, y):
    """``idx -> [A, m]`` residuals ``l_t(u) - h_t(u)`` of each arm's proxy (constant
    included: arms with different references then compare; :mod:`subsample_mcmc.kernels.proxy`)."""

    def rewards(idx):
        def arm(uu, mm, prx):
            ll = _order_log_likelihood(mm, y)
            return proxy_residual(ll, prx)(uu, idx) - ll(prx.reference, idx)

        return jax.vmap(arm)(u, masks, proxies)

    return rewards


def _step(arrays: SamplerArrays, state: ChainState, key, cfg: SamplerConfig):
    y, masks = arrays.y, arrays.masks
    n = y.shape[0]
    num_orders, p = masks.shape
    k_pseudo, k_prop, k_batch, k_acc, k_gibbs = jax.random.split(key, 5)
    q = state.q
    race_kw = dict(delta=cfg.delta, first_batch=cfg.first_batch)

    # 1. pseudoprior draws for the orders not selected
    xi = jax.random.normal(k_pseudo, (num_orders, p)) * masks
    draws = arrays.mu + jnp.einsum("dpk,dk->dp", arrays.chol, xi)
    u = jnp.where((jnp.arange(num_orders) == q)[:, None], state.u, draws)

    # 2. preconditioned Langevin proposal for u^(q), corrected by a (racing) MH test
    mask_q, cov_q, mu_q = masks[q], arrays.cov[q], arrays.mu[q]
    eps = jnp.exp(state.log_step[q])
    uq = u[q]
    ll_q = _order_log_likelihood(mask_q, y)
    proxy_q = jax.tree.map(lambda a: a[q], _proxies(arrays))
    lp_q = lambda v: log_prior(v, mask_q)  # noqa: E731
    if cfg.racing:  # the second-order control-variate estimate on one mini-batch
        grad_est = gradient_estimator(lp_q, ll_q, n, random_batch(k_batch, n, cfg.grad_batch_size), proxy_q)
        grad_evals = 4 * cfg.grad_batch_size  # g_t at both points, each with its proxy term
    else:
        grad_est = gradient_estimator(lp_q, ll_q, n, jnp.arange(n))
        grad_evals = 2 * n
    # the padding (inactive entries) has unit mass and zero gradient: it moves by a
    # symmetric step whose forward and reverse densities cancel, and is reset to 0
    prop, lq_f, lq_b = langevin()(k_prop, uq, eps, cov_q, lambda v: grad_est(v) * mask_q)
    prop = prop * mask_q
    lp_cur, lp_new = lp_q(uq), lp_q(prop)
    pair = jnp.stack([uq, prop])
    pair_masks = jnp.stack([mask_q, mask_q])
    use_proxy = cfg.racing and cfg.control_variate == "parameter"
    if use_proxy:
        residual = proxy_residual(ll_q, proxy_q)
        mh_rewards = lambda idx: jnp.stack([residual(uq, idx), residual(prop, idx)])  # noqa: E731
        lp_cur = lp_cur + proxy_sum(proxy_q, uq)
        lp_new = lp_new + proxy_sum(proxy_q, prop)
        mh_cv = None
    else:
        mh_rewards = _arm_rewards(pair, pair_masks, y)
        mh_cv = _control_variate(pair, pair_masks, arrays.bins) if cfg.racing else None
    method = "normal" if cfg.racing else "exact"
    accept, mh_race = racing_mh_accept(k_acc, mh_rewards, n, lp_cur, lp_new, lq_f, lq_b, method=method,
                                       control_variate=mh_cv, **race_kw)
    accept = accept & jnp.isfinite(lp_new)
    if cfg.check:  # the same decision read exactly, with the same u (same key)
        accept_exact, _ = racing_mh_accept(k_acc, mh_rewards, n, lp_cur, lp_new, lq_f, lq_b, method="exact", **race_kw)
        mh_error = (accept != (accept_exact & jnp.isfinite(lp_new))) & ~mh_race.nonfinite
    else:
        mh_error = jnp.array(False)
    u = u.at[q].set(jnp.where(accept, prop, uq))

    # 3. the order q by a Gumbel-max race over all orders (Racing-Normal Gibbs)
    log_f0 = (state.log_pi_adj + arrays.log_prior_q + jax.vmap(log_prior)(u, masks)
              - jax.vmap(_pseudo_log_density)(u, arrays.mu, arrays.chol, masks))
    if use_proxy:
        proxies = _proxies(arrays)
        gibbs_rewards = _proxy_residual_rewards(u, masks, proxies, y)
        log_f0 = log_f0 + jax.vmap(lambda uu, prx: proxy_sum(prx, uu, with_constant=True))(u, proxies)
        gibbs_cv = None
    else:
        gibbs_rewards = _arm_rewards(u, masks, y)
        gibbs_cv = _control_variate(u, masks, arrays.bins) if cfg.racing else None
    draw = sample_discrete(k_gibbs, log_f0, gibbs_rewards, population_size=n, method=method,
                           control_variate=gibbs_cv, **race_kw)
    q_new = jnp.where(draw.value < 0, q, draw.value).astype(jnp.int32)
    if cfg.check:
        exact_draw = sample_discrete(k_gibbs, log_f0, gibbs_rewards, population_size=n, method="exact", **race_kw)
        gibbs_error = (draw.value != exact_draw.value) & ~draw.race.nonfinite
    else:
        gibbs_error = jnp.array(False)

    # 4. adaptation: Wang-Landau on log pi~ and Robbins-Monro on the step size
    log_pi_adj, log_step, t = state.log_pi_adj, state.log_step, state.t
    if cfg.adapt:
        gamma = 1.0 / (1.0 + t / 100.0)
        log_pi_adj = log_pi_adj.at[q_new].add(-gamma)
        log_pi_adj = log_pi_adj - jnp.max(log_pi_adj)
        log_step = log_step.at[q].add(gamma * (accept.astype(jnp.float32) - cfg.target_accept))
        t = t + 1
    new_state = ChainState(q_new, u, log_pi_adj, log_step, t)

    x = jax.nn.softplus(u[q_new]) * masks[q_new]
    info = StepInfo(
        q=q_new, alpha0=x[0], alpha=x[1:-1], nu=x[-1], accepted=accept,
        evals_gibbs=draw.race.num_likelihood_evals.astype(jnp.float32),
        evals_mh=(mh_race.num_likelihood_evals + grad_evals).astype(jnp.float32),
        gibbs_error=gibbs_error, mh_error=mh_error, log_pi_adj=log_pi_adj,
    )
    return new_state, info


@partial(jax.jit, static_argnames=("cfg",))
def _run_chunk(arrays, states, keys, cfg):
    """``lax.map`` over chains (sequential: no lane waits for another's race) of a scan."""

    def one_chain(args):
        state, chain_keys = args
        return jax.lax.scan(lambda s, k: _step(arrays, s, k, cfg), state, chain_keys)

    return jax.lax.map(one_chain, (states, keys))


@dataclass
class ArchRun:
    """The draws and costs of one run of :class:`ArchOrderSampler` (``C`` chains)."""

    method: str
    orders: tuple
    q_index: np.ndarray  # [C, S] index of the selected order
    alpha0: np.ndarray  # [C, S]
    alpha: np.ndarray  # [C, S, Qmax]
    nu: np.ndarray  # [C, S]
    accepted: np.ndarray  # [C, S]
    evals: np.ndarray  # [C, S] likelihood evaluations per iteration (Gibbs + MH + gradients)
    gibbs_error: np.ndarray  # [C, S] (checked runs only)
    mh_error: np.ndarray
    log_pi_adj: np.ndarray  # [D] frozen log pi~ (shared by the chains)
    step_size: np.ndarray  # [D] frozen Langevin step sizes
    adapt_log_pi_adj: np.ndarray  # [C, A, D] Wang-Landau trajectory
    adapt_evals: np.ndarray  # [C, A] likelihood evaluations per adaptive iteration
    adapt_accepted: np.ndarray  # [C, A]
    seconds: dict = field(default_factory=dict)
    checked: bool = False
    num_data: int = 0

    @property
    def q(self) -> np.ndarray:
        """``[C, S]`` sampled order values."""
        return np.asarray(self.orders)[self.q_index]

    def adjusted_frequencies(self) -> np.ndarray:
        """``[C, D]`` per-chain frequencies of each order under ``pi~``: ``p~(q | r)``."""
        d = len(self.orders)
        return np.stack([np.bincount(c, minlength=d) / c.size for c in self.q_index])

    def posterior_q(self, q_index: Optional[np.ndarray] = None) -> np.ndarray:
        """``p(q | r) ∝ pi(q) p~(q | r) / pi~(q)`` (uniform ``pi``) from all chains."""
        qi = self.q_index if q_index is None else q_index
        freq = np.bincount(qi.ravel(), minlength=len(self.orders)) / qi.size
        with np.errstate(divide="ignore"):
            log_w = np.log(freq) - self.log_pi_adj  # in logs: pi~ spans hundreds of nats at large N
        log_w -= log_w[np.isfinite(log_w)].max()
        w = np.exp(log_w)
        return w / w.sum()

    def estimated_log_posterior_adaptive(self) -> np.ndarray:
        """``[C, A, D]`` the Wang-Landau estimate ``log p(q|r) ≈ log pi(q) - log pi~(q)`` (normalised)."""
        lp = -self.adapt_log_pi_adj
        return lp - jax.scipy.special.logsumexp(lp, axis=-1, keepdims=True)

    def error_rates(self) -> dict:
        """Empirical decision error rates with 95% Clopper-Pearson intervals (checked runs)."""
        out = {}
        for name, arr in (("gibbs", self.gibbs_error), ("mh", self.mh_error)):
            k, n = int(arr.sum()), int(arr.size)
            lo, hi = clopper_pearson(k, n)
            out[name] = {"errors": k, "decisions": n, "rate": k / max(n, 1), "ci95": [lo, hi]}
        return out

    def to_inference_data(self):
        """ArviZ ``InferenceData``: ``q`` and the selected order's parameters, costs in sample_stats."""
        import arviz as az

        return az.from_dict(
            posterior={"q": self.q, "alpha0": self.alpha0, "alpha": self.alpha, "nu": self.nu},
            sample_stats={"accepted": self.accepted, "likelihood_evaluations": self.evals,
                          **({"gibbs_error": self.gibbs_error, "mh_error": self.mh_error} if self.checked else {})},
            coords={"lag": np.arange(1, self.alpha.shape[-1] + 1)},
            dims={"alpha": ["lag"]},
            attrs={"method": self.method, "orders": list(self.orders),
                   "log_adjusted_prior": self.log_pi_adj.tolist(), "step_size": self.step_size.tolist(),
                   "num_data": self.num_data},
        )


class ArchOrderSampler:
    """Posterior over the ARCH order ``q`` by the product-space sampler (module docstring).

    Args:
        data: :class:`subsample_mcmc.models.arch.ArchData` (from :func:`subsample_mcmc.models.arch.prepare`).
        laplace: the per-order Laplace fits (computed when omitted, one-off full passes).
        delta: error level of every race, in ``(0, 0.5)`` (0.05 in Sec. 5.2).
        first_batch: ``m1`` of the races (50 in Sec. 5.2).
        num_bins: control-variate bins (100, App. C.2).
        exact_fraction: fraction of points read exactly in every race (0.2, App. C.2).
        grad_batch_size: mini-batch of the SGLD gradient.
        target_accept: acceptance rate the step sizes are tuned to (0.36, App. C.2).

    Example:
        >>> from subsample_mcmc.models.arch import prepare, simulate_arch
        >>> r, _ = simulate_arch(3000, order=2, seed=1)
        >>> s = ArchOrderSampler(prepare(r, orders=(1, 2, 4)))
        >>> run = s.run(0, num_adapt=50, num_samples=50, num_chains=1, progress_bar=False)
        >>> run.posterior_q().shape
        (3,)
    """

    def __init__(self, data: ArchData, laplace: Optional[LaplaceFit] = None, *, delta: float = 0.05,
                 first_batch: int = 50, num_bins: int = 100, exact_fraction: float = 0.2,
                 grad_batch_size: int = 100, target_accept: float = 0.36, control_variate: str = "data"):
        if not isinstance(data, ArchData):
            raise TypeError("data must be an ArchData; build it with models.arch.prepare(returns, orders)")
        if not (0.0 < float(delta) < 0.5):
            raise ValueError(f"delta must lie in (0, 0.5), got {delta}; e.g. delta=0.05")
        if not (0.0 <= exact_fraction < 1.0):
            raise ValueError(f"exact_fraction must lie in [0, 1), got {exact_fraction}")
        n = int(data.y.shape[0])
        n_race = n - int(math.floor(exact_fraction * n))
        if isinstance(first_batch, bool) or int(first_batch) != first_batch or not (2 <= first_batch <= n_race):
            raise ValueError(f"first_batch must be an integer in [2, {n_race}], got {first_batch!r}")
        if int(grad_batch_size) != grad_batch_size or grad_batch_size < 1:
            raise ValueError(f"grad_batch_size must be a positive integer, got {grad_batch_size!r}")
        if not (0.0 < target_accept < 1.0):
            raise ValueError(f"target_accept must lie in (0, 1), got {target_accept}")
        if control_variate not in ("data", "parameter"):
            raise ValueError(f"control_variate must be 'data' (App. C.2) or 'parameter', got {control_variate!r}")
        self.control_variate = control_variate
        self.data = data
        t0 = time.perf_counter()
        self.laplace = fit_laplace(data) if laplace is None else laplace
        self.setup_seconds = time.perf_counter() - t0
        self.bins = make_arch_bins(data, self.laplace, num_bins=num_bins, exact_fraction=exact_fraction)
        self.delta, self.first_batch = float(delta), int(first_batch)
        self.grad_batch_size, self.target_accept = int(grad_batch_size), float(target_accept)
        mu = jnp.asarray(self.laplace.mu, jnp.float32)
        chol = jnp.asarray(self.laplace.chol, jnp.float32)
        masks = data.masks

        proxies = jax.jit(jax.vmap(lambda uu, mm: taylor_proxy(_order_log_likelihood(mm, data.y), uu, n)))(mu, masks)
        ll_map, grad_map = np.asarray(proxies.value_sum, np.float64), proxies.grad_sum
        d = len(data.orders)
        self.arrays = SamplerArrays(
            y=data.y, masks=masks, mu=mu, chol=chol, cov=jnp.einsum("dij,dkj->dik", chol, chol),
            grad_map=grad_map, log_prior_q=jnp.full((d,), -math.log(d), jnp.float32), bins=self.bins,
            proxy_hess=proxies.hess_sum,
            proxy_const=jnp.asarray(ll_map - ll_map.max(), jnp.float32),
        )

    @property
    def num_data(self) -> int:
        return int(self.data.y.shape[0])

    def _config(self, racing, adapt, check):
        return SamplerConfig(racing, adapt, check, self.delta, self.first_batch, self.grad_batch_size,
                             self.target_accept, self.control_variate)

    def _loop(self, states, key, iters, cfg, chunk, desc, progress_bar):
        from tqdm.auto import tqdm

        c = states.q.shape[0]
        infos = []
        done = 0
        # equal chunks (one compiled shape); the last chunk may run past ``iters`` and
        # its surplus draws are dropped
        m = -(-iters // max(1, -(-iters // chunk))) if iters else 0
        with tqdm(total=iters, desc=desc, disable=not progress_bar, leave=False) as bar:
            while done < iters:
                key, sub = jax.random.split(key)
                keys = jax.random.split(sub, c * m).reshape(c, m, -1)
                states, info = _run_chunk(self.arrays, states, keys, cfg)
                jax.block_until_ready(info)
                infos.append(jax.tree.map(np.asarray, info))
                bar.update(min(m, iters - done))
                done += m
        if not infos:
            return states, None
        return states, jax.tree.map(lambda *a: np.concatenate(a, axis=1)[:, :iters], *infos)

    def run(self, seed=0, *, method: str = "racing", num_adapt: int = 1000, num_samples: int = 2000,
            num_chains: int = 4, check_decisions: bool = False, progress_bar: bool = True,
            chunk: int = 100, initial_prior: str = "uniform") -> ArchRun:
        """Adapt ``pi~`` and step sizes (Wang-Landau), freeze them, then sample.

        Args:
            seed: an int or a ``jax.random`` key.
            method: ``"racing"`` (subsampled races and SGLD) or ``"exact"`` (full data).
            num_adapt, num_samples: iterations of the adaptive and of the fixed phase.
            num_chains: chains, run one after the other inside one compiled call.
            check_decisions: re-run every racing decision exactly (racing only).
            initial_prior: where Wang-Landau starts ``log pi~``: ``"uniform"`` (as in
                Sec. 5.2) or ``"laplace"`` (minus the Laplace log evidences: ``p~(q|r)``
                starts nearly flat and the adaptation only refines it).
        """
        if method not in ("racing", "exact"):
            raise ValueError(f"method must be 'racing' or 'exact', got {method!r}")
        for name, v, lo in (("num_adapt", num_adapt, 0), ("num_samples", num_samples, 1), ("num_chains", num_chains, 1),
                            ("chunk", chunk, 1)):
            if isinstance(v, bool) or int(v) != v or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if initial_prior not in ("uniform", "laplace"):
            raise ValueError(f"initial_prior must be 'uniform' or 'laplace', got {initial_prior!r}")
        if check_decisions and method != "racing":
            raise ValueError("check_decisions=True only applies to method='racing'")
        racing = method == "racing"
        key = jax.random.PRNGKey(seed) if isinstance(seed, (int, np.integer)) else seed
        k_init, k_adapt, k_sample = jax.random.split(key, 3)
        d, p = self.arrays.mu.shape
        xi = jax.random.normal(k_init, (num_chains, d, p)) * self.arrays.masks
        u0 = self.arrays.mu + jnp.einsum("dpk,cdk->cdp", self.arrays.chol, xi)
        q0 = jax.random.randint(jax.random.fold_in(k_init, 1), (num_chains,), 0, d)
        step0 = jnp.full((num_chains, d), math.log(1.0), jnp.float32)
        if initial_prior == "laplace":
            ev = np.asarray(self.laplace.log_evidence, np.float64)
            log_pi0 = jnp.broadcast_to(jnp.asarray(ev.max() - ev, jnp.float32), (num_chains, d))
        else:
            log_pi0 = jnp.zeros((num_chains, d))
        states = ChainState(q0.astype(jnp.int32), u0, log_pi0, step0,
                            jnp.zeros((num_chains,), jnp.int32))
        seconds = {}
        t0 = time.perf_counter()
        states, adapt_info = self._loop(states, k_adapt, num_adapt, self._config(racing, True, False), chunk,
                                        f"{method} adapt", progress_bar)
        seconds["adapt"] = time.perf_counter() - t0
        # freeze: the chains share pi~ and step sizes so that they target one distribution
        log_pi = np.asarray(states.log_pi_adj, np.float64)
        log_pi = (log_pi - log_pi.mean(axis=1, keepdims=True)).mean(0)
        log_pi -= log_pi.max()
        log_step = np.asarray(states.log_step, np.float64).mean(0)
        states = states._replace(log_pi_adj=jnp.broadcast_to(jnp.asarray(log_pi, jnp.float32), (num_chains, d)),
                                 log_step=jnp.broadcast_to(jnp.asarray(log_step, jnp.float32), (num_chains, d)))
        t0 = time.perf_counter()
        states, info = self._loop(states, k_sample, num_samples, self._config(racing, False, check_decisions),
                                  chunk, f"{method} sample", progress_bar)
        seconds["sample"] = time.perf_counter() - t0
        empty = np.zeros((num_chains, 0))
        return ArchRun(
            method=method, orders=self.data.orders, q_index=info.q, alpha0=info.alpha0, alpha=info.alpha,
            nu=info.nu, accepted=info.accepted, evals=info.evals_gibbs + info.evals_mh,
            gibbs_error=info.gibbs_error, mh_error=info.mh_error, log_pi_adj=log_pi, step_size=np.exp(log_step),
            adapt_log_pi_adj=empty[..., None] if adapt_info is None else adapt_info.log_pi_adj,
            adapt_evals=empty if adapt_info is None else adapt_info.evals_gibbs + adapt_info.evals_mh,
            adapt_accepted=empty if adapt_info is None else adapt_info.accepted,
            seconds=seconds, checked=check_decisions, num_data=self.num_data,
        )


def total_variation(run_a: ArchRun, run_b: ArchRun, *, num_batches: int = 10, num_boot: int = 2000, seed: int = 0):
    """Total variation between two runs' ``p(q | r)`` and a bootstrap Monte Carlo error.

    The draws of every chain are cut into ``num_batches`` consecutive batches (batch
    means absorb autocorrelation); batches are resampled with replacement within each
    run.  Returns ``(tv, standard_error)``.  Note that Monte Carlo noise alone makes
    the estimated TV positive: compare it with its standard error.
    """
    rng = np.random.default_rng(seed)

    def batches(run):
        qi = run.q_index
        s = qi.shape[1] // num_batches * num_batches
        return qi[:, :s].reshape(qi.shape[0] * num_batches, -1)

    ba, bb = batches(run_a), batches(run_b)
    tv = 0.5 * np.abs(run_a.posterior_q() - run_b.posterior_q()).sum()
    boots = []
    for _ in range(num_boot):
        ia = rng.integers(0, ba.shape[0], ba.shape[0])
        ib = rng.integers(0, bb.shape[0], bb.shape[0])
        boots.append(0.5 * np.abs(run_a.posterior_q(ba[ia]) - run_b.posterior_q(bb[ib])).sum())
    return float(tv), float(np.std(boots))
