"""What a repeated ``mcmc.run`` costs before it samples: NumPyro compiles its sampling loop again on every
``run`` (``post_warmup_state`` included), and RacingMH's loop -- race stages, proxy, proposals, the exact-mode
branch -- is a larger program than NUTS's.  JAX's persistent compilation cache
(``jax.config.update("jax_compilation_cache_dir", path)``) stores the compiled loop, whose program is the same
from one ``run`` to the next, so a repeated ``run`` loads it instead.

Logistic regression, N = 1e5, d = 6 (NumPy float64 inputs as a user passes them, float32 sampling), 300
warmup draws, then ``run`` from ``post_warmup_state`` with 10 draws: seconds per ``run`` (median of
``--repeats``), for RacingMH's defaults and NumPyro NUTS, without and then with the persistent cache (a fresh
cache directory: its first ``run`` writes, the rest read).  One process; compile times vary with the machine's
load, so the ratios within the run are the result.

    python benchmarks/racing_mh_run_compile.py   # -> results/racing_mh_run_compile.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--n", type=int, default=100_000)
    args = ap.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import numpy as np
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC, NUTS

    from subsample_mcmc.numpyro import RacingMH

    rng = np.random.default_rng(0)
    n, d = args.n, 6
    x = rng.normal(size=(n, d))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-0.3 * x.sum(1)))).astype(np.float64)

    def model(x, y=None):
        w = numpyro.sample("w", dist.Normal(0.0, 5.0).expand([x.shape[1]]).to_event(1))
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("y", dist.Bernoulli(logits=x @ w), obs=y)

    def warm(kernel):
        mcmc = MCMC(kernel, num_warmup=300, num_samples=10, progress_bar=False)
        t = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(0), x=x, y=y)
        first = time.perf_counter() - t
        mcmc.post_warmup_state = mcmc.last_state
        return mcmc, first

    def timed_runs(mcmc, k):
        out = []
        for _ in range(k):
            t = time.perf_counter()
            mcmc.run(mcmc.post_warmup_state.rng_key, x=x, y=y)
            jax.block_until_ready(mcmc.get_samples())
            out.append(time.perf_counter() - t)
        return out

    chains = {name: warm(k) for name, k in (("racing", RacingMH(model)), ("nuts", NUTS(model)))}
    rows = {name: {"first_run_seconds": first, "no_cache": timed_runs(m, args.repeats)}
            for name, (m, first) in chains.items()}
    with tempfile.TemporaryDirectory(prefix="jaxcache_") as cache:
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
        for name, (m, _) in chains.items():
            rows[name]["cache_write"] = timed_runs(m, 1)[0]
            rows[name]["cache_read"] = timed_runs(m, args.repeats)
    for r in rows.values():
        r["no_cache_median"] = statistics.median(r["no_cache"])
        r["cache_read_median"] = statistics.median(r["cache_read"])
    payload = {"n": n, "d": d, "repeats": args.repeats, "rows": rows, "loadavg": list(os.getloadavg()),
               "jax": jax.__version__, "numpyro": numpyro.__version__}
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "racing_mh_run_compile.json").write_text(json.dumps(payload, indent=1) + "\n")
    rac, nuts = rows["racing"], rows["nuts"]
    lines = ["# A repeated `mcmc.run`: the sampling loop's compilation (benchmarks/racing_mh_run_compile.py)", "",
             f"Logistic regression, N = {n:,}, d = {d}; `run` from `post_warmup_state` with 10 draws, seconds per "
             f"`run`, median of {args.repeats}; load average {payload['loadavg'][0]:.1f}.", "",
             "| sampler | first run (300 warmup) | repeated run | repeated run, persistent cache | cache's first run |",
             "|---|---|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['first_run_seconds']:.2f} | {r['no_cache_median']:.2f} | "
                     f"{r['cache_read_median']:.2f} | {r['cache_write']:.2f} |")
    lines += ["", f"RacingMH's repeated run is {rac['no_cache_median'] / nuts['no_cache_median']:.1f}x NUTS's without the "
              f"cache and {rac['cache_read_median'] / nuts['cache_read_median']:.1f}x with it; the cache cuts RacingMH's "
              f"by {rac['no_cache_median'] / rac['cache_read_median']:.1f}x."]
    (results / "racing_mh_run_compile.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
