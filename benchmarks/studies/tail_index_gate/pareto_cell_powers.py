import jax.numpy as jnp
from subsample_mcmc.racing.bounds import NormalBound
from subsample_mcmc.testing import make_infinite_problem, run_setting
pr=make_infinite_problem("pareto_1.1",2,20000,seed=0,sigma=3e-4); pr=pr._replace(rewards=jnp.asarray(pr.rewards))
for delta in (0.001,):
    out=[]
    for lab,m in (("old",NormalBound(tail_index_guard=False)),("p0",NormalBound(tail_level_power=0.)),("p0.25",NormalBound(tail_level_power=0.25)),("p0.5",NormalBound(tail_level_power=0.5)),("p1",NormalBound(tail_level_power=1.))):
        r=run_setting(pr,method=m,delta=delta,num_races=200,seed=1,batch_size=None)
        out.append(f"{lab} {r['errors']}/200 read {r['fraction_read']:.3f}")
    print(delta," | ".join(out),flush=True)
