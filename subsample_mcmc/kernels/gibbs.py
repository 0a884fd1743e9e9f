r"""Gumbel-max discrete Gibbs step (Eq. 2-3): a racing draw of one discrete site.

For a discrete site ``X`` with finite support ``{v_1 .. v_D}`` and everything else fixed,
``p(X = v_i | rest) ∝ p(v_i | rest_prior) prod_n p(y_n | v_i, rest)``: the per-arm
rewards are the per-datum log-likelihoods at each support value and ``log f0`` is
the log prior (with any non-data terms).  :func:`discrete_gibbs_step` draws it with a
race (total variation at most ``delta``, Prop. 1).
"""

from __future__ import annotations

from typing import Callable

import jax

from ..racing import sample_discrete

__all__ = ["discrete_gibbs_step"]


def discrete_gibbs_step(
    key: jax.Array,
    log_prior: jax.Array,
    reward_fn: Callable[[jax.Array], jax.Array],
    population_size: int,
    **race_options,
):
    """Draw the index of the support value of a discrete site by a Gumbel-max race.

    Args:
        log_prior: ``[D]`` non-data log factor of each support value.
        reward_fn: ``indices -> [D, len(indices)]`` the arms' rewards, per-datum
            log-likelihoods at each support value.
        population_size: N.

    Returns:
        :class:`~subsample_mcmc.racing.DiscreteSample` (``value`` is the support index).
    """
    return sample_discrete(key, log_prior, reward_fn, population_size=population_size,
                           **race_options)
