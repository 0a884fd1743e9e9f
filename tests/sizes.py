"""The suite's two sizes: ``SUBSAMPLE_MCMC_TEST_SIZE=ci`` (the default: ``make test``, CI) or
``full`` (``make test-full``).

A statistical test takes its sample sizes from :func:`size`; its docstring says what a wrong
implementation (a mutant) scores at the CI size, so that a smaller size does not lose the
test's power in silence.
"""

from __future__ import annotations

import os

SIZE = os.environ.get("SUBSAMPLE_MCMC_TEST_SIZE", "ci").strip().lower() or "ci"
if SIZE not in ("ci", "full"):
    raise ValueError(f"SUBSAMPLE_MCMC_TEST_SIZE must be 'ci' or 'full', got {SIZE!r}")
FULL = SIZE == "full"


def size(ci, full):
    """``ci`` at the CI size, ``full`` at the full size."""
    return full if FULL else ci
