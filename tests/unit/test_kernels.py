"""Pure racing MH / Gibbs transitions: exactness when forced to read all, known posteriors."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from problems import PRIOR_SD, N, Y, log_lik, log_prior
from scipy import stats

from subsample_mcmc.kernels import build_kernel, init, langevin, racing_mh_accept


def test_forced_full_race_equals_exact_mh():
    """With first_batch = N the racing test is the exact MH test on the same key."""

    @jax.jit
    def racing(key, x, xp):
        both = lambda idx: jnp.stack([log_lik(x, idx), log_lik(xp, idx)])  # noqa: E731
        acc, race = racing_mh_accept(key, both, N, log_prior(x), log_prior(xp), first_batch=N)
        return acc, race.num_rewards_read

    def exact(key, x, xp):  # the textbook MH test in float64 with the same uniform
        u = float(jnp.log(jax.random.uniform(jax.random.split(key)[0], minval=jnp.finfo(jnp.float32).tiny)))
        ll = lambda z: float(np.sum(-0.5 * ((np.asarray(Y, np.float64) - float(z[0])) / 2.0) ** 2))  # noqa: E731
        return u + float(log_prior(x)) + ll(x) < float(log_prior(xp)) + ll(xp)

    rng = np.random.default_rng(1)
    decisions = []
    for i in range(40):
        x = jnp.array([rng.normal(1.0, 0.1)], jnp.float32)
        xp = x + jnp.float32(rng.normal(0, 0.08))
        key = jax.random.PRNGKey(i)
        acc, evals = racing(key, x, xp)
        assert bool(acc) == exact(key, x, xp)
        assert int(evals) == 2 * N
        decisions.append(bool(acc))
    assert 0 < sum(decisions) < 40  # both outcomes were exercised




def test_langevin_densities_are_consistent():
    """log q(x'|x) is the density of the proposal actually drawn (checked by KS)."""
    grad = lambda x: -x  # noqa: E731
    x0 = jnp.array([0.7, -0.3])
    keys = jax.random.split(jax.random.PRNGKey(0), 4000)
    props, fwd, bwd = jax.vmap(lambda k: langevin()(k, x0, 0.5, None, grad))(keys)
    mean = x0 + 0.125 * grad(x0)
    z = (np.asarray(props) - np.asarray(mean)) / 0.5
    assert stats.kstest(z[:, 0], "norm").pvalue > 1e-3
    expected = stats.norm.logpdf(np.asarray(props), np.asarray(mean), 0.5).sum(1)
    np.testing.assert_allclose(np.asarray(fwd), expected, rtol=1e-4, atol=1e-4)
    # reverse: density of x0 under the move from x'
    back_mean = np.asarray(props) + 0.125 * (-np.asarray(props))
    expected_b = stats.norm.logpdf(np.asarray(x0)[None], back_mean, 0.5).sum(1)
    np.testing.assert_allclose(np.asarray(bwd), expected_b, rtol=1e-4, atol=1e-4)


def test_bad_proposal_name():
    with pytest.raises(ValueError, match="proposal"):
        build_kernel("hmc")


@pytest.mark.parametrize("proposal", ["random_walk", "langevin"])
def test_exact_step_is_the_full_race_with_one_pass_per_step(proposal):
    """The exact kernel (``method="exact"``) makes the proposal and draws the ``u`` of the
    racing kernel on the same key: a chain of exact steps equals the chain of races forced to read
    everything; with the current sum carried, a step costs N evaluations, not 2 N."""
    step = 0.05

    race_step = build_kernel(proposal, grad_batch_size=50, first_batch=N)
    exact_step = build_kernel(proposal, method="exact", grad_batch_size=50, chunk_size=512)

    def chains(key):
        def body(carry, k):
            race, exact = carry
            race, _ = race_step(k, race, log_prior, log_lik, N, step)
            exact, info = exact_step(k, exact, log_prior, log_lik, N, step)
            return (race, exact), (race.position[0], exact.position[0], info.num_likelihood_evals, info.accepted)

        x0 = jnp.array([1.0], jnp.float32)
        return jax.lax.scan(body, (init(x0), init(x0)), jax.random.split(key, 200))[1]

    xr, xe, evals, acc = jax.jit(chains)(jax.random.PRNGKey(4))
    np.testing.assert_allclose(np.asarray(xr), np.asarray(xe), rtol=1e-6)
    assert 0.05 < float(np.mean(acc)) < 0.95
    grads = 100 if proposal == "langevin" else 0
    evals = np.asarray(evals)
    assert evals[0] == 2 * N + grads and np.all(evals[1:] == N + grads)


def test_crank_nicolson_densities_make_it_reversible_for_its_gaussian():
    """The pCN move draws x' ~ N(c + rho (x - c), (1 - rho^2) S), rho = 1/sqrt(1 + eps^2),
    and its returned pair satisfies log q(x'|x) - log q(x|x') = log N(x'; c, S) - log N(x; c, S)
    (detailed balance for N(c, S)), checked against scipy's densities of the move."""
    from subsample_mcmc.kernels import crank_nicolson

    cov = np.array([[2.0, 0.9], [0.9, 1.0]])
    c = np.array([1.0, -2.0])
    x0 = jnp.array([2.5, -1.0])
    eps = 0.8
    rho = 1 / np.sqrt(1 + eps**2)
    keys = jax.random.split(jax.random.PRNGKey(3), 20000)
    props, fwd, bwd = jax.vmap(lambda k: crank_nicolson(math.inf)(k, x0, eps, jnp.asarray(cov, jnp.float32), None,
                                                         jnp.asarray(c, jnp.float32)))(keys)
    props = np.asarray(props, np.float64)
    mean = c + rho * (np.asarray(x0) - c)
    np.testing.assert_allclose(props.mean(0), mean, atol=0.03)
    np.testing.assert_allclose(np.cov(props.T), (1 - rho**2) * cov, atol=0.04)

    def log_q(to, frm):
        return stats.multivariate_normal.logpdf(to, c + rho * (frm - c), (1 - rho**2) * cov)

    x0n = np.asarray(x0, np.float64)
    expected = np.array([log_q(p, x0n) - log_q(x0n, p) for p in props[:200]])
    np.testing.assert_allclose(np.asarray(fwd - bwd)[:200], expected, rtol=1e-3, atol=2e-3)
    # eps = inf: the independence sampler from N(c, S)
    ind, _, _ = jax.vmap(lambda k: crank_nicolson(math.inf)(k, x0, jnp.inf, jnp.asarray(cov, jnp.float32), None,
                                                     jnp.asarray(c, jnp.float32)))(keys)
    np.testing.assert_allclose(np.asarray(ind).mean(0), c, atol=0.04)
    with pytest.raises(ValueError, match="center"):
        crank_nicolson()(keys[0], x0, eps, None, None)


def test_crank_nicolson_t_reference_leaves_its_student_t_invariant():
    """With the t reference the move (draw u | x ~ InvGamma((nu + p)/2, (nu + q(x))/2), then
    pCN at scale u) must leave t_nu(c, S) invariant on its own -- the MH ratio is 1 when the
    target is that t -- and its returned pair must be (log t(x'), log t(x)) up to one
    constant.  Checked from exact t draws against scipy's multivariate t: a wrong shape
    of u's conditional (nu/2 instead of (nu + p)/2) moves the radius law and fails."""
    from subsample_mcmc.kernels import crank_nicolson

    nu, p = 5.0, 3
    cov = np.array([[2.0, 0.9, 0.0], [0.9, 1.0, 0.3], [0.0, 0.3, 0.5]])
    c = np.array([1.0, -2.0, 0.5])
    t = stats.multivariate_t(loc=c, shape=cov, df=nu)
    x0 = jnp.asarray(t.rvs(size=20000, random_state=np.random.default_rng(0)), jnp.float32)
    keys = jax.random.split(jax.random.PRNGKey(5), x0.shape[0])
    prop = crank_nicolson(nu)
    new, fwd, bwd = jax.vmap(lambda k, x: prop(k, x, 0.7, jnp.asarray(cov, jnp.float32), None,
                                               jnp.asarray(c, jnp.float32)))(keys, x0)
    new = np.asarray(new, np.float64)
    # the radius law of t: q(x)/p ~ F(p, nu)
    prec = np.linalg.inv(cov)
    radius = np.einsum("ni,ij,nj->n", new - c, prec, new - c) / p
    assert stats.kstest(radius, stats.f(p, nu).cdf).pvalue > 1e-3
    assert abs(np.mean(new[:, 0] <= c[0]) - 0.5) < 0.015
    x0n = np.asarray(x0, np.float64)
    expected = t.logpdf(new[:300]) - t.logpdf(x0n[:300])
    np.testing.assert_allclose(np.asarray(fwd - bwd)[:300], expected, rtol=1e-3, atol=2e-3)
    # the move is not the identity and, at this eps, not an independence draw
    moved = np.linalg.norm(new - x0n, axis=1)
    assert np.median(moved) > 0.3 and np.corrcoef(new[:, 0], x0n[:, 0])[0, 1] > 0.3
    with pytest.raises(ValueError, match="df"):
        crank_nicolson(-1.0)


def test_crank_nicolson_defensive_mixture_leaves_its_mixture_invariant():
    """With ``t_weight = a`` the reference is (1 - a) N(c, S) + a t_nu(c, S): the move (pick the
    t component with its responsibility, then u | x from it, else u = 1; pCN at scale u) must
    leave that mixture invariant on its own and return (log ref(x'), log ref(x)) up to one
    constant.  From exact mixture draws: the radius law q(x) ~ (1 - a) chi2_p + a p F(p, nu) (KS)
    after a pCN move and after an independence draw, and the pair against scipy's densities.
    Choosing the component by its prior weight instead of its responsibility fails the
    independence draw's law (KS p-value 2e-16); t_weight outside [0, 1] is refused."""
    from subsample_mcmc.kernels import crank_nicolson

    nu, p, a = 5.0, 10, 0.5
    root = np.random.default_rng(1).normal(size=(p, p))
    cov = root @ root.T / p + 0.5 * np.eye(p)
    c = np.linspace(-1.0, 1.0, p)
    t = stats.multivariate_t(loc=c, shape=cov, df=nu)
    g = stats.multivariate_normal(mean=c, cov=cov)
    rng = np.random.default_rng(0)
    m = 20000
    from_t = rng.random(m) < a
    x0 = np.where(from_t[:, None], t.rvs(size=m, random_state=rng), g.rvs(size=m, random_state=rng))
    keys = jax.random.split(jax.random.PRNGKey(5), m)
    prop = crank_nicolson(nu, t_weight=a)
    new, fwd, bwd = jax.vmap(lambda k, x: prop(k, x, 0.7, jnp.asarray(cov, jnp.float32), None,
                                               jnp.asarray(c, jnp.float32)))(keys, jnp.asarray(x0, jnp.float32))
    new = np.asarray(new, np.float64)
    q = np.einsum("ni,ij,nj->n", new - c, np.linalg.inv(cov), new - c)

    def cdf(v):
        return (1 - a) * stats.chi2(p).cdf(v) + a * stats.f(p, nu).cdf(v / p)

    assert stats.kstest(q, cdf).pvalue > 1e-3
    # eps = inf: the independence draw x' ~ N(c, u S), u | x from the mixture's conditional
    ind = np.asarray(jax.vmap(lambda k, x: prop(k, x, jnp.inf, jnp.asarray(cov, jnp.float32), None,
                                                jnp.asarray(c, jnp.float32))[0])(keys, jnp.asarray(x0, jnp.float32)),
                     np.float64)
    assert stats.kstest(np.einsum("ni,ij,nj->n", ind - c, np.linalg.inv(cov), ind - c), cdf).pvalue > 1e-3
    log_ref = lambda v: np.logaddexp(np.log1p(-a) + g.logpdf(v), np.log(a) + t.logpdf(v))  # noqa: E731
    np.testing.assert_allclose(np.asarray(fwd - bwd)[:300], log_ref(new[:300]) - log_ref(x0[:300]),
                               rtol=1e-3, atol=2e-3)
    moved = np.linalg.norm(new - x0, axis=1)
    assert np.median(moved) > 0.3 and np.corrcoef(new[:, 0], x0[:, 0])[0, 1] > 0.3
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="t_weight"):
            crank_nicolson(nu, t_weight=bad)


