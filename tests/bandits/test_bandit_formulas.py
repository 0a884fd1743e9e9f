"""Symbolic formula policies (Maes et al. Sec. 5): grammar size, stack machine vs the
bottom-up enumeration, exact equality with hand-written index policies, identification."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from subsample_mcmc.bandits import environments as E
from subsample_mcmc.bandits import formulas as F
from subsample_mcmc.bandits import index as ix
from subsample_mcmc.bandits import run_episode


def test_grammar_size_matches_the_paper():
    assert F.count_formulas(1) == 9
    assert F.count_formulas(3) == 9 + 45 + 711
    assert abs(F.count_formulas(7) - 33.5e6) < 0.1e6      # "|Theta| ~ 33,5 millions"


def test_stack_machine_reproduces_enumerated_values():
    pts = F.sample_points(jax.random.PRNGKey(0), 64, 100)
    fs = F.enumerate_formulas(4, pts)
    assert fs.num_formulas == F.count_formulas(4)
    rows = np.random.default_rng(0).choice(len(fs.tokens), 200, replace=False)
    ev = jax.jit(jax.vmap(lambda tok: F.evaluate_postfix(
        tok, jnp.asarray(pts["rbar"], jnp.float32), jnp.asarray(pts["sigma"], jnp.float32),
        jnp.asarray(pts["t_k"], jnp.float32), jnp.asarray(pts["t"], jnp.float32))))
    got = np.asarray(ev(jnp.asarray(fs.tokens[rows])))
    np.testing.assert_allclose(got, fs.values[rows], rtol=2e-4, atol=2e-5)


def test_equivalence_classes_merge_monotone_transforms():
    pts = F.sample_points(jax.random.PRNGKey(1), 128, 100)
    fs = F.enumerate_formulas(3, pts)
    classes = F.equivalence_classes(fs)
    texts = [F.format_formula(t) for t in classes.tokens]
    # rbar, 2*rbar, sqrt(rbar), rbar*rbar, rbar+1 rank the points alike: one class,
    # represented by the shortest member
    assert "rbar" in texts
    for other in ("rbar * 2", "sqrt(rbar)", "rbar * rbar", "rbar + 1"):
        assert other not in texts
    assert len(classes.tokens) < fs.num_value_classes


@pytest.mark.parametrize("text,policy,params", [
    ("rbar 2 t ln * t_k / sqrt +", ix.ucb1(), (2.0,)),     # UCB1, Eq. 2 with C = 2
    ("rbar", ix.greedy(), ()),
])
def test_formula_policy_equals_hand_written_index(text, policy, params):
    env = E.bernoulli(3)
    fp = F.formula_policy(text)
    run_f = jax.jit(lambda k: run_episode(fp, env, 80, fp.default_params, k).arms)
    run_p = jax.jit(lambda k: run_episode(policy, env, 80, tuple(map(jnp.float32, params)), k).arms)
    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        np.testing.assert_array_equal(np.asarray(run_f(key)), np.asarray(run_p(key)))


@pytest.mark.statistical
def test_racing_and_ucb1_tuned_identify_the_clearly_best_formula():
    candidates = ["t", "rbar", "rbar t_k inv +", "rbar neg", "t_k"]
    tokens = np.stack([F.parse_postfix(c.split(), 4) for c in candidates])
    fs = F.FormulaSet(tokens, np.array([len(c.split()) for c in candidates]),
                      np.zeros((5, 1)), 5, 5)
    env = E.bernoulli(2)
    race = F.identify_racing(fs, env, 50, jax.random.PRNGKey(0), num_problems=160,
                             first_batch=20)
    assert race.formula == "rbar + inv(t_k)"
    ucb = F.identify_ucb1_tuned(fs, env, 50, jax.random.PRNGKey(1), num_problems=100,
                                rounds=20, batch=2)
    assert ucb.formula == "rbar + inv(t_k)"


def test_formula_errors():
    with pytest.raises(ValueError, match="unknown formula symbol"):
        F.parse_postfix(["rbar", "exp"])
    with pytest.raises(ValueError, match="malformed"):
        F.parse_postfix(["rbar", "+"])
    with pytest.raises(ValueError, match="max_length"):
        F.enumerate_formulas(9, {})


def test_functions_of_t_alone_do_not_make_new_policies():
    # rbar + 1/t ranks the arms of any round exactly like rbar: one class
    pts = F.sample_points(jax.random.PRNGKey(2), 256, 100)
    texts = [F.format_formula(t) for t in F.equivalence_classes(F.enumerate_formulas(4, pts)).tokens]
    assert "rbar" in texts and "rbar + inv(t)" not in texts and "sqrt(rbar)" not in texts
    assert "t" not in texts and "ln(t)" not in texts          # random policies are dropped
