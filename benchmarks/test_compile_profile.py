"""Where a test's seconds go: the XLA compilations of one small RacingMH run, program by program.

One ``MCMC(RacingMH(model), num_warmup=20, num_samples=20)`` run on a one-parameter normal mean
(N = 2000, NumPy float64 data), with XLA's default options (as the test suite compiles), logged through ``jax_log_compiles``: the number of programs compiled, the compile seconds of
each, and the run's wall seconds.  Writes ``benchmarks/results/test_compile_profile.json``.

    python benchmarks/test_compile_profile.py
"""

import collections
import json
import logging
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402

from subsample_mcmc import RacingMH  # noqa: E402

seconds = collections.Counter()
count = collections.Counter()


class _Compiles(logging.Handler):
    def emit(self, record):
        msg = record.getMessage()
        if msg.startswith("Finished XLA compilation of") and msg.endswith(" sec"):
            parts = msg.split()
            seconds[parts[4]] += float(parts[-2])
            count[parts[4]] += 1


def model(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    with numpyro.plate("data", y.shape[0]):
        numpyro.sample("y", dist.Normal(mu, 2.0), obs=y)


def main():
    logging.getLogger("jax").addHandler(_Compiles())
    logging.getLogger("jax").setLevel(logging.DEBUG)
    jax.config.update("jax_log_compiles", True)
    y = np.random.default_rng(0).normal(1.0, 2.0, 2000)
    t0 = time.perf_counter()
    mcmc = MCMC(RacingMH(model), num_warmup=20, num_samples=20, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), y)
    wall = time.perf_counter() - t0
    out = {"xla_flags": os.environ.get("XLA_FLAGS", ""), "jax": jax.__version__, "wall_seconds": wall,
           "programs": sum(count.values()), "compile_seconds": sum(seconds.values()),
           "by_program": {k: {"seconds": v, "count": count[k]} for k, v in seconds.most_common()}}
    path = Path(__file__).resolve().parent / "results" / "test_compile_profile.json"
    path.write_text(json.dumps(out, indent=2))
    print(json.dumps({k: out[k] for k in ("wall_seconds", "programs", "compile_seconds")}))
    for k, v in list(out["by_program"].items())[:5]:
        print(f"  {v['seconds']:6.2f} s  x{v['count']}  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