def _rare_event_chains(proposal, n_chains=8, n_steps=20000):
    """Exact-MH pCN chains at eps = inf on a rare-event Poisson rate: 3 events in N = 2000,
    s = log rate, posterior ~ exp(3 s - N e^s) -- a log-gamma with an exponential left
    tail, heavier than its Laplace approximation N(log(3/N), 1/3)."""
    n, k = 2000, 3
    y = jnp.zeros(n).at[:k].set(1.0)
    mode = jnp.array([np.log(k / n)])

    def log_lik(x, idx):
        return y[idx] * x[0] - jnp.exp(x[0])

    step = build_kernel(proposal, method="exact")

    def run(key):
        def body(state, kk):
            state, _ = step(kk, state, log_prior, log_lik, n, jnp.inf, jnp.array([1.0 / k]), center=mode)
            return state, state.position[0]

        return jax.lax.scan(body, init(mode), jax.random.split(key, n_steps))[1]

    xs = jax.jit(jax.vmap(run))(jax.random.split(jax.random.PRNGKey(0), n_chains))
    grid = np.linspace(-25.0, 0.0, 200001)
    log_post = k * grid - n * np.exp(grid) - 0.5 * (grid / PRIOR_SD) ** 2
    cdf = np.cumsum(np.exp(log_post - log_post.max()))
    q01 = grid[np.searchsorted(cdf / cdf[-1], 0.01)]
    return np.asarray(xs, np.float64)[:, 500:], q01


