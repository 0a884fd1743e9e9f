"""The doubling schedule of Alg. 1 (Sec. 3.3 of Chen & Ghahramani 2016)."""

from __future__ import annotations

__all__ = ["doubling_schedule"]


def doubling_schedule(population_size: int, first_batch: int) -> tuple[int, ...]:
    r"""Cumulative sample sizes ``T^(1) < ... < T^(t*) = N`` of the doubling schedule.

    ``T^(t) = min(m1 2^(t-1), N)``: the first mini-batch has ``m1 = first_batch``
    points, each later stage doubles the total read, and the last stage reads
    exactly the rest, so ``T^(t*) = N`` with ``t* = ceil(log2(N / m1)) + 1``.

    Example:
        >>> doubling_schedule(1000, 50)
        (50, 100, 200, 400, 800, 1000)
    """
    n, m = int(population_size), int(first_batch)
    if m < 1 or m > n:
        raise ValueError(f"first_batch must lie in [1, population_size={n}], got {m}")
    sizes = [m]
    while sizes[-1] < n:
        sizes.append(min(2 * sizes[-1], n))
    return tuple(sizes)
