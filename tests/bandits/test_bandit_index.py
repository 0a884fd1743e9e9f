"""Index policies: Table 1 of Maes et al. within Monte Carlo error, exact agreement with
plain-Python reference implementations, vmap/scan == per-round loop, input errors."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq

from subsample_mcmc.bandits import environments as E
from subsample_mcmc.bandits import index as ix
from subsample_mcmc.bandits import make_policy, parse_policy, run_episode, run_episode_loop, simulate
from subsample_mcmc.bandits.paper_values import MAES_TABLE1_UNTUNED, MAES_TEST_PROBLEMS
from subsample_mcmc.bandits.simulate import _step_keys, episode_keys


def _z_vs_paper(res, paper_value, num_problems):
    # the paper's estimate comes from 10^4 problems; its standard error is at most ours
    # scaled by sqrt(P / 10^4) (its 100 runs per problem only lower the within-problem part)
    se_paper = res.stderr * math.sqrt(num_problems / MAES_TEST_PROBLEMS)
    return (res.mean - paper_value) / math.hypot(res.stderr, se_paper)


# (T = 10 is covered exactly by the UCB1-Normal test below and in the benchmark)
# (every cell of Table 1 is checked by benchmarks/bandits_table1.py; here each policy at
# least once, on a budget of compiled programs)
CASES = [("bernoulli", 100, 5_000, None),
         ("gaussian", 100, 3_000, ("ucb1_tuned", "ucb1_normal", "ucb_v", "eps_greedy")),
         ("bernoulli", 1000, 1_000, ("ucb1_tuned", "ucb2", "kl_ucb", "eps_greedy"))]


@pytest.mark.statistical
@pytest.mark.parametrize("distribution,horizon,num_problems,subset", CASES)
def test_table1_untuned_within_monte_carlo_error(distribution, horizon, num_problems, subset):
    env = E.bernoulli(2) if distribution == "bernoulli" else E.truncated_gaussian(2)
    table = MAES_TABLE1_UNTUNED[distribution]
    zs = {}
    for name, row in table.items():
        if subset is not None and name not in subset:
            continue
        res = simulate(parse_policy(name), env, horizon, jax.random.PRNGKey(horizon),
                       num_problems)
        zs[name] = (_z_vs_paper(res, row[horizon], num_problems), res.mean, row[horizon])
    bad = {k: v for k, v in zs.items() if abs(v[0]) > 4.0}
    assert not bad, f"(z, ours, paper) outside 4 combined standard errors: {bad}"


def test_ucb1_normal_alternates_at_small_horizon():
    # ceil(8 ln t) > t/2 for t <= 10: every play is forced, arms alternate, so the
    # pseudo-regret is exactly 5 |p1 - p2| on every problem (E = 5/3 under D_P).
    env = E.bernoulli(2)
    keys = jax.random.split(jax.random.PRNGKey(3), 64)
    problems = jax.vmap(env.sample_problem)(keys)
    res = jax.vmap(lambda k, m: run_episode(ix.ucb1_normal(), env, 10, (), k,
                                            problem=E.MeansProblem(m)))(keys, problems.means)
    expected = 5.0 * jnp.abs(problems.means[:, 0] - problems.means[:, 1])
    np.testing.assert_allclose(res.regret.sum(axis=1), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(res.arms.sum(axis=1), 5)


# ----------------------------------------------------------- plain-Python references

def _reference_run(choose, env, horizon, key, problem, extra_update=None):
    """Play ``choose(stats, t)`` (pure Python) on the same reward stream as the
    simulator: the reward of round t comes from the simulator's k_rew for round t."""
    _, _, k_run = episode_keys(key)
    step_keys = jax.jit(_step_keys)
    sample_reward = jax.jit(env.sample_reward)
    counts = np.zeros(env.num_arms)
    sums = np.zeros(env.num_arms)
    arms = []
    for t in range(1, horizon + 1):
        _, _, k_rew, _ = step_keys(k_run, jnp.int32(t))
        arm = choose(counts, sums, t)
        r = float(sample_reward(problem, k_rew, jnp.zeros(()), jnp.int32(arm)))
        counts[arm] += 1
        sums[arm] += r
        arms.append(arm)
    return np.array(arms)