def test_crank_nicolson_t_reference_covers_a_tail_its_gaussian_misses():
    """The tail the default (Student-t) reference exists for: on a posterior whose left tail
    is exponential, each independence chain puts 1% of its draws below the exact 1%
    quantile (binomial spread across chains), and so does the defensive mixture half N, half
    t; with the Gaussian reference pi/N is unbounded, chains stick in the tail or miss it, and
    the same check fails."""
    from subsample_mcmc.kernels import crank_nicolson

    def tail_spread(xs, q01):
        freq = (xs < q01).mean(axis=1)
        binomial_sd = np.sqrt(0.01 * 0.99 / xs.shape[1])
        return abs(freq.mean() - 0.01), freq.std(ddof=1) / binomial_sd

    bias, spread = tail_spread(*_rare_event_chains(crank_nicolson()))
    assert bias < 0.0015 and spread < 2.5, (bias, spread)
    # the defensive mixture (1 - a) N + a t at a = 1/2 (RacingMH's weight at p = 4) keeps the cover
    bias_m, spread_m = tail_spread(*_rare_event_chains(crank_nicolson(t_weight=0.5)))
    assert bias_m < 0.0015 and spread_m < 2.5, (bias_m, spread_m)
    bias_g, spread_g = tail_spread(*_rare_event_chains(crank_nicolson(math.inf)))
    assert spread_g > 3.0, (bias_g, spread_g)




