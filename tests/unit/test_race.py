"""Alg. 1 racing and adapted lil'UCB: exactness, error rates, early exit, precision."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from subsample_mcmc.racing import best_arm, doubling_schedule
from subsample_mcmc.racing.api import _trace_count
from subsample_mcmc.testing import make_problem, run_setting

RACING = [("normal", "pairwise"), ("normal", "marginal"), ("normal_union", "pairwise"),
          ("ebs", "pairwise"), ("ebs", "marginal"), ("lil_ucb", "pairwise")]


def _truth(rewards, offset=None):
    means = np.asarray(rewards, np.float64).mean(1)
    if offset is not None:
        means = means + np.asarray(offset, np.float64)
    return int(np.argmax(means))


@pytest.mark.parametrize("method,variance", RACING)
def test_hard_race_reaching_the_end_is_exact(method, variance):
    """When a race reads all N points, G = 0 and it must return the exact arm.

    Gaps far below the noise force every race to the last stage for every bound.
    """
    rng = np.random.default_rng(3)
    n, d = 3000, 4
    for trial in range(4):
        rewards = rng.standard_normal((d, n)).astype(np.float32)
        offset = rng.standard_normal(d).astype(np.float32) * 1e-6
        r = best_arm(jax.random.PRNGKey(trial), rewards, method=method, variance=variance,
                     arm_offset=offset, delta=0.05)
        assert int(r.num_points_read) == n
        assert int(r.arm) == _truth(rewards, offset)


@pytest.mark.parametrize("n,first_batch", [(3000, 50), (20_000, 50), (5003, 7), (60, 50), (100_000, 64)])
def test_a_full_race_computes_exactly_n_points_per_arm(n, first_batch):
    """Never more than the exact step: a race that reads everything computes N points per
    arm (no masked chunk tail beyond N), the exact step's cost."""
    rng = np.random.default_rng(n)
    rewards = rng.standard_normal((3, n)).astype(np.float32)  # equal arms: reads to the end
    r = best_arm(jax.random.PRNGKey(0), rewards, first_batch=first_batch, delta=0.05)
    assert int(r.num_points_read) == n
    assert int(r.num_points_computed) == n
    assert int(r.arm) == _truth(rewards)


@pytest.mark.parametrize("method", ["normal", "ebs"])
def test_first_batch_equal_to_population_is_exact(method):
    rng = np.random.default_rng(0)
    n, d = 2000, 7
    for trial in range(5):
        rewards = (rng.lognormal(0, 2, (d, n)) * 1e-3 + rng.standard_normal(d)[:, None] * 1e-4)
        rewards = rewards.astype(np.float32)
        r = best_arm(jax.random.PRNGKey(trial), rewards, method=method, first_batch=n)
        assert int(r.arm) == _truth(rewards)
        assert int(r.num_stages) == 1 and int(r.num_rewards_read) == n * d


def test_easy_race_stops_at_first_stage_with_exact_cost():
    n = 100_000
    rewards = jnp.stack([jnp.zeros(n), jnp.ones(n)]) + 0.01 * jax.random.normal(jax.random.PRNGKey(0), (2, n))
    r = best_arm(jax.random.PRNGKey(1), rewards, first_batch=64)
    assert int(r.arm) == 1
    assert int(r.num_stages) == 1 and int(r.num_points_read) == 64 and int(r.num_rewards_read) == 128


def test_unreached_stages_are_skipped():
    """A stage the race does not reach evaluates no rewards (true early exit)."""
    n, m1 = 1 << 14, 32
    seen = []
    gap = 0.2
    base = jax.random.normal(jax.random.PRNGKey(0), (3, n)) + jnp.array([0.0, gap, 2 * gap])[:, None]

    def rewards(idx):
        jax.debug.callback(lambda k: seen.append(int(k)), idx.shape[0])
        return base[:, idx]

    r = best_arm(jax.random.PRNGKey(2), rewards, num_arms=3, population_size=n, first_batch=m1)
    jax.effects_barrier()
    sizes = doubling_schedule(n, m1)
    stop = int(r.num_stages)
    assert 1 < stop < len(sizes)
    # the function was evaluated on exactly the points read up to the stop, no more
    assert sum(seen) == int(r.num_points_read) == sizes[stop - 1] < n


