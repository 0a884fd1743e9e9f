import time, functools, jax, numpy as np, sys
from numpyro.infer import MCMC
from subsample_mcmc import ModelSelection, model_posterior
from subsample_mcmc.models import arch
orders=(5,10,15,20,25,30)
series=arch.load_returns(sys.argv[1] if len(sys.argv)>1 else "sp500")
data=arch.prepare(series.returns, orders)
y=np.asarray(data.y)
print("N", y.shape)
models={f"arch{q}": functools.partial(arch.arch_numpyro_model, order=q) for q in orders}
methods = sys.argv[2].split(",") if len(sys.argv)>2 else ["normal"]
nw, ns = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv)>4 else (1000, 2000)
for method in methods:
    t=time.time()
    kern=ModelSelection(models, method=method, pseudoprior=sys.argv[5] if len(sys.argv)>5 else "auto")
    mcmc=MCMC(kern, num_warmup=nw, num_samples=ns, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), y, extra_fields=("num_likelihood_evals","race_stage","accept_prob","mh_race_stage"))
    ef=mcmc.get_extra_fields()
    print(method, round(time.time()-t,1), model_posterior(mcmc), "evals/step", np.mean(ef["num_likelihood_evals"]), "stages", np.bincount(ef["race_stage"]), "mh stages", np.bincount(ef["mh_race_stage"]), "acc", np.mean(ef["accept_prob"]), flush=True)
    print("a", mcmc.last_state.log_prior_adjustment, "exact draw", mcmc.last_state.exact_model_draw)
    print("auto", kern.auto_choice)
    m = np.asarray(mcmc.get_samples()["model"]); print("switches", np.sum(m[1:]!=m[:-1]))
    fits = kern.pseudoprior_fit(mcmc.last_state, y, num_draws=1000)
    print({k: (round(v.k_hat,2), round(v.log_weight_sd,2)) for k, v in fits.items()})