def _ucb2_reference(alpha):
    """UCB2 of Auer et al. (2002, Fig. 2) literally: r_j counters, zero-length epochs."""
    state = {"r": None, "left": 0, "cur": None}

    def tau(r):
        return math.ceil((1 + alpha) ** r - 1e-9)

    def choose(counts, sums, t):
        k = len(counts)
        if state["r"] is None:
            state["r"] = np.zeros(k, int)
        if np.any(counts == 0):
            return int(np.argmax(counts == 0))
        if state["left"] > 0:
            state["left"] -= 1
            return state["cur"]
        n = t - 1
        while True:
            tj = np.array([tau(r) for r in state["r"]], float)
            idx = sums / counts + np.sqrt((1 + alpha) * np.log(math.e * n / tj) / (2 * tj))
            j = int(np.argmax(idx))
            plays = tau(state["r"][j] + 1) - tau(state["r"][j])
            state["r"][j] += 1
            if plays > 0:
                state["cur"], state["left"] = j, plays - 1
                return j

    return choose


def _kl_ucb_reference(c):
    def kl(p, q):
        out = 0.0
        if p > 0:
            out += p * math.log(p / q)
        if p < 1:
            out += (1 - p) * math.log((1 - p) / (1 - q))
        return out

    def choose(counts, sums, t):
        if np.any(counts == 0):
            return int(np.argmax(counts == 0))
        bound = max(math.log(t) + c * math.log(max(math.log(t), 1e-12)), 0.0)
        idx = []
        for n, s in zip(counts, sums):
            p = s / n
            f = lambda q: n * kl(p, q) - bound
            idx.append(1.0 if f(1 - 1e-9) <= 0 else (p if p >= 1 - 1e-9 else brentq(f, p, 1 - 1e-9)))
        return int(np.argmax(idx))

    return choose



@pytest.mark.parametrize("alpha", [0.5, 0.1, 1e-3])
def test_ucb2_matches_reference(alpha):
    # Gaussian rewards: ties have probability zero, so the arm sequences must agree
    env = E.gaussian(3, means=[0.2, 0.5, 0.45], noise_sd=0.3)
    key = jax.random.PRNGKey(11)
    problem = env.sample_problem(key)
    ours = run_episode(ix.ucb2(alpha), env, 300, (alpha,), key, problem=problem).arms
    ref = _reference_run(_ucb2_reference(alpha), env, 300, key, problem)
    np.testing.assert_array_equal(np.asarray(ours), ref)


@pytest.mark.parametrize("c", [0.0, 3.0])
def test_kl_ucb_matches_reference(c):
    env = E.truncated_gaussian(3)
    key = jax.random.PRNGKey(5)
    problem = env.sample_problem(key)
    ours = run_episode(ix.kl_ucb(c), env, 200, (c,), key, problem=problem).arms
    ref = _reference_run(_kl_ucb_reference(c), env, 200, key, problem)
    # bisection vs brentq can only disagree on near-ties of the two indices
    assert np.mean(np.asarray(ours) == ref) > 0.97


@pytest.mark.parametrize("name", ["ucb1", "ucb1_tuned", "ucb1_normal", "ucb2", "ucb_v",
                                  "kl_ucb", "eps_greedy"])
def test_scan_equals_python_loop(name):
    policy = make_policy(name)
    env = E.bernoulli(3)
    key = jax.random.PRNGKey(7)
    params = jax.tree_util.tree_map(jnp.float32, policy.default_params)
    a = run_episode(policy, env, 60, params, key)
    b = run_episode_loop(policy, env, 60, params, key)
    np.testing.assert_array_equal(np.asarray(a.arms), np.asarray(b.arms))
    np.testing.assert_array_equal(np.asarray(a.rewards), np.asarray(b.rewards))