def test_vmap_matches_single_races_and_compiles_once():
    n, d = 4096, 5
    rewards = jax.random.normal(jax.random.PRNGKey(0), (d, n)) * 0.3 + jnp.linspace(0, 0.05, d)[:, None]
    keys = jax.random.split(jax.random.PRNGKey(1), 16)
    batched = jax.vmap(lambda k: best_arm(k, rewards, delta=0.1))(keys)
    for i in range(16):
        single = best_arm(keys[i], rewards, delta=0.1)
        assert int(single.arm) == int(batched.arm[i])
        assert int(single.num_rewards_read) == int(batched.num_rewards_read[i])


def test_no_retracing_for_new_data_keys_and_delta():
    n, d = 3000, 3
    a = jax.random.normal(jax.random.PRNGKey(0), (d, n))
    best_arm(jax.random.PRNGKey(0), a, delta=0.05, first_batch=30)
    before = _trace_count()
    for i, delta in enumerate([0.01, 0.2, 0.05]):
        b = jax.random.normal(jax.random.PRNGKey(i + 1), (d, n))
        best_arm(jax.random.PRNGKey(i), b, delta=delta, first_batch=30)
    assert _trace_count() == before




def test_easy_setting_reads_a_small_fraction():
    problem = make_problem(2, 10, 100_000, "normal", 1e-5)
    out = run_setting(problem, method="normal", delta=0.05, num_races=50, batch_size=1)
    # a race that stops this early must still be right: at most the errors delta allows
    assert out["errors"] <= stats.binom.ppf(1 - 1e-3, 50, 0.05), out
    assert out["fraction_read"] < 0.02


def test_precision_at_ten_million():
    """Float32 sums of 1e7 rewards near 1000 cannot resolve a 3e-5 gap; differences can."""
    n = 10_000_000
    key = jax.random.PRNGKey(0)
    base = 1000.0 + 0.01 * jax.random.normal(key, (n,), jnp.float32)
    rewards = jnp.stack([base, base + jnp.float32(6.103515625e-05) * (jax.random.uniform(
        jax.random.PRNGKey(1), (n,)) < 0.5)])  # arm 1 = arm 0 + one ulp half the time
    true_gap = float(np.mean(np.asarray(rewards[1], np.float64) - np.asarray(rewards[0], np.float64)))
    assert true_gap > 0
    for offset in (0.0, -0.9 * true_gap, -1.1 * true_gap):
        exact = best_arm(key, rewards, method="exact", arm_offset=jnp.array([0.0, offset]))
        assert int(exact.arm) == (1 if true_gap + offset > 0 else 0)
    # a race at this size stops early and is right
    r = best_arm(key, rewards, delta=0.01)
    assert int(r.arm) == 1 and int(r.num_points_read) < n
    # what a naive float32 total gets: sums ~1e10 have spacing 1024 > N * gap ~ 300
    naive = jnp.sum(rewards, axis=1)
    assert abs(float(naive[1] - naive[0]) - true_gap * n) > 0.5 * true_gap * n


def test_lil_ucb_full_read_is_exact_at_large_n():
    """Regression: lil'UCB's per-arm running sums (up to 1e5 float32 additions) are
    compensated, so a race that reads everything returns the exact arm."""
    import jax.numpy as jnp

    from subsample_mcmc.racing import sample_discrete

    p = make_problem(0, 2, 100_000, "uniform", 0.1)
    key = jax.random.split(jax.random.PRNGKey(3), 50)[7]
    s = sample_discrete(key, jnp.zeros(2), p.rewards, method="lil_ucb", delta=0.1)
    assert int(s.race.num_rewards_read) == 200_000
    assert int(s.value) == int(np.argmax(p.totals + np.asarray(s.gumbel, np.float64)))


def _tied_pair(n, gap_total, seed=0):
    """Two arms of ``n`` Normal rewards (sd 1 per datum) whose totals differ by ``gap_total`` exactly."""
    r = np.random.default_rng(seed).standard_normal((2, n))
    r -= r.mean(1, keepdims=True)
    r[1] += gap_total / n
    return jnp.asarray(r, jnp.float32)


