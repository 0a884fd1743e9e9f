r"""Symbolic index formulas (Maes, Wehenkel & Ernst, Sec. 5) and their search.

Grammar (Fig. 1)::

    F ::= B(F, F) | U(F) | V | C
    B ::= + | - | * | / | min | max        U ::= sqrt | ln | abs | neg | inv
    V ::= rbar | sigma | t_k | t           C ::= 1 | 2 | 3 | 5 | 7

A formula is stored as a postfix token vector of static length ``L`` (padded with 0),
so one compiled stack machine (:func:`evaluate_postfix`) evaluates *any* formula and
``vmap`` runs thousands of formula policies at once.

Search (Sec. 5.2):

1. :func:`enumerate_formulas` builds every formula of length <= L bottom-up; formulas
   with identical values on the ``d`` random points are interchangeable as
   sub-formulas, so each length keeps one per value vector (shortest first);
   formulas with a non-finite value are discarded ("invalid").
2. :func:`equivalence_classes` clusters by the *ranking* of the ``d`` points (two
   formulas are equivalent iff ``F(x_i) >= F(x_j) <=> F'(x_i) >= F'(x_j)``) and keeps
   one formula of minimal length per cluster.
3. The best class is identified by a pure-exploration bandit:
   :func:`identify_ucb1_tuned` (UCB1-Tuned, as in the paper; pulls run in vmapped
   batches of the highest indices, and training problem ``i = t_k mod N`` for arm k) or
   :func:`identify_racing` (``subsample_mcmc.racing.best_arm`` over the finite
   population of training problems: rewards ``-R`` of each formula on each problem,
   read without replacement until the Normal bound separates the best).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .base import Environment, Policy
from .index import index_policy
from .simulate import bandit_jit, check_horizon, compile_options, run_episode

__all__ = [
    "VARIABLES", "CONSTANTS", "UNARY", "BINARY", "TOKENS", "parse_postfix", "to_postfix",
    "format_formula", "evaluate_postfix", "formula_policy", "enumerate_formulas",
    "equivalence_classes", "FormulaSet", "identify_ucb1_tuned", "identify_racing",
    "sample_points", "IdentifyResult", "count_formulas",
]

VARIABLES = ("rbar", "sigma", "t_k", "t")
CONSTANTS = (1.0, 2.0, 3.0, 5.0, 7.0)
UNARY = ("sqrt", "ln", "abs", "neg", "inv")
BINARY = ("+", "-", "*", "/", "min", "max")
# token ids: 0 = padding, then variables, constants, unary, binary
TOKENS = ("pad",) + VARIABLES + tuple(str(int(c)) for c in CONSTANTS) + UNARY + BINARY
_V0, _C0, _U0, _B0 = 1, 1 + len(VARIABLES), 1 + len(VARIABLES) + len(CONSTANTS), \
    1 + len(VARIABLES) + len(CONSTANTS) + len(UNARY)
_ARITY = np.array([0] + [0] * 9 + [1] * 5 + [2] * 6)


def _np_unary(op, x):
    with np.errstate(all="ignore"):
        return [np.sqrt, np.log, np.abs, np.negative, lambda v: 1.0 / v][op](x)


def _np_binary(op, a, b):
    with np.errstate(all="ignore"):
        return [np.add, np.subtract, np.multiply, np.divide, np.minimum, np.maximum][op](a, b)


def _jnp_unary(x):
    return jnp.stack([jnp.sqrt(x), jnp.log(x), jnp.abs(x), -x, 1.0 / x])


def _jnp_binary(a, b):
    return jnp.stack([a + b, a - b, a * b, a / b, jnp.minimum(a, b), jnp.maximum(a, b)])


# ------------------------------------------------------------------ text <-> tokens

def to_postfix(tokens) -> list:
    """Token vector -> list of postfix symbols (padding dropped)."""
    return [TOKENS[int(t)] for t in tokens if int(t) != 0]


def parse_postfix(words, length: int | None = None) -> np.ndarray:
    """``["rbar", "2", "t_k", "/", "+"]`` -> int32 token vector (padded to ``length``)."""
    ids = []
    for w in words:
        if w not in TOKENS[1:]:
            raise ValueError(f"unknown formula symbol {w!r}; symbols are {TOKENS[1:]}")
        ids.append(TOKENS.index(w))
    depth = 0
    for i in ids:
        depth += 1 - _ARITY[i]
        if depth < 1:
            raise ValueError(f"malformed postfix formula {words}")
    if depth != 1:
        raise ValueError(f"malformed postfix formula {words}")
    length = len(ids) if length is None else length
    if len(ids) > length:
        raise ValueError(f"formula of length {len(ids)} exceeds {length}")
    return np.array(ids + [0] * (length - len(ids)), np.int32)


def format_formula(tokens) -> str:
    """Infix text of a postfix token vector, e.g. ``rbar + 2 / t_k``."""
    stack = []
    for w in to_postfix(tokens):
        if w in UNARY:
            a = stack.pop()
            stack.append(f"-({a})" if w == "neg" else f"{w}({a})")
        elif w in BINARY:
            b, a = stack.pop(), stack.pop()
            stack.append(f"{w}({a}, {b})" if w in ("min", "max") else f"({a} {w} {b})")
        else:
            stack.append(w)
    text = stack[0]
    return text[1:-1] if text.startswith("(") and text.endswith(")") else text


# ------------------------------------------------------------------ JAX evaluation

def evaluate_postfix(tokens, rbar, sigma, tk, t):
    """Stack machine: value of the postfix ``tokens`` (static length L, traced ids) at
    the variables (broadcast together, e.g. ``[K]`` arms).  Padding is a no-op."""
    tokens = jnp.asarray(tokens).astype(jnp.int32)
    leaves = jnp.stack(jnp.broadcast_arrays(rbar, sigma, tk, jnp.asarray(t, jnp.float32)) +
                       [jnp.full(jnp.shape(rbar), c, jnp.float32) for c in CONSTANTS])
    length = tokens.shape[0]
    stack = jnp.zeros((length + 1,) + leaves.shape[1:], jnp.float32)
    sp = jnp.int32(0)
    for pos in range(length):
        tok = tokens[pos]
        top = stack[jnp.maximum(sp - 1, 0)]
        sec = stack[jnp.maximum(sp - 2, 0)]
        leaf = leaves[jnp.clip(tok - _V0, 0, leaves.shape[0] - 1)]
        un = _jnp_unary(top)[jnp.clip(tok - _U0, 0, len(UNARY) - 1)]
        bi = _jnp_binary(sec, top)[jnp.clip(tok - _B0, 0, len(BINARY) - 1)]
        is_leaf = (tok >= _V0) & (tok < _U0)
        is_un = (tok >= _U0) & (tok < _B0)
        is_bi = tok >= _B0
        value = jnp.where(is_leaf, leaf, jnp.where(is_un, un, bi))
        write = jnp.where(is_leaf, sp, jnp.where(is_un, sp - 1, sp - 2))
        write = jnp.where(tok == 0, length, jnp.maximum(write, 0))      # pad -> scratch slot
        stack = stack.at[write].set(jnp.where(tok == 0, stack[write], value))
        sp = sp + jnp.where(is_leaf, 1, jnp.where(is_bi, -1, 0))
    return stack[0]


def _formula_index(params, tk, mean, sd, t):
    return evaluate_postfix(params, mean, sd, tk, t)


def formula_policy(formula) -> Policy:
    """Index policy (Alg. 1) with a formula index; ``formula`` is postfix text (``"rbar
    2 t_k / +"``), a word list, or a token vector.  The tokens are the policy's
    ``params`` (so many formulas share one compiled program)."""
    if isinstance(formula, str):
        formula = formula.split()
    tokens = parse_postfix(formula) if not isinstance(formula, np.ndarray) else formula
    import dataclasses
    return dataclasses.replace(index_policy("formula", _formula_index),
                               name=format_formula(tokens), default_params=jnp.asarray(tokens),
                               param_names=("tokens",))


# ------------------------------------------------------------------ enumeration

def sample_points(key, num_points: int, horizon: int, group_size: int = 8) -> dict:
    """``num_points`` random histories: ``rbar ~ U[0,1]``, ``sigma ~ U[0,1/2]``,
    ``t ~ U{2..T}``, ``t_k ~ U{1..t-1}`` (the domains of the variables).

    Points come in groups of ``group_size`` sharing one ``t``: a policy only ever compares
    arms at the same ``t``, so :func:`equivalence_classes` ranks within groups (formulas
    differing by a function of ``t`` alone, e.g. ``rbar`` and ``rbar + 1/t``, are the same
    policy and fall in one class)."""
    if num_points % group_size:
        raise ValueError(f"num_points must be a multiple of group_size={group_size}")
    rng = np.random.default_rng(int(jax.random.randint(key, (), 0, 2 ** 31 - 1)))
    t = np.repeat(rng.integers(2, horizon + 1, num_points // group_size), group_size).astype(float)
    tk = np.floor(rng.uniform(0, 1, num_points) * (t - 1)) + 1
    return dict(rbar=rng.uniform(0, 1, num_points), sigma=rng.uniform(0, 0.5, num_points),
                t_k=tk, t=t, group_size=group_size)


class FormulaSet(NamedTuple):
    tokens: np.ndarray   # [M, L] postfix token vectors
    lengths: np.ndarray  # [M]
    values: np.ndarray   # [M, d] values on the sample points
    num_formulas: int       # |Theta|: all formulas of length <= L (valid or not)
    num_value_classes: int  # distinct finite value vectors on the points


def count_formulas(max_length: int) -> int:
    """``|Theta|``: the number of grammar formulas of length <= L (Sec. 6.1: about
    33.5 million for L = 7), from ``n(1) = |V| + |C|``, ``n(L) = |U| n(L-1) + |B|
    sum_{a+b=L-1} n(a) n(b)``."""
    n = {1: len(VARIABLES) + len(CONSTANTS)}
    for length in range(2, max_length + 1):
        n[length] = len(UNARY) * n[length - 1] + len(BINARY) * sum(
            n[a] * n[length - 1 - a] for a in range(1, length - 1))
    return int(sum(n[k] for k in range(1, max_length + 1)))


def _key(v):
    return np.round(v, 9).tobytes()


def enumerate_formulas(max_length: int, points: dict) -> FormulaSet:
    """All formulas of length <= ``max_length``, one per distinct value vector on
    ``points`` (shortest kept).  Also counts the raw grammar size ``|Theta|``."""
    if not 1 <= max_length <= 7:
        raise ValueError(f"max_length must lie in [1, 7], got {max_length}")
    leaves = [np.asarray(points[v], float) for v in VARIABLES] + \
        [np.full_like(np.asarray(points["rbar"], float), c) for c in CONSTANTS]
    by_len = {1: []}
    seen = {}
    raw = {1: len(leaves)}
    def add(length, postfix, vals):
        if not np.all(np.isfinite(vals)):
            return
        k = _key(vals)
        if k in seen:
            return
        seen[k] = True
        by_len[length].append((postfix, vals))

    for i, v in enumerate(leaves):
        add(1, (_V0 + i,), np.asarray(v, float))
    for length in range(2, max_length + 1):
        by_len[length] = []
        raw[length] = len(UNARY) * raw[length - 1] + len(BINARY) * sum(
            raw[a] * raw[length - 1 - a] for a in range(1, length - 1))
        for postfix, vals in by_len[length - 1]:
            for op in range(len(UNARY)):
                add(length, postfix + (_U0 + op,), _np_unary(op, vals))
        for a in range(1, length - 1):
            b = length - 1 - a
            if not by_len[a] or not by_len[b]:
                continue
            va = np.stack([v for _, v in by_len[a]])
            vb = np.stack([v for _, v in by_len[b]])
            for op in range(len(BINARY)):
                out = _np_binary(op, va[:, None, :], vb[None, :, :])       # [na, nb, d]
                finite = np.all(np.isfinite(out), axis=2)
                for i, j in zip(*np.nonzero(finite)):
                    add(length, by_len[a][i][0] + by_len[b][j][0] + (_B0 + op,), out[i, j])
    items = [(len(p), p, v) for length in sorted(by_len) for p, v in by_len[length]]
    tokens = np.zeros((len(items), max_length), np.int32)
    for r, (n, p, _) in enumerate(items):
        tokens[r, :n] = p
    return FormulaSet(tokens, np.array([n for n, _, _ in items]),
                      np.stack([v for _, _, v in items]) if items else np.zeros((0, 0)),
                      int(sum(raw.values())), len(items))


def equivalence_classes(formulas: FormulaSet, group_size: int = 8) -> FormulaSet:
    """Cluster by the ranking of the sample points (Sec. 5.2, step 3) and keep the first
    (shortest) formula of each cluster.  Ranks are taken within the groups of points that
    share ``t`` (see :func:`sample_points`; ``group_size=num_points`` gives the paper's
    global ranking); formulas constant within every group (functions of ``t`` only: a
    uniformly random policy) are dropped."""
    from scipy.stats import rankdata

    keep, seen = [], set()
    for r, vals in enumerate(formulas.values):
        grouped = np.round(vals, 9).reshape(-1, group_size)
        ranks = rankdata(grouped, method="dense", axis=1).astype(np.int32)
        if ranks.max() == 1:
            continue
        k = ranks.tobytes()
        if k not in seen:
            seen.add(k)
            keep.append(r)
    keep = np.array(keep, int)
    return FormulaSet(formulas.tokens[keep], formulas.lengths[keep], formulas.values[keep],
                      formulas.num_formulas, formulas.num_value_classes)


# ------------------------------------------------------------------ identification

class IdentifyResult(NamedTuple):
    best: int                # index into the formula set
    formula: str
    means: np.ndarray        # [M] estimated mean regret (nan if never pulled)
    pulls: np.ndarray        # [M] episodes per formula
    episodes: int            # total episodes simulated
    seconds: float


@functools.lru_cache(maxsize=None)
def _pull_runner(env, horizon, options=None):
    policy = index_policy("formula", _formula_index)

    def run(tokens, problems, keys):
        def one(tok, problem, k):
            return run_episode(policy, env, horizon, tok, k, problem=problem, curve=False).regret
        return jax.vmap(one)(tokens, problems, keys)

    return bandit_jit(run, options)


def identify_ucb1_tuned(formulas: FormulaSet, env: Environment, horizon: int, key,
                        num_problems: int = 100, rounds: int = 200, batch: int = 256,
                        chunk: int = 4096, recommend: str = "mean") -> IdentifyResult:
    """Pure-exploration UCB1-Tuned over the formula classes (Sec. 5.2).

    Arm k's reward is ``1 - R/T`` in [0, 1] of one episode on training problem
    ``i = t_k mod N``.  After one pull of every arm, each round pulls the ``batch`` arms
    with the largest UCB1-Tuned indices at once (a batched version of the sequential
    rule, so a round is one vmapped call); the answer is the arm with the best mean
    (``recommend="mean"``, the paper's rule) or the most pulled arm
    (``"most_played"``, robust to the winner's curse of arms pulled a few times).
    """
    if recommend not in ("mean", "most_played"):
        raise ValueError(f"recommend must be 'mean' or 'most_played', got {recommend!r}")
    import time

    horizon = check_horizon(env, horizon)
    t0 = time.perf_counter()
    m = formulas.tokens.shape[0]
    k_problems, k_runs = jax.random.split(key)
    problems = jax.vmap(env.sample_problem)(jax.random.split(k_problems, num_problems))
    run = _pull_runner(env, horizon, compile_options())
    counts, sums, sumsq = np.zeros(m), np.zeros(m), np.zeros(m)
    tokens = jnp.asarray(formulas.tokens)

    def pull(arms):
        arms = np.asarray(arms)
        out = []
        for s in range(0, len(arms), chunk):
            a = arms[s:s + chunk]
            idx = (counts[a] % num_problems).astype(np.int32)
            keys = jax.vmap(lambda i, c: jax.random.fold_in(jax.random.fold_in(k_runs, i), c))(
                jnp.asarray(a), jnp.asarray(counts[a].astype(np.int32)))
            prob = jax.tree_util.tree_map(lambda x: x[idx], problems)
            out.append(np.asarray(run(tokens[a], prob, keys)))
        reward = 1.0 - np.concatenate(out) / horizon
        np.add.at(counts, arms, 1)
        np.add.at(sums, arms, reward)
        np.add.at(sumsq, arms, reward ** 2)

    pull(np.arange(m))
    for _ in range(rounds):
        n = counts.sum()
        mean = sums / counts
        var = np.maximum(sumsq / counts - mean ** 2, 0)
        v = var + np.sqrt(2 * np.log(n) / counts)
        idx = mean + np.sqrt(np.log(n) / counts * np.minimum(0.25, v))
        pull(np.argsort(-idx)[:min(batch, m)])
    means = horizon * (1.0 - sums / counts)
    best = int(np.argmin(means)) if recommend == "mean" else int(np.argmax(counts))
    return IdentifyResult(best, format_formula(formulas.tokens[best]), means, counts,
                          int(counts.sum()), time.perf_counter() - t0)


def identify_racing(formulas: FormulaSet, env: Environment, horizon: int, key,
                    num_problems: int = 1000, delta: float = 0.05, first_batch: int = 50,
                    block: int = 256) -> IdentifyResult:
    """Best formula by racing (``subsample_mcmc.racing.best_arm``, Alg. 1 of Chen &
    Ghahramani with the Normal bound): the finite population is ``num_problems``
    training problems, each with a fixed run key, and ``l_{k,i} = -R`` of formula k on
    problem i; problems are read without replacement in doubling stages until one
    formula is separated from all others with error <= ``delta`` (or all are read).
    """
    import time

    from ..racing import best_arm

    horizon = check_horizon(env, horizon)
    t0 = time.perf_counter()
    m = formulas.tokens.shape[0]
    k_problems, k_runs, k_race = jax.random.split(key, 3)
    problems = jax.vmap(env.sample_problem)(jax.random.split(k_problems, num_problems))
    run_keys = jax.random.split(k_runs, num_problems)
    tokens = jnp.asarray(formulas.tokens)
    policy = index_policy("formula", _formula_index)

    def rewards(indices):
        prob = jax.tree_util.tree_map(lambda x: x[indices], problems)
        keys = run_keys[indices]

        def per_formula(tok):
            return jax.vmap(lambda pb, k: -run_episode(policy, env, horizon, tok, k, problem=pb,
                                                       curve=False).regret)(prob, keys)

        return jax.lax.map(per_formula, tokens, batch_size=block)       # [M, len(indices)]

    res = best_arm(k_race, rewards, method="normal", delta=delta, num_arms=m,
                   population_size=num_problems, first_batch=first_batch, variance="marginal")
    best = int(res.arm)
    read = int(res.num_points_read)
    return IdentifyResult(best, format_formula(formulas.tokens[best]), np.full(m, np.nan),
                          np.full(m, read), int(res.num_rewards_read), time.perf_counter() - t0)
