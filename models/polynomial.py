r"""Polynomial regression of unknown degree: a model-selection instance with closed-form
evidences (the check on :class:`~subsample_mcmc.numpyro.ModelSelection`).

For degree ``d`` the features are ``phi(x) = (1, x, x^2, .., x^d)`` of a standardised ``x``,
the prior is conjugate and the noise known:

    beta ~ N(0, tau^2 I_{d+1}),    y_n | beta ~ N(phi(x_n)' beta, sigma^2)   (n = 1 .. N).

Marginally ``y ~ N(0, sigma^2 I + tau^2 Phi Phi')``, so the evidence is a Gaussian integral;
with ``A = Phi' Phi / sigma^2 + I / tau^2`` and ``b = Phi' y / sigma^2`` (Woodbury and the
matrix determinant lemma, O(N d^2)):

    log p(y | d) = -N/2 log(2 pi sigma^2) - y'y / (2 sigma^2) + b' A^{-1} b / 2
                   - 1/2 log det A - (d+1) log tau,

and ``p(d | y) ∝ pi(d) p(y | d)`` (:func:`model_probabilities`).  :func:`polynomial_models`
returns the NumPyro models (named ``degree0``, ``degree1``, ...) that
``ModelSelection`` takes; :func:`simulate` draws data with a chosen cubic term so that
neighbouring degrees can be made nearly equally probable.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["features", "polynomial_model", "polynomial_models", "log_evidence", "model_probabilities", "simulate"]


def features(x, degree: int):
    """``[N, degree + 1]`` powers ``x^0 .. x^degree`` (NumPy or JAX).  Pass a standardised ``x``:
    the models see one data slice at a time, so they cannot standardise it themselves."""
    xp = np if isinstance(x, np.ndarray) else __import__("jax.numpy", fromlist=["numpy"])
    return xp.stack([x ** j for j in range(int(degree) + 1)], axis=-1)


def polynomial_model(degree: int, prior_scale: float = 1.0, noise_scale: float = 1.0):
    """The NumPyro model of degree ``degree``: ``model(x, y)`` with site ``beta`` ``[d + 1]``
    and observed ``y`` in the plate ``data``."""
    import numpyro
    import numpyro.distributions as dist

    degree = int(degree)
    if degree < 0:
        raise ValueError(f"degree must be >= 0, got {degree}")

    def model(x, y=None):
        phi = features(x, degree)
        beta = numpyro.sample("beta", dist.Normal(0.0, prior_scale).expand([degree + 1]).to_event(1))
        with numpyro.plate("data", phi.shape[0]):
            numpyro.sample("y", dist.Normal(phi @ beta, noise_scale), obs=y)

    model.__name__ = f"degree{degree}"
    return model


def polynomial_models(degrees: Sequence[int] = (1, 2, 3), prior_scale: float = 1.0, noise_scale: float = 1.0):
    """``{"degree<d>": model}`` for every degree (the dict ``ModelSelection`` takes)."""
    return {f"degree{int(d)}": polynomial_model(d, prior_scale, noise_scale) for d in degrees}


def log_evidence(x, y, degree: int, prior_scale: float = 1.0, noise_scale: float = 1.0) -> float:
    """``log p(y | degree)`` in closed form (module docstring), in float64."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    phi = features(x, degree)
    s2, t2 = float(noise_scale) ** 2, float(prior_scale) ** 2
    a = phi.T @ phi / s2 + np.eye(degree + 1) / t2
    b = phi.T @ y / s2
    chol = np.linalg.cholesky(a)
    w = np.linalg.solve(chol, b)
    n = y.shape[0]
    return float(-0.5 * n * np.log(2 * np.pi * s2) - 0.5 * y @ y / s2 + 0.5 * w @ w
                 - np.sum(np.log(np.diagonal(chol))) - 0.5 * (degree + 1) * np.log(t2))


def model_probabilities(x, y, degrees: Sequence[int], prior=None, prior_scale: float = 1.0,
                        noise_scale: float = 1.0) -> np.ndarray:
    """``p(d | y)`` over ``degrees`` (uniform prior unless ``prior`` is given)."""
    logs = np.array([log_evidence(x, y, d, prior_scale, noise_scale) for d in degrees])
    if prior is not None:
        logs = logs + np.log(np.asarray(prior, np.float64))
    logs -= logs.max()
    p = np.exp(logs)
    return p / p.sum()


def simulate(n: int, coefficients: Sequence[float], noise_scale: float = 1.0, seed: int = 0):
    """``(x, y)``: ``x ~ N(0, 1)``, ``y = sum_j c_j x^j + noise`` (NumPy float64 arrays, as a
    user's data arrive)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=int(n))
    phi = features(x, len(coefficients) - 1)
    y = phi @ np.asarray(coefficients, np.float64) + noise_scale * rng.normal(size=int(n))
    return x, y
