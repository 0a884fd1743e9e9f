r"""Discrete sampling by racing the Gumbel-max trick (Eq. 1-3 of Chen & Ghahramani 2016).

To draw ``X`` with ``p(X = i) ∝ f0(i) prod_{n=1}^N f_n(i)``, draw ``eps_i ~ Gumbel(0, 1)``
and return ``argmax_i log f0(i) + sum_n log f_n(i) + eps_i`` (Eq. 2).  Dividing by N,
this is the best arm of the finite reward populations
``l_{i,n} = log f_n(i) + (log f0(i) + eps_i) / N`` (Eq. 3), which a race identifies
from a fraction of the data.  If the race is correct with probability ``1 - delta``
for every ``eps``, the sample's law is within total variation ``delta`` of the exact
one (Prop. 1, Eq. 4).
"""

from __future__ import annotations

from typing import Callable, NamedTuple, Optional, Union

import jax
import jax.numpy as jnp

from .api import best_arm
from .race import RaceResult

__all__ = ["sample_discrete", "sample_discrete_exact", "DiscreteSample"]


class DiscreteSample(NamedTuple):
    """A draw of ``X`` with what the race cost."""

    value: jax.Array
    race: RaceResult
    gumbel: jax.Array  # the Gumbel noise eps used (for coupling with the exact sampler)


def sample_discrete(
    key: jax.Array,
    log_f0: jax.Array,
    rewards: Union[jax.Array, Callable[[jax.Array], jax.Array]],
    *,
    method: str = "normal",
    population_size: Optional[int] = None,
    population_sizes=None,
    tie_share: float = 0.0,
    **race_options,
) -> DiscreteSample:
    r"""Draw ``X ~ p(X = i) ∝ f0(i) prod_n f_n(i)`` by a Gumbel-max race (Eq. 2-3).

    Args:
        key: PRNG key; split into the Gumbel noise and the race's reading order.
            The same key gives the same Gumbel noise whatever ``method`` is, so
            ``method="exact"`` is the exact sampler coupled to the race.
        log_f0: ``[D]`` log prior factor ``log f0(i)``.
        rewards: ``[D, N]`` array of ``log f_n(i)``, or a function
            ``indices -> [D, len(indices)]`` (then give ``population_size``).
        method: any method of :func:`best_arm` (``"exact"`` reads all N).
        population_sizes: ``[D]`` sizes ``N_y`` when each value's factors form a population
            of its own size (``p(X = y) ∝ f0(y) prod_{n < N_y} f_{y,n}``; App. C.3, e.g. the
            clusters of a coreference move): ``rewards`` is then a ``[D, max N_y]`` padded
            array or a function ``(arms, indices) -> rewards`` with ``population_size`` the
            largest size, and the race compares totals (see :func:`best_arm`).
        tie_share: ``s`` in ``[0, 1)``: the share of ``delta`` given to near-ties of the
            perturbed values.  The race runs at ``(1 - s) delta`` and stops once every width
            is below ``epsilon = log(1 + s delta)`` nats (``resolution`` of :func:`best_arm`),
            returning an ``epsilon``-good arm where no bound failed; it can then differ from
            the exact draw only when the top two of ``log f0(i) + sum_n log f_n(i) + eps_i``
            lie within ``epsilon``, which has probability at most ``e^epsilon - 1 = s delta``
            (exponential-race form of Gumbel-max: given the winner and its ``E = e^-V``, the
            runner-up's ``E`` exceeds it by an exponential of rate at most the total, so
            ``P(V_1 - V_2 < epsilon) <= e^epsilon - 1``).  In all the draw's total variation
            stays at most ``delta``, and a near-tie no longer reads all ``N``.  Default 0:
            each race right for every noise draw.  Not with ``population_sizes`` or
            ``"lil_ucb"`` (ignored there).
        **race_options: passed to :func:`best_arm` (``delta``, ``first_batch``,
            ``variance``, ``control_variate``, ...).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> rewards = jnp.log(jnp.array([[0.2], [0.8]])) * jnp.ones((2, 1000)) / 1000
        >>> s = sample_discrete(jax.random.PRNGKey(0), jnp.zeros(2), rewards)
        >>> int(s.value) in (0, 1)
        True
    """
    if "arm_offset" in race_options:
        raise ValueError("sample_discrete sets best_arm's arm_offset itself (log f0 plus the Gumbel noise): add a "
                         "constant offset of value i to log_f0[i] instead")
    log_f0 = jnp.asarray(log_f0)
    if log_f0.ndim != 1:
        raise ValueError(f"log_f0 must have shape [num_arms], got {log_f0.shape}")
    n_arms = log_f0.shape[0]
    if not callable(rewards) and jnp.ndim(rewards) == 2 and jnp.shape(rewards)[0] != n_arms:
        raise ValueError(f"log_f0 has {n_arms} entries but rewards has {jnp.shape(rewards)[0]} rows: "
                         "give one log prior factor per arm (row of rewards)")
    if population_sizes is not None and not hasattr(population_sizes, "aval") and len(population_sizes) != n_arms:
        raise ValueError(f"population_sizes has {len(population_sizes)} entries but log_f0 has {n_arms}: "
                         "give one size per arm")
    if callable(rewards):
        if population_size is None:
            raise ValueError("rewards is a function: pass population_size=N (with population_sizes: the largest)")
        n_total = int(population_size)
    else:
        n_total = jnp.shape(rewards)[-1]
    check_tie_share(tie_share)
    if tie_share and population_sizes is None and method not in ("lil_ucb", "exact"):
        delta = race_options.get("delta", 0.05)
        race_options = dict(race_options, delta=(1.0 - tie_share) * delta,
                            resolution=jnp.log1p(tie_share * delta) / n_total)
    gumbel, key_race = _gumbel(key, n_arms)
    # Eq. 3 divides the prior and the noise by N to compare means; unequal populations compare totals
    offsets = log_f0 + gumbel if population_sizes is not None else (log_f0 + gumbel) / n_total
    race = best_arm(
        key_race, rewards, method=method, arm_offset=offsets, num_arms=n_arms,
        population_size=n_total, population_sizes=population_sizes, **race_options,
    )
    return DiscreteSample(race.arm, race, gumbel)


