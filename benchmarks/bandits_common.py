"""Helpers shared by the ``benchmarks/bandits_*.py`` scripts."""

import json
import math
import os


def write_json(path, obj):
    """Write ``obj`` as indented JSON to ``path``, creating its folder (NumPy and JAX
    scalars are written as floats)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, default=float)


def paired_difference(a, b):
    """Mean and standard error of ``a - b`` over paired per-problem values (two
    policies run on the same problems): ``(mean, sd / sqrt(P))``."""
    d = a - b
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d)))