def test_pareto_k_hat_agrees_with_arviz_and_finds_known_tail_indices():
    """PSIS's k (Vehtari et al. 2024) in JAX against ArviZ's ``psislw`` on the same weights,
    and against tails of known index: Pareto weights ``U^(-k)`` (index k), a target t_1 over a
    t_5 reference (index 4/5) and bounded weights (k < 0)."""
    import arviz as az

    from subsample_mcmc.kernels.proposals import pareto_k_hat

    rng = np.random.default_rng(0)
    x = rng.standard_t(5.0, 4000)
    cases = {
        "pareto_0.3": (0.3 * np.log(1 / rng.uniform(size=4000)), 0.3),
        "pareto_0.8": (0.8 * np.log(1 / rng.uniform(size=4000)), 0.8),
        "cauchy_over_t5": (stats.cauchy.logpdf(x) - stats.t.logpdf(x, 5.0), 0.8),
        "bounded": (np.log(rng.uniform(size=4000)), None),
    }
    for name, (lw, k_true) in cases.items():
        k = float(pareto_k_hat(jnp.asarray(lw)))
        assert abs(k - float(az.psislw(lw)[1])) < 1e-3, name
        if k_true is None:
            assert k < 0, (name, k)
        else:
            assert abs(k - k_true) < 0.2, (name, k)
    lw = rng.normal(size=4000)
    lw[:300] = -np.inf  # outside the target's support
    assert abs(float(pareto_k_hat(jnp.asarray(lw))) - float(az.psislw(lw)[1])) < 1e-3
    assert float(pareto_k_hat(jnp.zeros(4000))) == -np.inf  # the target is the reference


def test_reference_k_hat_separates_a_glm_like_target_from_a_funnel():
    """The automatic choice's statistic: a correlated Gaussian target (its own Laplace
    approximation) has bounded weights against the t (k < 0); a funnel -- x_2 | x_1 ~ N(0,
    exp(2 x_1)), x_1 ~ N(0, 1), reference N(0, I) -- has unbounded weights (k > 0.3), as has a target heavier than the t (t_2)."""
    from subsample_mcmc.kernels.proposals import reference_k_hat

    key = jax.random.PRNGKey(0)
    cov = jnp.array([[1.0, 0.9], [0.9, 1.0]])
    gauss = lambda x: jax.scipy.stats.multivariate_normal.logpdf(x, jnp.zeros(2), cov)  # noqa: E731
    assert float(reference_k_hat(key, gauss, jnp.zeros(2), cov)) < 0

    def funnel(x):
        return stats_norm_logpdf(x[0], 1.0) + stats_norm_logpdf(x[1], jnp.exp(x[0]))

    assert float(reference_k_hat(key, funnel, jnp.zeros(2), jnp.ones(2))) > 0.3
    heavy = lambda x: jnp.sum(jax.scipy.stats.t.logpdf(x, 2.0))  # noqa: E731
    assert float(reference_k_hat(key, heavy, jnp.zeros(2), jnp.ones(2))) > 0.3
    # the Gaussian reference: lighter than the t, so a Gaussian target is no longer safely bounded
    assert float(reference_k_hat(key, heavy, jnp.zeros(2), jnp.ones(2), df=math.inf)) > 0.5