def test_resolution_stops_a_near_tie_and_returns_an_epsilon_good_arm():
    """(epsilon, delta)-PAC: on a near-tie (totals 0.5 apart, N = 20,000) the exact race reads all N on
    most keys; with ``resolution = epsilon`` it stops once its width is below epsilon, and the arm it
    returns is epsilon-good: with a gap larger than epsilon the worse arm is returned at most at rate
    delta (99% Clopper-Pearson), with a gap smaller than epsilon either arm may come back."""
    from subsample_mcmc.racing import clopper_pearson

    n, delta, races = 20_000, 0.05, 400
    keys = jax.random.split(jax.random.PRNGKey(3), races)
    tie = _tied_pair(n, 0.5)

    def run(rewards, resolution):
        out = jax.vmap(lambda k: best_arm(k, rewards, delta=delta, resolution=resolution))(keys)
        return np.asarray(out.arm), np.asarray(out.num_points_read)

    arms0, reads0 = run(tie, 0.0)
    assert np.mean(reads0 == n) > 0.5  # the exact race ends at N on most keys
    eps = 0.2  # in mean units (sd 1 per datum): widths fall below it after a few hundred points
    arms, reads = run(tie, eps)
    assert reads.max() < n // 4 and np.mean(reads) < 0.05 * n
    assert 0.05 < np.mean(arms == 1) < 0.95  # within epsilon: either arm
    # a gap of 3 epsilon: the worse arm only at rate <= delta
    wide = _tied_pair(n, 3 * eps * n, seed=1)
    arms, reads = run(wide, eps)
    lo, _ = clopper_pearson(int(np.sum(arms != 1)), races, level=0.99)
    assert lo <= delta
    # an epsilon ten times the gap would return the worse arm often: the test can fail
    arms, _ = run(tie, 10 * eps)
    assert np.mean(arms != 1) > 2 * delta


def test_resolution_is_checked():
    rewards = _tied_pair(1000, 0.0)
    key = jax.random.PRNGKey(0)
    for bad in (-1e-3, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="resolution must be a finite number >= 0"):
            best_arm(key, rewards, resolution=bad)
    with pytest.raises(ValueError, match="resolution > 0 applies to Alg. 1"):
        best_arm(key, rewards, method="lil_ucb", reward_range=10.0, resolution=1e-3)
    with pytest.raises(TypeError, match="resolution must be a float"):
        best_arm(key, rewards, resolution=[1e-3, 2e-3])


def test_a_budget_stops_an_undecided_race_and_leaves_decided_ones_alone():
    """``max_points``: the race reads no stage past the last schedule boundary within the budget; one still
    undecided there returns arm -1, truncated, and is not counted as nonfinite; one decided earlier is the
    race without a budget, read for read.  A budget below the first stage still runs the first stage."""
    n, races = 20_000, 64
    keys = jax.random.split(jax.random.PRNGKey(5), races)
    tie = _tied_pair(n, 0.5)  # most races read to N without a budget

    def run(rewards, budget):
        return jax.vmap(lambda k: best_arm(k, rewards, delta=0.05, max_points=budget))(keys)

    free, capped = run(tie, None), run(tie, 1000)
    schedule = doubling_schedule(n, 50)
    stop = max(t for t in schedule if t <= 1000)  # 800
    decided = np.asarray(free.num_points_read) <= stop
    assert 0 < np.sum(~decided) and np.all(np.asarray(capped.num_points_read) <= stop)
    np.testing.assert_array_equal(np.asarray(capped.arm)[decided], np.asarray(free.arm)[decided])
    np.testing.assert_array_equal(np.asarray(capped.num_points_read)[decided], np.asarray(free.num_points_read)[decided])
    assert np.all(np.asarray(capped.arm)[~decided] == -1) and np.all(np.asarray(capped.truncated) == ~decided)
    assert not np.any(np.asarray(capped.nonfinite)) and not np.any(np.asarray(free.truncated))
    np.testing.assert_array_equal(np.asarray(capped.num_points_read)[~decided], stop)
    tiny = run(tie, 1)
    assert np.all(np.asarray(tiny.num_points_read) == 50)
    # a budget of N is no budget
    whole = run(tie, n)
    np.testing.assert_array_equal(np.asarray(whole.arm), np.asarray(free.arm))
    assert not np.any(np.asarray(whole.truncated))


def test_a_budget_is_checked():
    rewards = _tied_pair(1000, 0.0)
    key = jax.random.PRNGKey(0)
    for bad in (0, -5, 2.5, True):
        with pytest.raises(ValueError, match="max_points must be a positive integer"):
            best_arm(key, rewards, max_points=bad)
    with pytest.raises(ValueError, match="max_points applies to Alg. 1"):
        best_arm(key, rewards, method="lil_ucb", reward_range=10.0, max_points=100)
