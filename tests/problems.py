"""Small problems that unit and statistical tests share (one home each)."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from scipy.optimize import brentq

from subsample_mcmc import LinearFeatureControlVariate
from subsample_mcmc.models import polynomial as pm
from subsample_mcmc.racing import sample_discrete

# -- a normal mean with known sd (tests of the pure MH kernels) ----------------------------------

N = 2000
Y = jnp.asarray(np.random.default_rng(0).normal(1.0, 2.0, N).astype(np.float32))
PRIOR_SD = 10.0


def log_prior(x):
    return -0.5 * jnp.sum((x / PRIOR_SD) ** 2)


def log_lik(x, idx):
    return -0.5 * ((Y[idx] - x[0]) / 2.0) ** 2


# -- Gumbel-max discrete sampling (Eq. 2-3) -------------------------------------------------------

def discrete_problem(n=2000, d=6, sigma=0.02, seed=0):
    rng = np.random.default_rng(seed)
    raw = rng.standard_normal((d, n))
    raw = (raw - raw.mean(1, keepdims=True)) / raw.std(1, keepdims=True)
    p = np.arange(1, d + 1, dtype=np.float64)
    p /= p.sum()
    log_fn = (sigma * raw + np.log(p)[:, None] / n).astype(np.float32)
    # exact law of X for these float32 rewards
    logits = log_fn.astype(np.float64).sum(1)
    q = np.exp(logits - logits.max())
    return jnp.asarray(log_fn), q / q.sum()


def discrete_draws(log_fn, method, delta, num):
    d = log_fn.shape[0]

    def one(k):
        s = sample_discrete(k, jnp.zeros(d), log_fn, method=method, delta=delta)
        return s.value, s.gumbel, s.race.num_rewards_read

    keys = jax.random.split(jax.random.PRNGKey(42), num)
    return jax.jit(lambda ks: jax.lax.map(one, ks))(keys)


# -- races over arms with populations of different sizes (App. C.3) -------------------------------

def unequal_problem(dist, seed, num_arms=8, max_size=3000, scale=3.0):
    """Power-law sizes (one arm full, one half), rewards of ``dist``, offsets that leave a close second."""
    rng = np.random.default_rng(seed)
    sizes = np.minimum((rng.pareto(1.0, num_arms) * 30 + 1).astype(int), max_size)
    sizes[0], sizes[1] = max_size, max_size // 2
    draw = {"normal": lambda s: rng.normal(0.0, 1.0, s),
            "lognormal": lambda s: rng.lognormal(0.0, 1.5, s),
            "rare": lambda s: (rng.random(s) < 0.01) * 5.0}[dist]
    rewards = np.where(np.arange(max_size)[None] < sizes[:, None], draw((num_arms, max_size)), 0.0)
    totals = rewards.sum(1)
    sd = np.sqrt(np.maximum(rewards.var(1) * sizes, 1e-9))
    offsets = -totals + scale * sd * rng.normal(0.0, 1.0, num_arms)
    offsets[1] = offsets[0] - totals[1] + totals[0] + 0.5 * scale * sd[0]
    return rewards.astype(np.float32), sizes, offsets.astype(np.float32), int(np.argmax(offsets + totals))


# -- polynomial degree selection with closed-form evidences (ModelSelection) -------------------

DEGREES = (1, 2, 3)


def balanced_polynomial(n, seed, target=0.0):
    """Data whose cubic coefficient makes log p(y | 3) - log p(y | 2) = ``target`` exactly
    (found by root finding on the closed-form evidences), so that two degrees share the
    posterior and a sampler's probabilities are informative."""
    x, noise = pm.simulate(n, [0.0], seed=seed)

    def data(c3):
        return x, 0.5 + 0.3 * x - 0.2 * x ** 2 + c3 * x ** 3 + noise

    def gap(c3):
        return pm.log_evidence(*data(c3), 3) - pm.log_evidence(*data(c3), 2) - target

    return data(brentq(gap, 0.0, 0.2))


def assert_within_3_se(post, exact):
    z = np.abs(post.probabilities - exact) / np.maximum(post.stderr, 1e-12)
    ok = (np.abs(post.probabilities - exact) < 1e-9) | (z <= 3.0)
    assert np.all(ok), (post, exact, z)


def polynomial_control_variates(x, y, noise_scale=1.0):
    """The model race's control variate in each degree's linear predictor z = phi(x)' beta."""
    return {f"degree{d}": LinearFeatureControlVariate(
        lambda v: v["beta"][None, :], lambda z, w: dist.Normal(z[0], noise_scale).log_prob(w), pm.features(x, d), y)
        for d in DEGREES}


# -- positive data under two rate models (ModelSelection names them "exponential" and "gamma2") --

def exponential(y):
    rate = numpyro.sample("rate", dist.Gamma(1.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Exponential(rate), obs=y)


def gamma2(y):
    rate = numpyro.sample("rate", dist.Gamma(1.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Gamma(2.0, 2.0 * rate), obs=y)
