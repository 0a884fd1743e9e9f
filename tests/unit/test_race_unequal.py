"""Racing arms with populations of different sizes (App. C.3): exactness, error <= delta, cost."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from subsample_mcmc.racing import (
    NUM_ROUNDS,
    best_arm,
    sample_discrete,
    sized_permuted_indices,
    unequal_num_stages,
    unequal_schedule,
)


def test_traced_size_permutations_are_permutations():
    sizes = np.array([1, 2, 3, 7, 16, 17, 99, 1000])
    keys = jax.random.bits(jax.random.PRNGKey(0), (len(sizes), NUM_ROUNDS), dtype=jnp.uint32)
    pos = np.minimum(np.arange(1000)[None], sizes[:, None] - 1)
    got = np.asarray(sized_permuted_indices(keys[:, None, :], jnp.asarray(sizes)[:, None], jnp.asarray(pos)))
    for row, n in zip(got, sizes):
        assert sorted(row[:n].tolist()) == list(range(n))
    # different keys give different orders
    other = jax.random.bits(jax.random.PRNGKey(1), (NUM_ROUNDS,), dtype=jnp.uint32)
    assert not np.array_equal(got[-1], np.asarray(sized_permuted_indices(other, 1000, jnp.arange(1000))))


def test_schedule_of_app_c3():
    assert unequal_schedule(1000) == (3, 102, 300, 696, 1000)  # m(2) = floor(997 / 10) = 99, doubling
    assert unequal_schedule(2) == (2,)
    assert unequal_schedule(0) == ()
    assert unequal_num_stages(100_000) == 6  # every arm is read in full within t* stages
    for n in (1, 5, 23, 301, 5000):
        s = unequal_schedule(n)
        assert s[-1] == n and len(s) <= unequal_num_stages(5000) and all(np.diff(s) > 0)


@pytest.mark.parametrize("method", ["normal", "exact"])
def test_answer_is_the_argmax_of_totals_and_exact_reads_everything(method):
    rng = np.random.default_rng(3)
    sizes = np.array([0, 1, 2, 40, 700])
    rewards = np.where(np.arange(700)[None] < sizes[:, None], rng.normal(0.1, 1.0, (5, 700)), np.nan)
    offsets = rng.normal(0.0, 30.0, 5)
    truth = int(np.argmax(offsets + np.nansum(rewards, 1)))
    r = best_arm(jax.random.PRNGKey(0), rewards, method=method, population_sizes=sizes, arm_offset=offsets)
    assert int(r.arm) == truth
    if method == "exact":
        assert int(r.num_rewards_read) == sizes.sum()  # NaN padding past the sizes is never read
    assert int(r.num_rewards_read) <= int(r.num_likelihood_evals)




def test_easy_races_read_a_small_fraction_of_large_clusters():
    rng = np.random.default_rng(1)
    sizes = np.array([2000, 1500, 800, 5, 0])
    means = np.array([0.5, -0.5, -1.0, 0.0, 0.0])
    rewards = np.where(np.arange(2000)[None] < sizes[:, None], rng.normal(means[:, None], 1.0, (5, 2000)), 0.0)
    out = jax.vmap(lambda k: best_arm(k, rewards, population_sizes=sizes, delta=0.05))(
        jax.random.split(jax.random.PRNGKey(0), 50))
    assert np.all(np.asarray(out.arm) == 0)
    # App. C.3's second stage reads a tenth of each cluster: the race stops within three stages
    assert np.all(np.asarray(out.num_stages) <= 3)
    assert np.mean(out.num_rewards_read) < 0.25 * sizes.sum()




def test_a_function_of_arms_and_indices_and_traced_sizes():
    rng = np.random.default_rng(4)
    table = jnp.asarray(rng.normal(0.0, 1.0, (6, 500)), jnp.float32)

    def rewards(arms, idx):
        return table[arms, idx] + 0.2 * arms

    def one(key, sizes):
        return best_arm(key, rewards, population_sizes=sizes, num_arms=6, population_size=500, method="exact").arm

    sizes = jnp.asarray(rng.integers(0, 501, (20, 6)), jnp.int32)
    got = jax.jit(jax.vmap(one))(jax.random.split(jax.random.PRNGKey(0), 20), sizes)
    mask = np.arange(500)[None, None] < np.asarray(sizes)[:, :, None]
    want = np.argmax(np.sum(np.where(mask, np.asarray(table)[None] + 0.2 * np.arange(6)[None, :, None], 0.0), 2), 1)
    np.testing.assert_array_equal(np.asarray(got), want)


def test_bad_arguments_name_the_fix():
    r = np.zeros((3, 10))
    with pytest.raises(ValueError, match="population_sizes must lie in"):
        best_arm(jax.random.PRNGKey(0), r, population_sizes=np.array([3, 11, 0]))
    with pytest.raises(ValueError, match="population_sizes must be 3 integers"):
        best_arm(jax.random.PRNGKey(0), r, population_sizes=[3.5, 1, 0])
    with pytest.raises(ValueError, match="method='normal'"):
        best_arm(jax.random.PRNGKey(0), r, population_sizes=np.array([3, 1, 0]), method="ebs", reward_range=1.0)
    with pytest.raises(ValueError, match="non-finite"):
        best_arm(jax.random.PRNGKey(0), np.full((2, 4), np.nan), population_sizes=np.array([2, 1]))




def test_float64_rewards_under_x64_and_first_batch_checks():
    """A user who turns on x64 passes float64 rewards with float32 or int offsets (the fresh-user trial)."""
    rng = np.random.default_rng(0)
    r64 = rng.normal(size=(3, 300))
    sizes = [10, 300, 200]
    want = int(np.argmax([r64[k, :n].sum() for k, n in enumerate(sizes)]))
    with jax.enable_x64(True):
        for offset in (None, [0, 0, 0], jnp.zeros(3, jnp.float32)):
            r = best_arm(jax.random.PRNGKey(0), r64, population_sizes=sizes, arm_offset=offset, method="exact")
            assert int(r.arm) == want
        s = sample_discrete(jax.random.PRNGKey(0), jnp.zeros(3, jnp.float32), r64, population_sizes=sizes)
        assert 0 <= int(s.value) < 3
        # with reward bounds, under jit and vmap as well (the fresh-user trial: a while_loop carry dtype)
        bounded = np.clip(r64, -3.0, 3.0)
        want_b = int(np.argmax([bounded[k, :n].sum() for k, n in enumerate(sizes)]))
        for bounds in ((-3.0, 3.0), (np.full(3, -3.0), np.full(3, 3.0))):
            r = best_arm(jax.random.PRNGKey(0), bounded, population_sizes=sizes, reward_bounds=bounds, method="exact")
            assert int(r.arm) == want_b and int(r.num_rewards_read) == sum(sizes)
        out = jax.jit(jax.vmap(lambda k: sample_discrete(k, jnp.zeros(3), jnp.asarray(bounded), population_sizes=sizes,
                                                         reward_bounds=(-3.0, 3.0)).value))(
            jax.random.split(jax.random.PRNGKey(1), 8))
        assert np.all((np.asarray(out) >= 0) & (np.asarray(out) < 3))
    with pytest.raises(ValueError, match="first_batch must be an integer >= 2"):
        best_arm(jax.random.PRNGKey(0), r64, population_sizes=sizes, first_batch=1)
    with pytest.raises(ValueError, match="log_f0 has 2 entries but rewards has 3 rows"):
        sample_discrete(jax.random.PRNGKey(0), jnp.zeros(2), r64, population_sizes=sizes)


def _bounded_problem(seed, hi=2.0, num_small=6):
    """Two large arms whose totals a few rewards pin down, and ``num_small`` arms of 1-3 rewards in
    [1.5, hi], most of them far behind (dropped unread) but in odd seeds one of them the best by a nat:
    an unread arm taken at anything below its largest possible total would be dropped and show as errors."""
    rng = np.random.default_rng(seed)
    sizes = np.concatenate([[500, 300], rng.integers(1, 4, num_small)])
    rewards = np.concatenate([rng.normal(1.0, 0.005, (1, 500)), rng.normal(0.9, 0.005, (1, 500)),
                              rng.uniform(1.5, hi, (num_small, 500))])
    rewards = np.where(np.arange(500)[None] < sizes[:, None], np.clip(rewards, -hi, hi), 0.0)
    totals = rewards.sum(1)
    lead = totals[0]
    offsets = lead - totals - rng.uniform(5.0, 20.0, len(sizes))
    offsets[0], offsets[1] = 0.0, lead - totals[1] - 3.0
    if seed % 2:
        offsets[2 + rng.integers(num_small)] += lead - (offsets + totals)[2:].max() + 1.0  # best by a nat
    return rewards.astype(np.float32), sizes, offsets.astype(np.float32), int(np.argmax(offsets + totals))


@pytest.mark.parametrize("guard", [True, False])
def test_reward_bounds_keep_the_answer_and_the_error_promise(guard):
    """With ``reward_bounds`` an unread small arm enters at its largest possible total: the race still
    finds a small best arm (a wrong bound, e.g. the lower one, would drop it unread), and errs at most
    delta with the guard (without it, at most what the paper's race errs without bounds)."""
    delta, races = 0.1, 400
    errs = {True: 0, False: 0}
    for seed in range(4):
        rewards, sizes, offsets, truth = _bounded_problem(seed)
        for bounded in (True, False):
            extra = {"reward_bounds": (-2.0, 2.0)} if bounded else {}
            race = jax.jit(jax.vmap(lambda k: best_arm(k, jnp.asarray(rewards), population_sizes=jnp.asarray(sizes),
                                                       arm_offset=jnp.asarray(offsets), delta=delta,
                                                       heavy_tail_guard=guard, **extra)))
            out = race(jax.random.split(jax.random.PRNGKey(seed), races))
            errs[bounded] += int(np.sum(np.asarray(out.arm) != truth))
        exact = best_arm(jax.random.PRNGKey(0), rewards, population_sizes=sizes, arm_offset=offsets,
                         method="exact", reward_bounds=(-2.0, 2.0))
        assert int(exact.arm) == truth
    limit = stats.binom.ppf(1 - 1e-3, 4 * races, delta)
    if guard:
        assert errs[True] <= limit, errs
    else:
        assert errs[True] <= max(limit, stats.binom.ppf(1 - 1e-3, 4 * races, max(errs[False], 1) / (4 * races))), errs


def test_reward_bounds_leave_small_arms_unread_behind_a_strong_leader():
    rng = np.random.default_rng(0)
    sizes = np.array([1000, 1, 1, 1, 2, 3, 0])
    rewards = np.where(np.arange(1000)[None] < sizes[:, None], np.clip(rng.normal(1.5, 0.2, (7, 1000)), -2, 2), 0.0)
    for guard in (False, True):
        plain = best_arm(jax.random.PRNGKey(0), rewards, population_sizes=sizes, heavy_tail_guard=guard)
        bounded = best_arm(jax.random.PRNGKey(0), rewards, population_sizes=sizes, heavy_tail_guard=guard,
                           reward_bounds=(-2.0, 2.0))
        assert int(plain.arm) == int(bounded.arm) == 0
        # the small arms (8 rewards) are never read: their totals are at most 2 N_y, the leader's about 1500
        assert int(bounded.num_rewards_read) <= int(plain.num_rewards_read) - 8
        assert int(bounded.num_rewards_read) <= int(bounded.num_likelihood_evals)
    # per-arm bounds, and an exact race with bounds still reads every reward of a close contest
    per_arm = (np.full(7, -2.0), np.full(7, 2.0))
    assert int(best_arm(jax.random.PRNGKey(1), rewards, population_sizes=sizes, reward_bounds=per_arm).arm) == 0


def test_reward_bounds_bad_values_and_a_reward_outside_them():
    rewards = np.ones((3, 10))
    sizes = np.array([10, 2, 0])
    with pytest.raises(ValueError, match=r"rewards\[0, 0\] = 1.0 lies outside reward_bounds \[-0.5, 0.5\] \(arm 0\)"):
        best_arm(jax.random.PRNGKey(0), rewards, population_sizes=sizes, reward_bounds=(-0.5, 0.5))
    with pytest.raises(ValueError, match=r"outside reward_bounds=\(lo, hi\)"):  # a function: seen while racing
        best_arm(jax.random.PRNGKey(0), lambda a, i: jnp.ones(a.shape), population_sizes=sizes, num_arms=3,
                 population_size=10, reward_bounds=(-0.5, 0.5))
    with pytest.raises(ValueError, match="add a constant offset of value i to log_f0"):
        sample_discrete(jax.random.PRNGKey(0), jnp.zeros(3), rewards, population_sizes=sizes, arm_offset=jnp.ones(3))
    out = jax.jit(lambda r: best_arm(jax.random.PRNGKey(0), r, population_sizes=sizes, reward_bounds=(-0.5, 0.5)))(
        jnp.asarray(rewards))
    assert int(out.arm) == -1 and bool(out.nonfinite)
    with pytest.raises(ValueError, match="lo <= hi"):
        best_arm(jax.random.PRNGKey(0), rewards, population_sizes=sizes, reward_bounds=(1.0, -1.0))
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        best_arm(jax.random.PRNGKey(0), rewards, population_sizes=sizes, reward_bounds=(np.zeros(2), 1.0))
    with pytest.raises(ValueError, match="a pair"):
        best_arm(jax.random.PRNGKey(0), rewards, population_sizes=sizes, reward_bounds=1.0)
    with pytest.raises(ValueError, match="pass population_sizes"):
        best_arm(jax.random.PRNGKey(0), rewards, reward_bounds=(-1.0, 1.0))


@pytest.mark.parametrize("bounds", [None, (-1.0, 100.0)])
def test_exact_reads_everything_even_when_a_partial_read_shows_no_spread(bounds):
    """Arm 0 is fifty zeros but one 100, arm 1 fifty ones: the first reads of both have zero sample variance.
    The exact race must not compare those partial totals (it would drop arm 0); the Normal race may err, not
    exact."""
    rewards = np.zeros((2, 50))
    rewards[0, 17] = 100.0
    rewards[1] = 1.0
    for k in range(5):
        r = best_arm(jax.random.PRNGKey(k), rewards, method="exact", population_sizes=np.array([50, 50]),
                     reward_bounds=bounds)
        assert int(r.arm) == 0 and int(r.num_rewards_read) == 100