def stats_norm_logpdf(x, scale):
    return jax.scipy.stats.norm.logpdf(x, 0.0, scale)


def _student_t_regression(n=3000, seed=5):
    """Heavy-tailed data (Student-t(2) noise, NumPy float64 as a user brings it) for a Student-t
    regression whose datum log-likelihood sees ``beta`` only through ``z = beta^T x``."""
    rng = np.random.default_rng(seed)
    x = np.c_[np.ones(n), rng.normal(size=n)]
    y = x @ np.array([0.5, -1.0]) + rng.standard_t(2.0, size=n)

    def datum(z, w):
        return stats_t_logpdf(w - z[0], 2.0)

    def log_lik_t(beta, idx):
        return jax.vmap(datum)(jnp.asarray(x)[idx] @ beta[:, None], jnp.asarray(y)[idx])

    return x, y, datum, log_lik_t


def stats_t_logpdf(r, nu):
    return (jax.scipy.special.gammaln((nu + 1) / 2) - jax.scipy.special.gammaln(nu / 2)
            - 0.5 * jnp.log(nu * jnp.pi) - (nu + 1) / 2 * jnp.log1p(r ** 2 / nu))


def test_feature_control_variate_mh_race_decides_as_the_exact_test():
    """The MH race with a feature-space control variate (``ArmControlVariates``: proxies in
    ``z = beta^T x`` at both arms, the largest-residual points read exactly) on heavy-tailed
    Student-t regression: forced to read every raced point it *is* the exact MH test (a wrong
    proxy sum or offset flips decisions); with its default schedule it disagrees with the exact test
    on the same key at most at rate delta (binomial test), stops early on most steps, and counts
    both arms' log-likelihoods at every point and their proxies at the raced ones."""
    from scipy.stats import binom

    from subsample_mcmc.racing import ArmControlVariates, linear_feature_proxy

    x, y, datum, ll = _student_t_regression()
    n = x.shape[0]
    center = np.array([0.5, -1.0])
    proxy = linear_feature_proxy(datum, center[None, :], x, y, order=3, sums=False)
    resid = np.abs(np.asarray(jax.vmap(lambda w, z: datum(z, w))(jnp.asarray(y), jnp.asarray(x @ center)[:, None])))
    order = np.argsort(-resid)
    exact_idx, raced_idx = np.sort(order[: n // 10]), np.sort(order[n // 10:])
    proxy = proxy.restricted(raced_idx)
    prior = lambda b: -0.5 * jnp.sum((b / 10.0) ** 2)  # noqa: E731

    def cv_fn(b, b_new):
        return ArmControlVariates((proxy, proxy), (b[None, :], b_new[None, :]), jnp.asarray(raced_idx),
                                  jnp.asarray(exact_idx))

    full = build_kernel("random_walk", delta=0.05, first_batch=len(raced_idx))
    raced = build_kernel("random_walk", delta=0.05)
    exact = build_kernel("random_walk", method="exact")
    scale = jnp.asarray([0.03, 0.03])

    @jax.jit
    def steps(key, b):
        kw = dict(log_prior_fn=prior, log_likelihood_fn=ll, population_size=n, step_size=scale)
        s_full, i_full = full(key, init(b), control_variate_fn=cv_fn, **kw)
        s_race, i_race = raced(key, init(b), control_variate_fn=cv_fn, **kw)
        s_exact, _ = exact(key, init(b), **kw)
        return i_full.accepted, i_race.accepted, s_exact.position[0] != b[0], i_race.num_likelihood_evals, i_race.race_stage

    rng = np.random.default_rng(2)
    full_acc, race_acc, exact_acc, evals, stages = zip(*[
        steps(jax.random.PRNGKey(i), jnp.asarray(center + rng.normal(0, 0.03, 2), jnp.float32)) for i in range(300)])
    full_acc, race_acc, exact_acc = (np.asarray(v, bool) for v in (full_acc, race_acc, exact_acc))
    assert 20 < exact_acc.sum() < 280  # both outcomes exercised
    assert np.array_equal(full_acc, exact_acc)
    wrong = int(np.sum(race_acc != exact_acc))
    assert binom.sf(wrong - 1, 300, 0.05) > 1e-3, wrong
    stages, evals = np.asarray(stages), np.asarray(evals)
    assert np.mean(stages == 1) > 0.5  # the control variate lets most races stop at their first batch
    assert np.all(evals % 2 == 0) and np.all(evals >= 2 * (len(exact_idx) + 2 * 50))
    assert np.mean(evals) < n  # cheaper than the exact step's N




def test_a_race_out_of_budget_hands_over_to_the_exact_test_with_the_same_u():
    """``max_race_fraction``: a race undecided at its budget (here the stage boundary at 100 of N = 2,000
    points) is replaced by the exact MH test on the same key, so those steps decide as the exact step does,
    and their two full-data passes are counted; with no budget the same steps read further."""
    keys = jax.random.split(jax.random.PRNGKey(8), 400)
    x0 = init(jnp.array([float(np.mean(np.asarray(Y)))], jnp.float32))
    capped = build_kernel("random_walk", max_race_fraction=0.05)
    free = build_kernel("random_walk")
    exact = build_kernel("random_walk", method="exact")

    def one(step_fn):
        def run(k):
            st, info = step_fn(k, x0, log_prior, log_lik, N, 0.05)
            return st.position[0], st.log_likelihood_sum, info.accepted, info.num_likelihood_evals
        return jax.jit(jax.vmap(run))(keys)

    xc, llc, acc_c, ev_c = (np.asarray(v) for v in one(capped))
    xf, _, acc_f, ev_f = (np.asarray(v) for v in one(free))
    xe, lle, acc_e, _ = (np.asarray(v) for v in one(exact))
    handed = ev_c > 2 * N  # both arms at 100 points, then the two full passes
    assert 10 <= handed.sum() < len(keys)
    np.testing.assert_array_equal(ev_c[handed], 2 * 100 + 2 * N)
    np.testing.assert_array_equal(acc_c[handed], acc_e[handed])
    np.testing.assert_array_equal(xc[handed], xe[handed])
    np.testing.assert_allclose(llc[handed], lle[handed], rtol=1e-5)  # the exact step's sum, now known
    assert np.all(np.isnan(llc[~handed]))
    assert np.all(ev_f[handed] > 2 * 100)  # without a budget those races read on
    np.testing.assert_array_equal(acc_c[~handed], acc_f[~handed])  # decided in budget: the same race
    assert np.mean(acc_f != acc_e) <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / len(keys))


def test_shared_space_arms_keep_the_current_point_and_draw_the_others_from_their_pseudopriors():
    """Step 1 of the product-space move over values sharing one parameter space: the current arm keeps
    ``theta`` exactly, the others are draws from their Gaussians (means and sds within 5 se over 4,000
    draws), and the log densities are those of :func:`pseudoprior_log_density`."""
    from subsample_mcmc.kernels import pseudoprior, pseudoprior_log_density, shared_space_arms

    g = jax.tree.map(lambda *a: jnp.stack(a), *[pseudoprior(jnp.array([m, -m]), jnp.array([[s, 0.0], [0.0, 1.0]]))
                                                 for m, s in ((0.0, 1.0), (3.0, 4.0), (-2.0, 0.25))])
    theta = jnp.array([10.0, 20.0])
    thetas, log_g = jax.vmap(lambda k: shared_space_arms(k, 1, theta, g))(jax.random.split(jax.random.PRNGKey(0), 4000))
    np.testing.assert_array_equal(np.asarray(thetas[:, 1]), np.broadcast_to(np.asarray(theta), (4000, 2)))
    for j, (m, s) in ((0, (0.0, 1.0)), (2, (-2.0, 0.25))):
        x = np.asarray(thetas[:, j, 0], np.float64)
        assert abs(x.mean() - m) < 5 * np.sqrt(s / 4000) and abs(x.var() / s - 1) < 5 * np.sqrt(2 / 4000)
    expected = jax.vmap(lambda t: jax.vmap(pseudoprior_log_density)(t, g))(thetas)
    np.testing.assert_allclose(np.asarray(log_g), np.asarray(expected), rtol=1e-6)
