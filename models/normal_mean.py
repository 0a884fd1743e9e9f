r"""A fixed null model against a free mean: a parameter-free candidate with a closed-form Bayes factor
(the check on :class:`~subsample_mcmc.numpyro.ModelSelection`'s parameter-free candidates).

    null:  y_n ~ N(0, 1);        alt:  mu ~ N(0, 1),  y_n | mu ~ N(mu, 1)      (n = 1 .. N).

Both likelihoods depend on the data through ``ybar`` alone (the rest cancels in the ratio), and
``ybar ~ N(0, 1/N)`` under null, ``ybar ~ N(0, 1 + 1/N)`` under alt, so

    log B(alt : null) = log N(ybar; 0, 1 + 1/N) - log N(ybar; 0, 1/N)
                      = -1/2 log(1 + N) + N^2 ybar^2 / (2 (N + 1)),

which is 0 at ``ybar^2 = log(1 + N) (N + 1) / N^2`` (:func:`balanced_data` puts ``ybar`` just below).
The posterior of ``mu`` under alt is ``N(N ybar / (N + 1), 1 / (N + 1))``.
"""

from __future__ import annotations

import numpy as np
import numpyro
import numpyro.distributions as dist


def null(y):
    """``y_n ~ N(0, 1)``: no latent site."""
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("obs", dist.Normal(0.0, 1.0), obs=y)


def alt(y):
    """``mu ~ N(0, 1)``, ``y_n ~ N(mu, 1)``."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("obs", dist.Normal(mu, 1.0), obs=y)


def alt_probability(y) -> float:
    """``p(alt | y)`` under equal prior model probabilities (the closed form above)."""
    n, ybar = len(y), float(np.mean(y))
    log_bf = -0.5 * np.log1p(n) + n * n * ybar * ybar / (2 * (n + 1))
    return float(1 / (1 + np.exp(-log_bf)))


def balanced_data(n: int, seed: int = 4, shrink: float = 0.98) -> np.ndarray:
    """``n`` standard normal draws shifted so that ``ybar`` is ``shrink`` times the balancing value
    (``p(alt | y)`` near 1/2; float64)."""
    noise = np.random.default_rng(seed).normal(size=n)
    return noise - noise.mean() + shrink * np.sqrt(np.log1p(n) * (n + 1)) / n
