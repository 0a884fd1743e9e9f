import jax.numpy as jnp, time
from subsample_mcmc.racing.bounds import NormalBound
from subsample_mcmc.testing import make_infinite_problem, run_setting
pr=make_infinite_problem("pareto_1.1",2,20000,seed=0,sigma=3e-4); pr=pr._replace(rewards=jnp.asarray(pr.rewards))
for lab,m in (("gate_z2",NormalBound(tail_index_guard=True,tail_gate_z=2.0)),):
    t0=time.time(); r=run_setting(pr,method=m,delta=0.001,num_races=200,seed=1,batch_size=None)
    print(f"{lab} {r['errors']}/200 read {r['fraction_read']:.3f} ({time.time()-t0:.0f}s)",flush=True)
