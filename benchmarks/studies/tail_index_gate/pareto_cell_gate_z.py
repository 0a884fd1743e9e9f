import jax.numpy as jnp, sys
from subsample_mcmc.racing.bounds import NormalBound
from subsample_mcmc.testing import make_infinite_problem, run_setting
from experiments.synthetic import make_problem, run_setting as run
zs=[float(z) if z!="B" else "B" for z in sys.argv[1].split(",")]
pr=make_infinite_problem("pareto_1.1",2,20000,seed=0,sigma=3e-4); pr=pr._replace(rewards=jnp.asarray(pr.rewards))
for z in zs:
    r=run_setting(pr,method=NormalBound(tail_gate_z=z),delta=0.001,num_races=200,seed=1,batch_size=None)
    print(f"pareto z={z} {r['errors']}/200 read {r['fraction_read']:.3f}",flush=True)
for d in (10,):
    pr=make_problem(0,d,100_000,"lognormal",1e-5)
    for variance in ("pairwise","marginal"):
      for delta in (0.01,0.1):
        o=run(pr,method=NormalBound(tail_index_guard=False),delta=delta,variance=variance,num_races=100,seed=0,batch_size=None)["fraction_read"]
        out=[]
        for z in zs:
            f=run(pr,method=NormalBound(tail_gate_z=z),delta=delta,variance=variance,num_races=100,seed=0,batch_size=None)["fraction_read"]
            out.append(f"z={z} {f/o:.3f}")
        print(f"D={d} {variance} {delta} old {o:.4f} "+" ".join(out),flush=True)
