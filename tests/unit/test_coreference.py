"""Author coreference (Sec. 5.3): B-cubed, MinHash factors, data, annealed racing Gibbs, the CLI job."""

import itertools

import jax.numpy as jnp
import numpy as np
import pytest
from subsample_mcmc.models.coreference import (
    Mentions,
    annealed_gibbs,
    b_cubed,
    factor_bounds,
    factors,
    load_febrl,
    minhash,
    synthetic_mentions,
)


def _b_cubed_brute(pred, truth):
    m = len(pred)
    p = np.mean([np.sum((pred == pred[i]) & (truth == truth[i])) / np.sum(pred == pred[i]) for i in range(m)])
    r = np.mean([np.sum((pred == pred[i]) & (truth == truth[i])) / np.sum(truth == truth[i]) for i in range(m)])
    return p, r, 2 * p * r / (p + r)


def test_b_cubed_matches_its_definition():
    rng = np.random.default_rng(0)
    for _ in range(5):
        pred, truth = rng.integers(0, 7, 60), rng.integers(0, 5, 60)
        np.testing.assert_allclose(b_cubed(pred, truth), _b_cubed_brute(pred, truth))
    assert b_cubed(np.arange(10), np.arange(10)) == (1.0, 1.0, 1.0)
    p, r, _ = b_cubed(np.zeros(10), np.arange(10))  # one big cluster: full recall, precision 1/10
    assert (p, r) == (0.1, 1.0)


def test_minhash_estimates_bigram_jaccard_and_missing_fields_are_neutral():
    words = ["christensen", "christiansen", "kristensen", "zhang"]
    sig = minhash(words, num_hashes=256)
    grams = [{f"^{w}$"[k:k + 2] for k in range(len(w) + 1)} for w in words]
    for a, b in itertools.combinations(range(4), 2):
        jac = len(grams[a] & grams[b]) / len(grams[a] | grams[b])
        assert abs(np.mean(sig[a] == sig[b]) - jac) < 0.1
    s = minhash(["smith", ""], num_hashes=16)[:, None, :]
    w = jnp.array([2.0])
    assert float(factors(s[0], s[1], w)) == 0.0  # a missing field neither joins nor separates
    assert float(factors(s[0], s[0], w)) == pytest.approx(2.0 * (1 - 0.4))


def test_febrl_and_synthetic_data():
    m = load_febrl("febrl3")
    assert m.signatures.shape[:2] == (5000, 7) and len(np.unique(m.entity)) == 2000
    assert np.bincount(m.entity).max() <= 10
    s = synthetic_mentions(20_000, seed=0)
    sizes = np.sort(np.bincount(s.entity))[::-1]
    assert sizes[0] > 500 and np.sum(sizes == 1) > 100  # power law: thousands-scale heads, many singletons


def test_racing_gibbs_clusters_febrl_as_well_as_exact_gibbs():
    m = load_febrl("febrl3", limit=300)
    start = b_cubed(np.arange(300), m.entity)[2]
    runs = {meth: annealed_gibbs(m, method=meth, num_sweeps=3, seed=0, check_every=1 if meth == "normal" else 0)
            for meth in ("exact", "normal")}
    assert runs["exact"].f1[-1] > start + 0.1  # the sampler finds the duplicates
    assert abs(runs["normal"].f1[-1] - runs["exact"].f1[-1]) < 0.03
    assert runs["normal"].factor_evaluations[-1] <= runs["exact"].factor_evaluations[-1]
    assert runs["normal"].decisions_checked == 900
    assert runs["normal"].decision_errors <= 0.05 * 900 + 3 * np.sqrt(0.05 * 900)


def test_racing_reads_fewer_factors_on_large_clusters_near_convergence():
    m = synthetic_mentions(6000, seed=1, noise=0.2)
    kw = dict(num_sweeps=1, schedule=[1.0], init=m.entity.copy(), seed=0, moves_per_sweep=150)
    exact = annealed_gibbs(m, method="exact", **kw)
    racing = annealed_gibbs(m, method="normal", check_every=1, **kw)
    assert racing.factor_evaluations[-1] < 0.5 * exact.factor_evaluations[-1]
    assert racing.decision_errors <= 0.05 * 150 + 3 * np.sqrt(0.05 * 150)


