"""Without-replacement index streams that cost O(points read), not O(N).

A race reads the population ``range(N)`` in a uniformly random order, a few points
at a time, and usually stops after a tiny prefix.  Drawing
``jax.random.permutation(N)`` per race costs O(N log N) and erases the gain, so the
order is instead a *keyed pseudo-random permutation* ``P_key`` of ``range(N)``
evaluated position by position: the ``j``-th point read is ``P_key(j)``.  Reading
positions ``[a, b)`` costs O(b - a) whatever N is.

Construction (a generalised Feistel network, Black & Rogaway 2002, "Ciphers with
arbitrary finite domains"): write ``N <= A * B`` with ``A = ceil(sqrt(N))`` and
``B = ceil(N / A)``, so that ``A * B - N < A``.  A point ``x = L * B + R`` of
``Z_A x Z_B`` goes through rounds alternating

    (L, R) in Z_A x Z_B  ->  (R, (L + F_k(R)) mod A)  in Z_B x Z_A
    (L, R) in Z_B x Z_A  ->  (R, (L + F_k(R)) mod B)  in Z_A x Z_B

each of which is a bijection whatever the round function ``F_k`` is (it is undone
by ``L = (R' - F_k(L')) mod A``).  ``F_k`` is a 32-bit integer hash keyed by a
per-round key drawn from the JAX PRNG key.  After an even number of rounds the map
is a permutation of ``Z_A x Z_B = range(A * B)``; *cycle walking* (re-applying it
while the image is ``>= N``) turns it into a permutation of ``range(N)``.  Because
``A * B - N < sqrt(N) + 1``, walking is almost never needed and costs at most a few
extra rounds.

The map is a true permutation for every key (tested exhaustively for small N);
six rounds make the order statistically indistinguishable from uniform for the
purposes of the races (tested with the without-replacement variance of prefix
means).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["IndexStream", "index_stream", "permuted_indices", "sized_permuted_indices", "NUM_ROUNDS"]

NUM_ROUNDS = 6  # even, so that the output lives in Z_A x Z_B again


def _split_sizes(population_size: int) -> tuple[int, int]:
    a = max(1, math.isqrt(population_size - 1) + 1) if population_size > 1 else 1
    b = max(1, -(-population_size // a))
    return a, b


class IndexStream(NamedTuple):
    """A keyed permutation of ``range(population_size)``, read position by position.

    Fields are arrays so that a stream is a pytree (it can cross ``jit`` and
    ``vmap`` boundaries); ``population_size`` and the split ``(A, B)`` are Python
    ints fixed at construction.
    """

    round_keys: jax.Array  # uint32[NUM_ROUNDS]
    population_size: int
    split: tuple[int, int]

    def __call__(self, positions: jax.Array) -> jax.Array:
        return permuted_indices(self, positions)


jax.tree_util.register_pytree_node(
    IndexStream,
    lambda s: ((s.round_keys,), (s.population_size, s.split)),
    lambda aux, children: IndexStream(children[0], *aux),
)


def index_stream(key: jax.Array, population_size: int) -> IndexStream:
    """Return the without-replacement stream of ``range(population_size)`` for ``key``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> s = index_stream(jax.random.PRNGKey(0), 10)
        >>> sorted(s(jnp.arange(10)).tolist())
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """
    if population_size < 1 or population_size >= 2**31:
        raise ValueError(
            f"population_size must be in [1, 2**31), got {population_size}"
        )
    round_keys = jax.random.bits(key, (NUM_ROUNDS,), dtype=jnp.uint32)
    return IndexStream(round_keys, int(population_size), _split_sizes(population_size))


def _hash(x: jax.Array, k: jax.Array) -> jax.Array:
    # murmur3 finaliser over (x xor key); uint32 arithmetic wraps modulo 2**32.
    x = (x ^ k) * jnp.uint32(0x9E3779B1)
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    x = x ^ (x >> 16)
    return x


def _feistel(x: jax.Array, round_keys: jax.Array, a, b) -> jax.Array:
    ua, ub = jnp.asarray(a, jnp.uint32), jnp.asarray(b, jnp.uint32)
    left, right = x // ub, x % ub  # left in Z_a, right in Z_b
    for r in range(NUM_ROUNDS):
        k = round_keys[..., r]
        if r % 2 == 0:  # (Z_a, Z_b) -> (Z_b, Z_a)
            left, right = right, (left + _hash(right, k) % ua) % ua
        else:  # (Z_b, Z_a) -> (Z_a, Z_b)
            left, right = right, (left + _hash(right, k) % ub) % ub
    return left * ub + right


def permuted_indices(stream: IndexStream, positions: jax.Array) -> jax.Array:
    """Indices ``P_key(positions)`` of the points read at ``positions`` (int32).

    ``positions`` must lie in ``[0, population_size)``; the cost is
    O(len(positions)), independent of ``population_size``.
    """
    n = stream.population_size
    a, b = stream.split
    x = _feistel(positions.astype(jnp.uint32), stream.round_keys, a, b)
    if a * b > n:  # cycle walking back into range(n)
        x = lax.while_loop(
            lambda y: jnp.any(y >= n),
            lambda y: jnp.where(y >= n, _feistel(y, stream.round_keys, a, b), y),
            x,
        )
    return x.astype(jnp.int32)


def sized_permuted_indices(round_keys: jax.Array, population_size: jax.Array,
                           positions: jax.Array) -> jax.Array:
    """``P(positions)`` for permutations of ``range(population_size)`` with a *traced* size.

    The same Feistel network and cycle walking as :func:`permuted_indices`, with the
    split ``A = ceil(sqrt(N))``, ``B = ceil(N / A)`` computed from the traced ``N``;
    ``round_keys`` (``uint32[..., NUM_ROUNDS]``), ``population_size`` and ``positions``
    broadcast elementwise, so one call serves many arms of different sizes (the
    unequal-population race, :mod:`.unequal`).  Positions must lie in ``[0, N)``; an
    ``N`` of 0 returns 0 (the caller masks it).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> keys = jax.random.bits(jax.random.PRNGKey(0), (NUM_ROUNDS,), dtype=jnp.uint32)
        >>> sorted(sized_permuted_indices(keys, jnp.int32(7), jnp.arange(7)).tolist())
        [0, 1, 2, 3, 4, 5, 6]
    """
    n = jnp.maximum(jnp.asarray(population_size, jnp.int32), 1)
    m = (n - 1).astype(jnp.float32)
    r = jnp.floor(jnp.sqrt(m)).astype(jnp.int32)  # isqrt(n - 1), corrected for rounding
    r = r - (r * r > n - 1) + ((r + 1) * (r + 1) <= n - 1)
    a = jnp.where(n > 1, r + 1, 1)
    b = (n + a - 1) // a
    un = n.astype(jnp.uint32)
    x = _feistel(jnp.broadcast_to(positions, jnp.broadcast_shapes(jnp.shape(positions), n.shape))
                 .astype(jnp.uint32), round_keys, a, b)
    x = lax.while_loop(
        lambda y: jnp.any(y >= un),
        lambda y: jnp.where(y >= un, _feistel(y, round_keys, a, b), y),
        x,
    )
    return x.astype(jnp.int32)
