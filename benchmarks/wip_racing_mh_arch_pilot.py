import functools, jax, numpy as np, arviz as az, time, sys
from numpyro.infer import MCMC
from subsample_mcmc import RacingMH
from subsample_mcmc.models import arch
series=arch.load_returns("sp500"); y=np.asarray(arch.prepare(series.returns,(5,10,15,20,25,30)).y)
q=int(sys.argv[1]); n=int(sys.argv[2])
m=functools.partial(arch.arch_numpyro_model, order=q)
t=time.time(); k=RacingMH(m, **({"proposal": sys.argv[3]} if len(sys.argv)>3 else {})); mc=MCMC(k, num_warmup=n, num_samples=n, progress_bar=False)
mc.run(jax.random.PRNGKey(0), y, extra_fields=("accept_prob","race_stage"))
s=mc.get_samples(); ef=mc.get_extra_fields()
ess=az.ess(az.from_dict(posterior={"alpha": s["alpha"][None], "nu": s["nu"][None], "alpha0": s["alpha0"][None]}))
print(q, n, "s", round(time.time()-t,1), "acc", float(np.mean(ef["accept_prob"])), "min ess", float(min(ess[v].min() for v in ess)), "proposal cn", bool(mc.last_state.crank_nicolson), "k_hat", float(mc.last_state.laplace_k_hat))
