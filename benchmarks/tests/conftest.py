"""Tests of the benchmarks' own helpers (``benchmarks/experiments``), run by ``make test-full``:
they check benchmark code, not the package, so the package's suite (``tests/``) does not import
them."""

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
