"""One-sided Lomax(alpha) arm against a constant (1 - rel) x its mean; error rate per bound variant."""
import os, sys
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import numpy as np, jax, jax.numpy as jnp
from subsample_mcmc.racing import best_arm
from subsample_mcmc.racing.bounds import NormalBound
N = 20000; NPOP = int(os.environ.get("NPOP", 25)); NKEY = 40
variants = {"default": NormalBound(), "nogate": NormalBound(tail_gate_z=None), "nogate_p1": NormalBound(tail_gate_z=None, tail_level_power=1.0),
            "gate1": NormalBound(tail_gate_z=1.0), "gate0": NormalBound(tail_gate_z=0.0)}
sel = sys.argv[1].split(",")
delta = float(sys.argv[2]); alpha = float(sys.argv[3]); rel = float(sys.argv[4])
fns = {v: jax.jit(jax.vmap(lambda k, r, b=variants[v]: best_arm(k, r, method=b, delta=delta), in_axes=(0, None))) for v in sel}
rng = np.random.default_rng(21); wrong = {v: 0 for v in sel}; reads = {v: [] for v in sel}; total = 0
for p in range(NPOP):
    a0 = rng.pareto(alpha, size=N); a1 = np.full(N, a0.mean() * (1 - rel))
    r = jnp.asarray(np.stack([a0, a1]).astype(np.float32))
    keys = jax.random.split(jax.random.PRNGKey(20_000 + p), NKEY)
    for v in sel:
        res = fns[v](keys, r); wrong[v] += int(np.sum(np.asarray(res.arm) != 0)); reads[v].append(np.asarray(res.num_rewards_read) / (2 * N))
    total += NKEY
print(f"alpha {alpha} rel {rel} delta {delta}: " + "  ".join(f"{v} {wrong[v]}/{total} read {np.mean(np.concatenate(reads[v])):.3f}" for v in sel), flush=True)