def test_vmapped_simulation_equals_single_episodes():
    policy, env = ix.ucb1_tuned(), E.bernoulli(2)
    res = simulate(policy, env, 50, jax.random.PRNGKey(0), num_problems=4, num_runs=2)
    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    episode = jax.jit(lambda k, problem: run_episode(policy, env, 50, (), k, problem=problem,
                                                     curve=False).regret)   # one compilation
    for i in range(4):
        k_problem, k_runs = jax.random.split(keys[i])
        problem = env.sample_problem(k_problem)
        for j, k in enumerate(jax.random.split(k_runs, 2)):
            assert float(episode(k, problem)) == pytest.approx(float(res.regret[i, j]), rel=1e-5)


def test_pseudo_regret_matches_realised_regret():
    # E[T mu* - sum r_t] = E[sum (mu* - mu_{b_t})]  (Eq. 1 of Maes et al.)
    env = E.truncated_gaussian(2, regret_means="truncated")
    keys = jax.random.split(jax.random.PRNGKey(1), 4000)
    policy = ix.ucb1()

    def one(k):
        ep = run_episode(policy, env, 30, (2.0,), k)
        problem = env.sample_problem(episode_keys(k)[0])
        return ep.regret.sum(), 30 * problem.means.max() - ep.rewards.sum()

    pseudo, realised = jax.jit(jax.vmap(one))(keys)
    diff = np.asarray(realised - pseudo)
    assert abs(diff.mean()) < 4 * diff.std() / np.sqrt(len(diff))


def test_truncated_gaussian_rejection_sampler_mean():
    env = E.truncated_gaussian(2, regret_means="truncated")
    problem = E.TruncGaussProblem(jnp.array([0.1, 0.9]), jnp.array([0.6, 0.2]),
                                  E.truncated_gaussian_mean(jnp.array([0.1, 0.9]),
                                                            jnp.array([0.6, 0.2])))
    keys = jax.random.split(jax.random.PRNGKey(0), 20000)
    for arm in (0, 1):
        x = jax.vmap(lambda k: env.sample_reward(problem, k, None, arm))(keys)
        assert float(x.min()) >= 0 and float(x.max()) <= 1
        se = float(x.std()) / np.sqrt(len(keys))
        assert abs(float(x.mean()) - float(problem.means[arm])) < 4 * se


def test_bad_inputs_name_the_argument():
    with pytest.raises(ValueError, match="horizon"):
        simulate(ix.ucb1(), E.bernoulli(3), 2, jax.random.PRNGKey(0), 5)
    with pytest.raises(ValueError, match="unknown policy"):
        make_policy("ucb9")
    with pytest.raises(ValueError, match="alpha"):
        ix.ucb2(alpha=1.5)
    with pytest.raises(ValueError, match="C"):
        parse_policy("ucb1:C=-1")
    with pytest.raises(ValueError, match="num_problems"):
        simulate(ix.ucb1(), E.bernoulli(2), 10, jax.random.PRNGKey(0), 0)
    with pytest.raises(ValueError, match="distribution"):
        E.make_environment("poisson")
    with pytest.raises(ValueError, match="means"):
        E.bernoulli(2, means=[0.5, 1.5])


def test_cli_maes_json(capsys):
    import json

    from subsample_mcmc.cli import main

    assert main(["bandits", "maes", "--horizon", "20", "--problems", "200",
                 "--policies", "ucb1,kl_ucb:c=3", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["policy"] for r in rows] == ["ucb1", "kl_ucb:c=3"]
    assert all(r["mean_regret"] > 0 and r["stderr"] > 0 for r in rows)
    with pytest.raises(SystemExit):
        main(["bandits", "maes", "--horizon", "1", "--problems", "10"])
    with pytest.raises(SystemExit):
        main(["bandits", "maes", "--distribution", "poisson"])


def test_hyper_parameters_are_traced_one_compilation():
    # policies that differ only in params share one compiled program (what the EDA needs)
    from subsample_mcmc.bandits.simulate import _batched, compile_options

    env = E.bernoulli(2)
    for c in (2.0, 0.17, 5.0):
        simulate(ix.ucb1(c), env, 17, jax.random.PRNGKey(0), 8)
    run = _batched(ix.ucb1().functions, env, 17, False, 1, compile_options())
    assert run._cache_size() == 1
