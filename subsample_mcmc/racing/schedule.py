"""The doubling schedule of Alg. 1 (Sec. 3.3 of Chen & Ghahramani 2016).

The one home of stage counts: :func:`num_stages` (``t*``) and the stage fractions
used by ``B_Normal`` (:mod:`.bounds`) both count doublings with :func:`_doublings`.
"""

from __future__ import annotations

__all__ = ["doubling_schedule", "num_stages"]


def _doublings(first, total) -> int:
    """Smallest ``k >= 0`` with ``first 2^k >= total`` (ints or floats).

    With ``first = m1`` and ``total = N`` this is ``t* - 1 = ceil(log2(N / m1))``,
    the number of stages before the exact one; with ``first = pi_1 = m1 / N`` and
    ``total = 1`` the same count in fractions (what ``B_Normal`` depends on).
    """
    k = 0
    while first * 2**k < total:
        k += 1
    return k


def num_stages(population_size: int, first_batch: int) -> int:
    """``t* = ceil(log2(N / m1)) + 1``: the number of stages of the doubling schedule.

    Equal to ``len(doubling_schedule(N, m1))`` (Alg. 1; Eq. 27 divides ``delta`` by
    ``t* - 1``, the stages at which a bound is used).

    Example:
        >>> num_stages(1000, 50)
        6
    """
    return _doublings(int(first_batch), int(population_size)) + 1


def doubling_schedule(population_size: int, first_batch: int) -> tuple[int, ...]:
    r"""Cumulative sample sizes ``T^(1) < ... < T^(t*) = N`` of the doubling schedule.

    ``T^(t) = min(m1 2^(t-1), N)``: the first mini-batch has ``m1 = first_batch``
    points, each later stage doubles the total read, and the last stage reads
    exactly the rest, so ``T^(t*) = N`` with ``t* = ceil(log2(N / m1)) + 1``
    (:func:`num_stages`).

    Example:
        >>> doubling_schedule(1000, 50)
        (50, 100, 200, 400, 800, 1000)
    """
    n, m = int(population_size), int(first_batch)
    if m < 1 or m > n:
        raise ValueError(f"first_batch must lie in [1, population_size={n}], got {m}")
    return tuple(min(m * 2**k, n) for k in range(num_stages(n, m)))