def check_tie_share(tie_share) -> float:
    """``tie_share`` as a float in ``[0, 1)`` (the share of ``delta`` given to near-ties: of the
    Gumbel-perturbed values here, of ``log u`` and the MH ratio in
    :func:`~subsample_mcmc.kernels.mh.racing_mh_accept`), or a ``ValueError`` naming it."""
    if isinstance(tie_share, (bool, str, bytes)) or not 0.0 <= float(tie_share) < 1.0:
        raise ValueError(f"tie_share must lie in [0, 1) (the share of delta given to near-ties; 0: races right "
                         f"for every noise draw or u), got {tie_share!r}")
    return float(tie_share)


def _gumbel(key: jax.Array, n_arms: int):
    """``(eps [n_arms], race key)``: the noise of Eq. 2 that :func:`sample_discrete` draws on ``key``."""
    key_gumbel, key_race = jax.random.split(key)
    return jax.random.gumbel(key_gumbel, (n_arms,), dtype=jnp.float32), key_race


def sample_discrete_exact(key: jax.Array, log_f0: jax.Array, totals: jax.Array) -> jax.Array:
    r"""Eq. 2 itself from the full sums ``totals[i] = sum_n log f_n(i)``:
    ``argmax_i log f0(i) + totals[i] + eps_i`` with the Gumbel noise :func:`sample_discrete`
    draws on the same ``key`` (so it is the exact draw coupled to the race, without the
    race's reading machinery: the caller sums the data however it reads fastest).  A total of
    ``-inf`` (some datum has probability 0 under value ``i``) gives ``i`` probability 0, as in
    Eq. 2.  Returns the index as int32, or ``-1`` when a total is NaN or ``+inf`` or every
    value has probability 0 (nothing to draw)."""
    log_f0, totals = jnp.asarray(log_f0), jnp.asarray(totals)
    gumbel, _ = _gumbel(key, log_f0.shape[0])
    score = log_f0.astype(totals.dtype) + totals + gumbel.astype(totals.dtype)
    ok = ~jnp.any(jnp.isnan(score) | (score == jnp.inf)) & jnp.any(jnp.isfinite(score))
    return jnp.where(ok, jnp.argmax(score), -1).astype(jnp.int32)
