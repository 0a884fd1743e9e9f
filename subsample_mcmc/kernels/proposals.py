r"""MH proposals as objects, with a diagonal or dense preconditioner: one home for both.

A proposal is a :class:`Proposal`, a callable

    ``proposal(key, position, step_size, inverse_mass_matrix, gradient_fn, center) -> (x', log q(x'|x), log q(x|x'))``

on a flat position ``x`` (``[p]``) and an inverse mass matrix or a
:class:`Preconditioner`; ``log q`` is returned up to a constant common to both
directions (only ``log q(x|x') - log q(x'|x)`` enters the MH ratio).  The inverse mass
matrix ``M^{-1} = L L'`` is ``None``
(the identity), a ``[p]`` diagonal or a ``[p, p]`` dense matrix (:func:`preconditioner`);
the inverse Hessian at the mode makes a Laplace-shaped move.

* :func:`random_walk` -- ``x' = x + eps L z`` (symmetric: the ``q`` terms cancel in the MH
  ratio and are returned as 0);
* :func:`langevin` -- the (mini-batch) Langevin move
  ``x' ~ N(x + eps^2/2 M^{-1} g(x), eps^2 M^{-1})`` with its exact forward and reverse
  densities; ``g = gradient_fn`` is any gradient or gradient *estimate*
  (:mod:`~subsample_mcmc.kernels.gradients`).  The reverse density uses ``g(x')`` from
  the same ``gradient_fn``: a mini-batch estimate must use one batch drawn before
  proposing (independent of the state), so that the corrected chain keeps the right
  target ("SGLD corrected by Racing-Normal MH", Sec. 5.2 of Chen & Ghahramani 2016).
* :func:`crank_nicolson` -- the preconditioned Crank-Nicolson move around a Student-t
  ``t_5(c, M^{-1})`` or a Gaussian ``N(c, M^{-1})`` (the Laplace approximation: ``c`` the
  mode, ``M`` the posterior's precision there): ``x' = c + rho (x - c) + sqrt(1 - rho^2) L z``, ``rho = 1/sqrt(1 +
  eps^2)``.  Small ``eps`` is a random walk of step ``eps`` with a pull to ``c``; large
  ``eps`` an independence proposal from the Laplace approximation.  The move is
  reversible with respect to ``N(c, M^{-1})`` (or, after a draw of its scale, the t),
  so the MH ratio needs only the ratio of the target to that reference: near the Bernstein-von Mises regime a nearly independent
  draw whose race, on Taylor-proxy residuals, decides from its first mini-batch
  (Cotter, Roberts, Stuart & White 2013, *MCMC methods for functions*, Sec. 4.2).

Example:
    >>> import jax, jax.numpy as jnp
    >>> prop = langevin()
    >>> x, fwd, bwd = prop(jax.random.PRNGKey(0), jnp.zeros(3), 0.5, jnp.array([1.0, 2.0, 4.0]),
    ...                    lambda x: -x)
    >>> x.shape, bool(jnp.isfinite(fwd - bwd))
    ((3,), True)
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp

__all__ = [
    "Preconditioner", "preconditioner", "Proposal", "random_walk", "langevin", "crank_nicolson", "CRANK_NICOLSON_DF",
    "defensive_t_weight", "T_WEIGHT_DIMENSIONS",
    "PROPOSALS", "get_proposal", "either", "pareto_k_hat", "reference_k_hat", "K_HAT_MAX",
]


class Preconditioner(NamedTuple):
    """``M^{-1} = L L'`` as the maps a proposal needs: ``times(v) = M^{-1} v``,
    ``scale(z) = L z``, ``whiten(r) = L^{-1} r`` and ``log_det_scale = log det L``."""

    times: Callable
    scale: Callable
    whiten: Callable
    log_det_scale: jax.Array


def preconditioner(inverse_mass_matrix, like: jax.Array, cholesky=None) -> Preconditioner:
    """The :class:`Preconditioner` of ``inverse_mass_matrix`` (``None``: identity; ``[p]``:
    diagonal; ``[p, p]``: dense, through its Cholesky factor -- ``cholesky`` when it is
    known, so that a chain does not refactor it at every step; a :class:`Preconditioner`:
    itself) for positions like ``like``."""
    if isinstance(inverse_mass_matrix, Preconditioner):
        return inverse_mass_matrix
    if inverse_mass_matrix is None:
        inverse_mass_matrix = jnp.ones_like(like)
    minv = jnp.asarray(inverse_mass_matrix, like.dtype)
    if minv.ndim == 1:
        root = jnp.sqrt(minv)
        return Preconditioner(lambda v: minv * v, lambda z: root * z, lambda r: r / root, jnp.sum(jnp.log(root)))
    chol = jnp.linalg.cholesky(minv) if cholesky is None else jnp.asarray(cholesky, like.dtype)
    return Preconditioner(lambda v: minv @ v, lambda z: chol @ z,
                          lambda r: jax.scipy.linalg.solve_triangular(chol, r, lower=True),
                          jnp.sum(jnp.log(jnp.diagonal(chol))))


class Proposal(NamedTuple):
    """A proposal: ``name``, whether it reads a gradient (``uses_gradient``: the kernel
    then builds one, at a cost it counts), whether it moves around a ``center`` (the
    Laplace mean: ``uses_center``) and the function ``propose``."""

    name: str
    uses_gradient: bool
    propose: Callable
    uses_center: bool = False

    def __call__(self, key, position, step_size, inverse_mass_matrix=None, gradient_fn: Optional[Callable] = None,
                 center=None):
        if self.uses_center:
            if center is None:
                raise ValueError(f"the {self.name} proposal needs center (the Laplace approximation's mean)")
            return self.propose(key, position, step_size, inverse_mass_matrix, gradient_fn, center)
        return self.propose(key, position, step_size, inverse_mass_matrix, gradient_fn)


def random_walk() -> Proposal:
    """Gaussian random walk ``x' = x + eps L z``, ``z ~ N(0, I)``, ``L L' = M^{-1}``
    (symmetric: both log densities returned are 0)."""

    def propose(key, position, step_size, inverse_mass_matrix, gradient_fn):
        pre = preconditioner(inverse_mass_matrix, position)
        new = position + step_size * pre.scale(jax.random.normal(key, position.shape, position.dtype))
        zero = jnp.zeros((), position.dtype)
        return new, zero, zero

    return Proposal("random_walk", False, propose)


def langevin() -> Proposal:
    r"""Preconditioned Langevin move ``x' ~ N(m(x), eps^2 M^{-1})``,
    ``m(x) = x + eps^2/2 M^{-1} g(x)``, with::

        log q(x'|x) = -1/2 |L^{-1}(x' - m(x))|^2 / eps^2 - log det L - p log eps - p/2 log 2 pi

    and ``log q(x|x')`` the same with ``m(x')`` (the MALA correction; with a mini-batch
    ``g`` it is the corrected SGLD move of Sec. 5.2)."""

    def propose(key, position, step_size, inverse_mass_matrix, gradient_fn):
        if gradient_fn is None:
            raise ValueError("the langevin proposal needs gradient_fn (a gradient or a gradient estimate)")
        pre = preconditioner(inverse_mass_matrix, position)
        p = position.shape[0]

        def mean(x):
            return x + 0.5 * step_size**2 * pre.times(gradient_fn(x))

        def logpdf(x, m):
            z = pre.whiten(x - m) / step_size
            return -0.5 * jnp.sum(z * z) - pre.log_det_scale - p * (jnp.log(step_size) + 0.5 * jnp.log(2 * jnp.pi))

        mean_fwd = mean(position)
        new = mean_fwd + step_size * pre.scale(jax.random.normal(key, position.shape, position.dtype))
        return new, logpdf(new, mean_fwd), logpdf(position, mean(new))

    return Proposal("langevin", True, propose)


#: degrees of freedom of :func:`crank_nicolson`'s Student-t reference by default
CRANK_NICOLSON_DF = 5.0
#: :func:`defensive_t_weight`: the Student-t component's weight is ``min(1, T_WEIGHT_DIMENSIONS / p)``
T_WEIGHT_DIMENSIONS = 2.0


def defensive_t_weight(p: int) -> float:
    r"""The Student-t component's weight ``a = min(1, 2 / p)`` in :func:`crank_nicolson`'s defensive reference
    ``(1 - a) N + a t_5`` for ``p`` parameters (what :class:`~subsample_mcmc.numpyro.RacingMH` uses).

    The t is there for posteriors with a tail heavier than the Laplace Gaussian's, where ``pi / N`` is
    unbounded.  Its scale mixture reaches such a tail through one global scale ``u``, which also scales the
    other ``p - 1`` directions, so its help fades with ``p`` while its cost on a posterior close to its
    Laplace Gaussian grows with ``p`` (the radius mismatch in :func:`crank_nicolson`'s docstring).
    Measured (``benchmarks/results/racing_mh_defensive_reference.md``; exact-MH independence chains, 8 x
    20,000 steps, 3 seeds; one parameter a rare-event Poisson log-rate whose left tail is exponential, the
    others standard Gaussian): the spread across chains of their share of draws below the exact 1% quantile,
    in binomial sds, was 1.8-2.0 with the t at ``p = 1``, 1.7-2.2 at ``p = 2``, 2.0-4.4 at ``p = 5`` and
    2.6-6.9 at ``p = 20``, against the Gaussian's 4.1-6.6 at every ``p``; the t's acceptance fell from
    0.89 to 0.65 while the Gaussian's stayed 0.89.  On logistic regressions with the Taylor proxy
    (``RacingMH`` defaults, 2 seeds): acceptance 0.77 with the t, 0.94 with this weight and 0.995 with the
    Gaussian on AER Fertility (``p = 8``), evaluations per effective draw 489, 345 and 302; 0.64, 0.98 and
    0.99 at ``p = 51``, 1491, 857 and 839.  The bias of the 1% tail share stayed below 0.0025 throughout."""
    return min(1.0, T_WEIGHT_DIMENSIONS / max(int(p), 1))


def crank_nicolson(df: Optional[float] = CRANK_NICOLSON_DF, t_weight: float = 1.0) -> Proposal:
    r"""Preconditioned Crank-Nicolson (pCN) move around the Student-t ``t_df(c, M^{-1})``
    (default ``df = 5``: a scale mixture of pCN moves) or, with ``df=inf`` (or ``None``),
    around the Gaussian ``N(c, M^{-1})``::

        x' = c + rho (x - c) + sqrt(1 - rho^2) sqrt(u) L z,   z ~ N(0, I),   rho = 1 / sqrt(1 + eps^2),

    ``L L' = M^{-1}``, ``c = center``; ``u = 1`` for the Gaussian.  For fixed ``u`` it is an
    AR(1) step that leaves ``N(c, u M^{-1})`` invariant: ``N_u(x) q_u(x'|x) = N_u(x')
    q_u(x|x')``.  With the Gaussian, ``log q(x|x') - log q(x'|x) = log N(x) - log N(x')``
    and the returned pair is ``(log N(x'), log N(x))``, ``log N(v) = -1/2 |L^{-1}(v - c)|^2``
    (constants cancel).  For ``eps -> 0``: ``x' ~ x + eps L z - eps^2/2 (x - c)``, a random
    walk with a linear pull to ``c``; for ``eps -> inf``: ``x' ~ N(c, M^{-1})``, the
    independence sampler.  When the target equals ``N(c, M^{-1})`` every move is accepted.

    **Student-t reference** (``df = nu``).  The t is the mixture ``x | u ~ N(c, u M^{-1})``,
    ``u ~ InvGamma(nu/2, nu/2)``, so with ``q(x) = |L^{-1}(x - c)|^2`` and ``p`` the
    dimension, ``u | x ~ InvGamma((nu + p)/2, (nu + q(x))/2)``.  The move first draws ``u``
    from that conditional (a Gibbs step on the extended target ``pi(x) t(u|x)``), then the
    pCN step at scale ``u``.  Because ``t(u|x) = t(u) N_u(x) / t(x)``, the MH ratio of the
    second step on the extended target is ``pi(x') t(x) / (pi(x) t(x'))``: the returned pair
    is ``(log t(x'), log t(x))``, ``log t(v) = -(nu + p)/2 log(1 + q(v)/nu)``.  The x-marginal
    of the chain is ``pi``.  Why: the Gaussian's independence regime is fast when the
    target is close to its Laplace approximation, but when the target's tails are heavier
    (a hierarchical scale, a skewed posterior) the weight ``pi / N`` is unbounded, the chain
    is not geometrically ergodic and finite runs under-cover the tails with no warning from
    R-hat or ESS.  ``pi / t`` stays bounded for any target with lighter than polynomial
    tails; the radial draw ``u`` also makes big jumps in scale, which is what a funnel
    needs.  ``nu -> 0`` is Kamatani's mixed pCN (MpCN, *Bernoulli* 24(4B), 2018, Sec. 3),
    ``nu -> inf`` the Gaussian pCN (Cotter, Roberts, Stuart & White 2013, *MCMC methods
    for functions*, Sec. 4.2).  ``rho`` and ``sqrt(1 - rho^2)`` are computed from ``log
    eps`` without overflow (``eps = inf`` is the independence sampler).

    **Defensive mixture** (``0 < t_weight < 1``).  The reference is ``(1 - a) N(c, M^{-1}) + a
    t_df(c, M^{-1})``, ``a = t_weight``: Hesterberg's (1995, *Technometrics* 37(2)) defensive
    importance sampling as a pCN reference.  It is the scale mixture ``x | u ~ N(c, u M^{-1})`` with
    ``u = 1`` with probability ``1 - a`` and ``u ~ InvGamma(nu/2, nu/2)`` otherwise, so the move above
    applies unchanged once ``u | x`` is drawn from that mixture's conditional: the t component with its
    responsibility ``a t(x) / ref(x)`` (normalised densities), then ``u`` from its inverse gamma; else ``u =
    1``.  The returned pair is ``(log ref(x'), log ref(x))``.  Why: in ``p`` dimensions the t's radius
    spreads like ``sqrt(2/nu + 2/p)`` (relative) against the Gaussian's ``sqrt(2/p)``, so on a posterior
    close to its Laplace Gaussian the t's independence draws miss the typical shell (acceptance 0.64 at
    ``p = 51`` on a correlated logistic regression, 0.99 with the Gaussian), while ``pi / ref <= pi / (a t)``
    keeps the weights bounded wherever the t's are, with the t's tail coverage."""
    if df is not None and not (float(df) > 0):
        raise ValueError(f"crank_nicolson(df=...) must be a positive number of degrees of freedom (inf or None: the "
                         f"Gaussian), got {df!r}")
    if not (0.0 <= float(t_weight) <= 1.0):
        raise ValueError(f"crank_nicolson(t_weight=...) is the Student-t component's weight in the reference, a "
                         f"number in [0, 1] (1: the t, 0: the Gaussian), got {t_weight!r}")
    gaussian = df is None or math.isinf(float(df)) or float(t_weight) == 0.0
    mixture = not gaussian and float(t_weight) < 1.0

    def propose(key, position, step_size, inverse_mass_matrix, gradient_fn, center):
        pre = preconditioner(inverse_mass_matrix, position)
        center = jnp.asarray(center, position.dtype)
        p = position.shape[0]
        log_eps = jnp.log(jnp.asarray(step_size, position.dtype))
        rho = jnp.exp(-0.5 * jax.nn.softplus(2.0 * log_eps))  # 1 / sqrt(1 + eps^2)
        root = jnp.exp(-0.5 * jax.nn.softplus(-2.0 * log_eps))  # eps / sqrt(1 + eps^2)
        key_z, key_u, key_c = jax.random.split(key, 3)
        z = jax.random.normal(key_z, position.shape, position.dtype)

        def radius2(x):
            w = pre.whiten(x - center)
            return jnp.sum(w * w)

        r2 = radius2(position)
        if gaussian:
            new = center + rho * (position - center) + root * pre.scale(z)
            return new, -0.5 * radius2(new), -0.5 * r2
        nu = jnp.asarray(df, position.dtype)
        u = 0.5 * (nu + r2) / jax.random.gamma(key_u, 0.5 * (nu + p), dtype=position.dtype)  # u | x, inverse gamma
        if not mixture:
            new = center + rho * (position - center) + root * jnp.sqrt(u) * pre.scale(z)
            return new, _log_student_t(radius2(new), nu, p), _log_student_t(r2, nu, p)
        a = jnp.asarray(t_weight, position.dtype)
        log_t, log_ref = _defensive_log_densities(r2, nu, p, a)
        u = jnp.where(jax.random.uniform(key_c, dtype=position.dtype) < jnp.exp(jnp.log(a) + log_t - log_ref), u, 1.0)
        new = center + rho * (position - center) + root * jnp.sqrt(u) * pre.scale(z)
        return new, _defensive_log_densities(radius2(new), nu, p, a)[1], log_ref

    return Proposal("crank_nicolson", False, propose, uses_center=True)


def _log_student_t(r2, nu, p):
    """``log t_nu(x)`` of the ``p``-variate Student-t up to a constant, from the whitened squared radius
    ``r2 = |L^{-1}(x - c)|^2``: ``-(nu + p)/2 log(1 + r2 / nu)``."""
    return -0.5 * (nu + p) * jnp.log1p(r2 / nu)


def _defensive_log_densities(r2, nu, p, a):
    """``(log t, log ref)`` of the defensive mixture ``ref = (1 - a) N + a t_nu`` (see :func:`crank_nicolson`),
    both normalised up to the common ``-log det L``, from the whitened squared radius ``r2``."""
    log_n = -0.5 * r2 - 0.5 * p * math.log(2.0 * math.pi)
    log_t = (jax.scipy.special.gammaln(0.5 * (nu + p)) - jax.scipy.special.gammaln(0.5 * nu)
             - 0.5 * p * jnp.log(nu * jnp.pi) + _log_student_t(r2, nu, p))
    return log_t, jnp.logaddexp(jnp.log1p(-a) + log_n, jnp.log(a) + log_t)


def either(use_second, first: Proposal, second: Proposal) -> Proposal:
    """The proposal ``second`` where the (traced) flag ``use_second`` holds, else ``first``.

    Both are computed and one is kept (they cost ``O(p^2)``; the race that follows is the step's cost), so that
    a flag carried in a chain's state selects the move under ``jit`` and ``vmap`` without two compiled races.
    """
    uses_center = first.uses_center or second.uses_center

    def propose(key, position, step_size, inverse_mass_matrix, gradient_fn, center=None):
        a = first(key, position, step_size, inverse_mass_matrix, gradient_fn, center)
        b = second(key, position, step_size, inverse_mass_matrix, gradient_fn, center)
        return tuple(jnp.where(use_second, v, u) for u, v in zip(a, b))

    return Proposal(f"{first.name}|{second.name}", first.uses_gradient or second.uses_gradient, propose, uses_center)


#: the largest :func:`reference_k_hat` for which the automatic choice of
#: :class:`~subsample_mcmc.numpyro.RacingMH` moves by :func:`crank_nicolson` (bounded weights have ``k <= 0``)
K_HAT_MAX = 0.0


def pareto_k_hat(log_weights: jax.Array) -> jax.Array:
    r"""The Pareto shape ``k`` of the upper tail of importance weights, PSIS's diagnostic (Vehtari, Simpson, Gelman,
    Yao & Gabry 2024, *Pareto smoothed importance sampling*, JMLR 25(72), Sec. 3 and App. C).

    Of ``S`` log weights (a static length), the ``M = ceil(min(S/5, 3 sqrt(S)))`` largest weights' exceedances
    ``x_i = w_(S-M+i) - w_(S-M)`` over the next largest are fitted by a generalized Pareto distribution
    ``1 - (1 + k x / sigma)^(-1/k)`` with Zhang & Stephens's (2009, *Technometrics* 51(3)) empirical-Bayes
    estimate: on the grid ``theta_j = 1/x_(M) + (1 - sqrt(m / (j - 1/2))) / (3 x_(q))``, ``j = 1..m``,
    ``m = 30 + floor(sqrt(M))``, ``x_(q)`` the lower quartile, the profile ``k(theta) = mean_i log(1 - theta x_i)``
    (this sign: ``k > 0`` is a heavy tail) has log likelihood ``M (log(-theta / k) - k - 1)``; ``theta`` is its
    likelihood-weighted mean, ``k = mean_i log(1 - theta x_i)``, shrunk to ``(M k + 10 * 0.5) / (M + 10)`` (the
    weakly informative prior of App. C).  ``k < 0``: bounded weights; ``k < 1/2``: finite variance; ``k > 0.7``:
    importance sampling is unreliable.  ``-inf`` when the top weights are all equal (the target is the
    reference).  ``-inf`` log weights (points outside the target's support) are allowed.  Traceable.

    Example:
        >>> import jax
        >>> x = jax.random.t(jax.random.PRNGKey(0), 5.0, (4000,))  # Cauchy / t_5 weights: tail index 4/5
        >>> lw = jax.scipy.stats.cauchy.logpdf(x) - jax.scipy.stats.t.logpdf(x, 5.0)
        >>> 0.6 < float(pareto_k_hat(lw)) < 1.0
        True
    """
    lw = jnp.sort(jnp.asarray(log_weights))
    s = lw.shape[0]
    m_tail = int(math.ceil(min(s / 5.0, 3.0 * math.sqrt(s))))
    top = lw[-1]
    x = jnp.exp(lw[s - m_tail:] - top) - jnp.exp(lw[s - m_tail - 1] - top)  # ascending exceedances, x_(M) = max
    grid = 30 + int(math.sqrt(m_tail))
    j = jnp.arange(1, grid + 1, dtype=x.dtype)
    quartile = x[int(m_tail / 4 + 0.5) - 1]
    safe_max, safe_q = jnp.where(x[-1] > 0, x[-1], 1.0), jnp.where(quartile > 0, quartile, x[-1])
    safe_q = jnp.where(safe_q > 0, safe_q, 1.0)
    theta = 1.0 / safe_max + (1.0 - jnp.sqrt(grid / (j - 0.5))) / (3.0 * safe_q)
    k_of = jnp.mean(jnp.log1p(-theta[:, None] * x[None, :]), axis=1)
    log_lik = m_tail * (jnp.log(-theta / k_of) - k_of - 1.0)
    theta_hat = jnp.sum(jax.nn.softmax(jnp.where(jnp.isfinite(log_lik), log_lik, -jnp.inf)) * theta)
    k = jnp.mean(jnp.log1p(-theta_hat * x))
    k = (m_tail * k + 10 * 0.5) / (m_tail + 10)
    return jnp.where(x[-1] > 0, k, -jnp.inf)


def reference_k_hat(key, log_density: Callable, center, inverse_mass_matrix, df: Optional[float] = CRANK_NICOLSON_DF,
                    num_draws: int = 16000, cholesky=None) -> jax.Array:
    r""":func:`pareto_k_hat` of the weights ``pi / t`` of ``num_draws`` draws from :func:`crank_nicolson`'s
    reference ``t_df(c, M^{-1})`` (``df=inf``: the Gaussian), ``pi = exp(log_density)`` unnormalised.

    The Crank-Nicolson chain's MH ratio is ``w(x') / w(x)``, ``w = pi / t``: with ``w`` bounded (``k <= 0``) the
    independence regime is uniformly ergodic (Mengersen & Tweedie 1996, Thm 2.1); with ``w`` unbounded the chain
    sticks where ``w`` is large and finite runs under-cover those regions, silently.  A centred hierarchical
    model's funnel (the population mean's spread grows like ``tau``, the t's only like the radius) gives
    ``k`` of about 0.4 on the Laplace t; a GLM, whose posterior is lighter-tailed than the t, ``k`` well below
    0.  ``log_density`` is evaluated ``num_draws`` times (``vmap``): pass a cheap one, such as the prior plus the
    Taylor proxy's quadratic sum (:func:`~subsample_mcmc.kernels.proxy.proxy_sum`), which reads no data.
    ``num_draws`` sets the estimate's noise: on AER Fertility's logistic regression (``k`` about -0.26) its
    standard deviation over 16 chains was 0.25 with 4,000 draws (3 chains above 0) and 0.13 with 16,000 (none;
    ``benchmarks/racing_mh_k_hat.py``).
    Traceable.
    """
    center = jnp.asarray(center)
    pre = preconditioner(inverse_mass_matrix, center, cholesky)
    p = center.shape[0]
    key_z, key_u = jax.random.split(key)
    z = jax.random.normal(key_z, (num_draws, p), center.dtype)
    gaussian = df is None or math.isinf(float(df))
    u = (jnp.ones((num_draws,), center.dtype) if gaussian
         else 0.5 * df / jax.random.gamma(key_u, 0.5 * df, (num_draws,), center.dtype))
    x = center + jnp.sqrt(u)[:, None] * jax.vmap(pre.scale)(z)
    r2 = u * jnp.sum(z * z, axis=1)
    log_t = -0.5 * r2 if gaussian else _log_student_t(r2, df, p)
    lw = jax.vmap(log_density)(x) - log_t
    return pareto_k_hat(jnp.where(jnp.isnan(lw), -jnp.inf, lw))


#: the proposals by name (the ``proposal=`` vocabulary of the NumPyro kernels)
PROPOSALS = {"random_walk": random_walk, "langevin": langevin, "crank_nicolson": crank_nicolson}


def get_proposal(proposal) -> Proposal:
    """A :class:`Proposal` from itself or from its name in :data:`PROPOSALS`."""
    if isinstance(proposal, Proposal):
        return proposal
    if proposal not in PROPOSALS:
        raise ValueError(f"proposal must be one of {sorted(PROPOSALS)} or a Proposal, got {proposal!r}")
    return PROPOSALS[proposal]()