def test_bad_mentions_and_arguments_are_named():
    m = synthetic_mentions(60, seed=0)
    with pytest.raises(ValueError, match=r"mentions.weights must hold one finite weight per field, shape \(4,\)"):
        annealed_gibbs(m._replace(weights=np.ones(3)), num_sweeps=1)
    with pytest.raises(ValueError, match=r"mentions.block must hold one integer per mention, shape \(60,\)"):
        annealed_gibbs(m._replace(block=m.block[:10]), num_sweeps=1)
    with pytest.raises(ValueError, match=r"mentions.signatures must be integer MinHash values of shape \[M, F, K\]"):
        annealed_gibbs(m._replace(signatures=m.signatures[:, 0]), num_sweeps=1)
    with pytest.raises(ValueError, match="init must hold one integer cluster label"):
        annealed_gibbs(m, num_sweeps=1, init=np.zeros(60))
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        annealed_gibbs(m, num_sweeps=1, seed=-1)
    with pytest.raises(ValueError, match="equal, non-zero lengths"):
        b_cubed([0, 1], [0])
    with pytest.raises(ValueError, match="limit must be an integer >= 1"):
        load_febrl("febrl1", limit=-1)
    with pytest.raises(ValueError, match="0 <= discount < 1"):
        synthetic_mentions(100, discount=1.0)
    with pytest.raises(ValueError, match="num_blocks must be an integer >= 1"):
        synthetic_mentions(100, num_blocks=0)
    # Python lists are accepted as arrays, and true labels may be strings (a user's own person ids)
    lists = type(m)(m.signatures.tolist(), m.block.tolist(), [f"person-{e}" for e in m.entity], m.weights.tolist())
    run = annealed_gibbs(lists, num_sweeps=1, method="exact")
    assert run.labels.shape == (60,) and 0.0 < run.f1[-1] <= 1.0


def test_a_measured_error_above_delta_warns_with_the_fix():
    """Default decision checks on the unguarded racing sampler, and a warning when they show the race erring
    above delta.  One field of one hash of three values makes every factor one of two values (a Bernoulli
    population): three-factor samples often show no spread, and the paper's unguarded race then errs well above
    delta against exact Gibbs under the same noise (on this draw 11%; the guard would keep it)."""
    rng = np.random.default_rng(0)
    m = Mentions(rng.integers(0, 2, (1500, 1, 1)).astype(np.int32), np.zeros(1500, np.int32),
                 np.zeros(1500, np.int32), np.ones(1, np.float32))
    init = rng.integers(0, 2, 1500)
    with pytest.warns(UserWarning, match=r"pass heavy_tail_guard=True"):
        r = annealed_gibbs(m, num_sweeps=1, schedule=[1.0], init=init, check_every=1)
    assert r.decision_errors > 0.05 * r.decisions_checked
    assert annealed_gibbs(m, num_sweeps=1, schedule=[1.0], init=init, moves_per_sweep=50).decisions_checked == 5
    assert annealed_gibbs(m, num_sweeps=1, method="exact", moves_per_sweep=20).decisions_checked == 0


def test_factor_bounds_hold_for_every_pair_and_are_attained():
    for m in (load_febrl("febrl3", limit=400), synthetic_mentions(400, seed=2, noise=0.2)):
        sig = jnp.asarray(m.signatures)
        f = np.asarray(factors(sig[:, None], sig[None, :], jnp.asarray(m.weights)))
        lo, hi = factor_bounds(m.weights)
        assert lo <= f.min() and f.max() <= hi
        assert f.max() > hi - 1e-3 * abs(hi)  # a mention with itself: every field equal (unless missing)
    # negative weights swap the ends of their terms
    assert factor_bounds([1.0, -2.0], tau=0.5) == pytest.approx((-1.5, 1.5), abs=1e-3)


def test_factor_bounds_spare_the_small_clusters_at_the_same_answers():
    """Near convergence the leading cluster's lower limit is far above what a cluster of <= 3 mentions can
    total: with the bounds those are not read, so a move reads fewer factors, with the decisions still
    checked against exact Gibbs under the same noise."""
    m = synthetic_mentions(6000, seed=1, noise=0.2)
    kw = dict(num_sweeps=1, schedule=[1.0], init=m.entity.copy(), seed=0, moves_per_sweep=150, check_every=1)
    bounded = annealed_gibbs(m, method="normal", **kw)
    paper = annealed_gibbs(m, method="normal", use_factor_bounds=False, **kw)
    assert bounded.factor_evaluations[-1] < 0.8 * paper.factor_evaluations[-1]
    assert bounded.decision_errors <= 0.05 * 150 + 3 * np.sqrt(0.05 * 150)


