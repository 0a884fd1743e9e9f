"""Bad input gets a clear error naming the argument; NaN rewards never pass silently."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from subsample_mcmc.racing import best_arm, sample_discrete

KEY = jax.random.PRNGKey(0)
R = jax.random.normal(KEY, (3, 500))


@pytest.mark.parametrize("delta", [0.0, 0.5, 0.7, -0.1, float("nan")])
def test_delta_out_of_range(delta):
    with pytest.raises(ValueError, match="delta"):
        best_arm(KEY, R, delta=delta)


@pytest.mark.parametrize("first_batch", [1, 0, 501, 2.5])
def test_first_batch_out_of_range(first_batch):
    with pytest.raises(ValueError, match="first_batch"):
        best_arm(KEY, R, first_batch=first_batch)


def test_too_few_arms():
    with pytest.raises(ValueError, match="at least 2 arms"):
        best_arm(KEY, R[:1])


@pytest.mark.parametrize("shape", [(500,), (2, 3, 4)])
def test_wrong_shape(shape):
    with pytest.raises(ValueError, match="shape"):
        best_arm(KEY, jnp.zeros(shape))


def test_shape_mismatch_with_declared_sizes():
    with pytest.raises(ValueError, match="num_arms"):
        best_arm(KEY, R, num_arms=4)
    with pytest.raises(ValueError, match="population_size"):
        best_arm(KEY, R, population_size=10)
    with pytest.raises(ValueError, match="arm_offset"):
        best_arm(KEY, R, arm_offset=jnp.zeros(2))


def test_function_needs_sizes_and_ebs_needs_range():
    fn = lambda idx: R[:, idx]  # noqa: E731
    with pytest.raises(ValueError, match="num_arms"):
        best_arm(KEY, fn)
    for method in ("ebs", "lil_ucb"):
        with pytest.raises(ValueError, match="reward_range"):
            best_arm(KEY, fn, num_arms=3, population_size=500, method=method)
    with pytest.raises(ValueError, match="reward_range"):
        best_arm(KEY, R, method="ebs", reward_range=-1.0)


def test_unknown_names():
    with pytest.raises(ValueError, match="method"):
        best_arm(KEY, R, method="hoeffding")
    with pytest.raises(ValueError, match="variance"):
        best_arm(KEY, R, variance="full")
    with pytest.raises(ValueError, match="lil_ucb_setting"):
        best_arm(KEY, R, method="lil_ucb", lil_ucb_setting="x")


def test_nan_in_array_is_an_error_naming_the_place():
    bad = np.asarray(R).copy()
    bad[2, 77] = np.nan
    with pytest.raises(ValueError, match="arm 2, index 77"):
        best_arm(KEY, bad)
    bad[2, 77] = np.inf
    with pytest.raises(ValueError, match="non-finite"):
        best_arm(KEY, bad)


@pytest.mark.parametrize("method", ["normal", "ebs", "lil_ucb", "exact"])
def test_nan_from_function_eager_raises_and_jit_flags(method):
    table = np.asarray(R).copy()
    table[:, :] = np.nan  # every point is bad, so the first read meets it
    table_j = jnp.asarray(table)
    fn = lambda idx: table_j[:, idx]  # noqa: E731
    kw = dict(num_arms=3, population_size=500, method=method, reward_range=1.0)
    with pytest.raises(ValueError, match="NaN"):
        best_arm(KEY, fn, **kw)
    r = jax.jit(lambda k: best_arm(k, fn, **kw))(KEY)
    assert int(r.arm) == -1 and bool(r.nonfinite)


def test_nan_met_mid_race_inside_jit_is_flagged():
    """A NaN read at a later stage stops the race with arm -1 instead of an arm."""
    n = 4096
    values = jnp.zeros((2, n)).at[:, :].set(jax.random.normal(KEY, (2, n)) * 1e-3)

    def fn(idx):
        out = values[:, idx]
        # poison all but the first 64 points read: stage 1 is clean, later ones not
        return jnp.where(jnp.arange(idx.shape[0]) < 64, out, jnp.nan) if idx.shape[0] > 64 else out

    r = jax.jit(lambda k: best_arm(k, fn, num_arms=2, population_size=n, first_batch=64, delta=0.01))(KEY)
    assert bool(r.nonfinite) and int(r.arm) == -1
    vm = jax.vmap(lambda k: best_arm(k, fn, num_arms=2, population_size=n, first_batch=64))(
        jax.random.split(KEY, 4))
    assert np.all(np.asarray(vm.arm) == -1)


def test_sample_discrete_validation():
    with pytest.raises(ValueError, match="log_f0"):
        sample_discrete(KEY, jnp.zeros((3, 1)), R)
    with pytest.raises(ValueError, match="population_size"):
        sample_discrete(KEY, jnp.zeros(3), lambda idx: R[:, idx])


def test_reward_range_is_a_width_not_an_interval():
    """``reward_range=(lo, hi)`` is the common mistake: with 3 arms it is refused with a
    message saying what the argument is; a scalar width and one width per arm work."""
    key = jax.random.PRNGKey(2)
    rewards = np.random.default_rng(0).normal(size=(3, 1000))
    with pytest.raises(ValueError, match="width C = max - min"):
        best_arm(key, rewards, method="ebs", reward_range=(-5, 5))
    with pytest.raises(ValueError, match="hi - lo"):
        best_arm(key, rewards[:2], method="ebs", reward_range=(-6.0, 6.0))
    a = best_arm(key, rewards, method="ebs", reward_range=12.0)
    b = best_arm(key, rewards, method="ebs", reward_range=np.full(3, 12.0))
    assert int(a.arm) == int(b.arm) and int(a.num_rewards_read) == int(b.num_rewards_read)


def test_delta_as_a_string_is_refused():
    with pytest.raises(TypeError, match="delta"):
        best_arm(jax.random.PRNGKey(0), np.zeros((2, 100)), delta="0.05")
