import sys, time
from subsample_mcmc.racing.bounds import NormalBound
from experiments.synthetic import make_problem, run_setting as run
races=int(sys.argv[1]); seed=0
V=[("old",NormalBound(tail_index_guard=False)),("gate",NormalBound(tail_index_guard=True,tail_gate_z=2.0,tail_level_power=0.25))]
for dist,sigma in (("lognormal",1e-5),("lognormal",0.1),("normal",1e-5),("normal",1e-4),("normal",0.1)):
  for d in (2,10):
    pr=make_problem(seed,d,100_000,dist,sigma)
    for variance in ("pairwise","marginal"):
      for delta in (0.01,0.1):
        f={};e={};t0=time.time()
        for lab,b in V:
            r=run(pr,method=b,delta=delta,variance=variance,num_races=races,seed=seed,batch_size=None)
            f[lab]=r["fraction_read"];e[lab]=r["errors"]
        print(f"D={d} {dist} sigma={sigma:g} {variance} delta={delta:g} old {f['old']:.4f} gate {f['gate']:.4f} ratio {f['gate']/f['old']:.3f} err {e['old']}/{e['gate']} ({time.time()-t0:.0f}s)",flush=True)
