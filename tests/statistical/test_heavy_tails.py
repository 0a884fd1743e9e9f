"""The race keeps its error promise on skewed, heavy-tailed rewards (the heavy-tail battery).

Every cell (reward family x D x delta) runs many races on one fixed population and
compares each with the exact Gumbel-max draw for the same noise; the whole 99%
Clopper-Pearson interval of the error rate must not lie above delta.  The plain
Racing-Normal bound (``heavy_tail_guard=False``) fails the same test, which shows the
test can fail.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest

from subsample_mcmc.racing import clopper_pearson, sample_discrete
from subsample_mcmc.testing import FAMILIES, make_heavy_problem, run_cell

N = 5000
RACES = 300
DELTAS = (0.001, 0.01, 0.05)


def _problem(family, num_arms):
    pr = make_heavy_problem(family, num_arms, N, seed=1)
    return pr._replace(rewards=jnp.asarray(pr.rewards))


@pytest.mark.parametrize("num_arms", [2, 6, 30])
def test_battery_error_at_most_delta(num_arms):
    failures = []
    for family in FAMILIES:
        problem = _problem(family, num_arms)
        for delta in DELTAS:
            rec = run_cell(problem, delta=delta, num_races=RACES)
            if rec["exceeds"]:
                failures.append((family, delta, rec["errors"]))
    assert not failures, f"error rate above delta (family, delta, errors/{RACES}): {failures}"


def test_plain_normal_bound_fails_the_battery():
    """Without the guard the Student-t cell errs far above delta: the battery has power."""
    problem = _problem("student_t", 2)
    rec = run_cell(problem, delta=0.001, num_races=RACES, heavy_tail_guard=False)
    assert rec["exceeds"], rec
    guarded = run_cell(problem, delta=0.001, num_races=RACES)
    assert not guarded["exceeds"], guarded


def test_issue_repro_student_t_degrees_of_freedom():
    """The reported case: nu in 1..30 for 0.8 t_4 data, N = 5e4; racing draws differed from
    exact draws (same key) in 2.3% / 1.8% / 1.4% of draws at delta 0.05 / 0.01 / 0.001."""
    n = 50_000
    r = jnp.asarray(0.8 * np.random.default_rng(0).standard_t(4, n), jnp.float32)
    nus = jnp.arange(1, 31, dtype=jnp.float32)

    def f(idx):
        return dist.StudentT(nus[:, None], 0.0, 0.8).log_prob(r[idx][None, :])

    races = 400
    for delta in (0.01, 0.001):
        @jax.jit
        def both(k, delta=delta):
            a = sample_discrete(k, jnp.zeros(30), f, population_size=n, delta=delta)
            b = sample_discrete(k, jnp.zeros(30), f, population_size=n, method="exact")
            return a.value, b.value

        a, b = jax.lax.map(lambda k: both(k), jax.random.split(jax.random.PRNGKey(1), races))
        errors = int(jnp.sum(a != b))
        lower, _ = clopper_pearson(errors, races, level=0.99)
        assert lower <= delta, (delta, errors)




@pytest.mark.parametrize("family", ["pareto_1.1", "normal_scale_t3", "logistic_scale_t2.05"])
def test_infinite_variance_differences_error_at_most_delta(family):
    """Issue 58 item 2 at CI size, with the defaults (the tail-index width of
    ``NormalBound(tail_index_guard=True)`` on): differences of tail index 1.1 (one-sided Pareto), 1.5 (Normal
    scale grid on t_3 data) and 2.05 (logistic scale grid on t_2.05 data); every cell's 99%
    Clopper-Pearson interval reaches delta (benchmarks/results/racing_heavy_tails_infinite.md at
    full size).  Without the tail-index width the Pareto cell fails at delta = 0.001
    (:func:`test_infinite_variance_cell_fails_without_tail_index_width`)."""
    from subsample_mcmc.testing import make_infinite_problem

    kw = {"sigma": 3e-4} if family.startswith("pareto") else {}
    pr = make_infinite_problem(family, 2, 20_000, seed=0, **kw)
    pr = pr._replace(rewards=jnp.asarray(pr.rewards))
    failures = []
    for delta in (0.001, 0.01):
        rec = run_cell(pr, delta=delta, num_races=200, seed=1)
        if rec["exceeds"]:
            failures.append((delta, rec["errors"]))
    assert not failures, f"error rate above delta (delta, errors/200): {failures}"


def test_infinite_variance_cell_fails_without_tail_index_width():
    """The test above has power: on its Pareto(1.1) cell the guard of issue 9 alone (no tail-index
    width: ``tail_index_guard=False``) errs above delta = 0.001 (4/200 with these keys; 3/200 at
    tail_level_power = 0)."""
    from subsample_mcmc.testing import make_infinite_problem

    pr = make_infinite_problem("pareto_1.1", 2, 20_000, seed=0, sigma=3e-4)
    pr = pr._replace(rewards=jnp.asarray(pr.rewards))
    rec = run_cell(pr, delta=0.001, num_races=200, seed=1, tail_index_guard=False)
    assert rec["exceeds"], rec


@pytest.mark.xfail(strict=True, reason="known limit: a one-sided infinite-variance tail that carries the mean, "
                                       "missed by the races that stop early (3.2% errors at delta = 0.01)")
def test_one_sided_pareto_against_a_constant_just_below_its_mean():
    """A Lomax(1.5) arm (N = 20,000, a one-sided tail of infinite variance that carries its mean)
    against a constant 2% below that mean: the exact answer is the Lomax arm. Races that stop early
    have not seen the few largest values, their sample mean and sd are those of a lighter population,
    and the Hill fit of what they read is light too: 32 of 1,000 races (25 populations x 40 keys) pick
    the constant at delta = 0.01 with the defaults (the ungated tail-index width at tail_level_power 1
    gets 6 / 1,000 at 1.02x the reads here, and 25x on decisive LogNormal races). Strict: it fails
    (XPASS) once the race keeps its promise here."""
    from subsample_mcmc.racing import best_arm

    n, alpha, rel, delta = 20_000, 1.5, 0.02, 0.01
    race = jax.jit(jax.vmap(lambda k, r: best_arm(k, r, delta=delta), in_axes=(0, None)))
    rng = np.random.default_rng(21)
    wrong = total = 0
    for p in range(25):
        a0 = rng.pareto(alpha, size=n)
        rewards = jnp.asarray(np.stack([a0, np.full(n, a0.mean() * (1 - rel))]).astype(np.float32))
        arms = np.asarray(race(jax.random.split(jax.random.PRNGKey(20_000 + p), 40), rewards).arm)
        wrong, total = wrong + int(np.sum(arms != 0)), total + arms.size
    lower, _ = clopper_pearson(wrong, total, level=0.99)
    assert lower <= delta, (wrong, total)
