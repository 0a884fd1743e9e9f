"""RacingGibbs where a discrete value moves the continuous sites' posterior by many sds.

A one-site-at-a-time Gibbs chain started in one configuration cannot leave it there (at the
continuous values that fit it, every other value is worse); RacingGibbs's joint moves (the
continuous sites drawn from another configuration's Laplace approximation, accepted by the
race) must reach the posterior over configurations.  Data are NumPy float64 arrays, kernels at
their defaults.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, NUTS
from scipy import special, stats

from sizes import size
from subsample_mcmc import RacingGibbs, RacingMH
from subsample_mcmc.numpyro import check_discrete_chains

NU = np.array([1.0, 2.0, 3.0, 5.0, 8.0, 30.0])


def dof_model(y):
    k = numpyro.sample("k", dist.Categorical(probs=np.ones(6) / 6))
    loc = numpyro.sample("loc", dist.Normal(0.0, 5.0))
    scale = numpyro.sample("scale", dist.HalfNormal(5.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.StudentT(jnp.asarray(NU)[k], loc, scale), obs=y)


def _dof_data(n=20_000):
    return 0.5 + 1.2 * np.random.default_rng(4).standard_t(4.0, size=n)


def _profile_log_likelihood(y):
    """The maximised log-likelihood of each ``nu`` (scipy, float64)."""
    out = []
    for nu in NU:
        _, loc, scale = stats.t.fit(y, f0=nu)
        out.append(float(np.sum(stats.t.logpdf(y, nu, loc, scale))))
    return np.array(out)


def _run(kernel, y, num_chains, num_warmup, num_samples, seed=0, init_params=None):
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
                chain_method="sequential", progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        mcmc.run(jax.random.PRNGKey(seed), y, init_params=init_params)
    return mcmc


@pytest.mark.parametrize("method", ["normal", "exact"])
def test_chains_find_the_degrees_of_freedom_a_single_site_chain_cannot_reach(method):
    """Student-t data (tail index 4, N = 20,000), nu on the grid [1, 2, 3, 5, 8, 30] beside loc and
    scale.  At the scale fitted for one nu every other nu is worse, so a one-site-at-a-time chain keeps
    the nu it started with (before the joint moves: every draw of 4 of 4 chains at nu = 3, with R-hat
    blind to it).  The profile log-likelihood puts nu = 5 ahead of its neighbours by more than 10 nats;
    each chain must spend more than 95% of its draws there.  Three of the four chains start in the trap
    (nu = 1, 2, 3), one above (nu = 8).  A kernel without the joint move (mutant, measured): chains
    started at nu = 1, 2 or 3 put 500 of 500 draws at nu = 3, p(nu = 5) = 0."""
    y = _dof_data()
    profile = _profile_log_likelihood(y)
    best = int(np.argmax(profile))
    assert NU[best] == 5.0 and np.sort(profile)[-1] - np.sort(profile)[-2] > 10.0
    num_chains = 4
    mcmc = _run(RacingGibbs(dof_model, inner_kernel=RacingMH(dof_model), method=method), y, num_chains,
                size(300, 500), size(500, 1500), init_params={"k": np.array([0, 1, 2, 4], np.int32)})
    k = np.asarray(mcmc.get_samples(group_by_chain=True)["k"])
    share = (k == best).mean(axis=1)
    assert np.all(share > 0.95), f"p(nu = 5) by chain: {share}"
    state = mcmc.last_state
    assert np.all(np.asarray(state.joint_moves)), "init should have measured the coupling and turned joint moves on"
    assert [r.problem for r in check_discrete_chains(mcmc, warn=False)] == [None]


def shift_model(y):
    k = numpyro.sample("k", dist.Bernoulli(0.5))
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu + 3.0 * k, 1.0), obs=y)


def _shift_posterior(y):
    """Closed form: mu | k, y ~ N(m_k, 1 / (1 + N)) with m_k = sum(y - 3k) / (1 + N), and
    log p(y | k) up to a constant shared by both k: s_k^2 / (2 (1 + N)) - sum(y - 3k)^2 / 2."""
    n = y.shape[0]
    sums = np.array([np.sum(y), np.sum(y - 3.0)])
    squares = np.array([np.sum(y ** 2), np.sum((y - 3.0) ** 2)])
    log_evidence = sums ** 2 / (2 * (1 + n)) - squares / 2
    p = np.exp(log_evidence - special.logsumexp(log_evidence))
    return p, sums / (1 + n), 1.0 / np.sqrt(1 + n)


@pytest.mark.parametrize("inner", ["racing_mh", "nuts"])
def test_joint_moves_sample_a_closed_form_posterior_over_configurations(inner):
    """``y_n ~ N(mu + 3k, 1)``, ``k ~ Bernoulli(1/2)``, ``mu ~ N(0, 1)``, N = 400 (NumPy float64): mu's
    conditional modes for k = 0 and k = 1 lie 3 apart, 60 posterior sds, so only a joint move changes k;
    the prior on mu makes p(k = 1 | y) about 0.2 (closed form).  The chains' share of k = 1 and mu's
    mean given each k must match the closed form within 4 Monte Carlo standard errors (ArviZ-free:
    batch means over 20 batches per chain).  A one-site chain (mutant) has p(k = 1) of 0 or 1 per chain,
    tens of standard errors from 0.2.  Also with an inner NUTS, whose cached potential energy and gradient
    the joint moves must refresh (a mutant that refreshes only when k changes passes here: the stale case,
    a conditional flip followed by a joint move back, needs a coupling this posterior's 60 sds rule out)."""
    rng = np.random.default_rng(11)
    y = rng.normal(1.0, 1.0, size=400)
    p, means, sd = _shift_posterior(y)
    assert 0.05 < p[1] < 0.5
    inner_kernel = RacingMH(shift_model) if inner == "racing_mh" else NUTS(shift_model)
    mcmc = _run(RacingGibbs(shift_model, inner_kernel=inner_kernel), y, 2, size(300, 500),
                size(2000, 6000), seed=1)
    samples = mcmc.get_samples(group_by_chain=True)
    k = np.asarray(samples["k"], np.float64)
    mu = np.asarray(samples["mu"], np.float64)

    def batch_se(x):
        batches = np.concatenate([b.reshape(20, -1).mean(1) for b in x])
        return batches.mean(), batches.std(ddof=1) / np.sqrt(batches.size)

    share, se = batch_se(k)
    assert abs(share - p[1]) < 4 * max(se, 0.005), (share, p[1], se)
    for value in (0, 1):
        z = (mu[k == value] - means[value]) / sd
        # the conditional's draws standardised: mean 0 and sd 1 (a wrong mean is off by tens of sds)
        assert abs(z.mean()) < 0.5 and 0.7 < z.std() < 1.4, (value, z.mean(), z.std())
