from subsample_mcmc.racing.bounds import NormalBound
from subsample_mcmc.testing import make_problem, run_setting
pr = make_problem(11, 2, 10_000, "lognormal", 0.1)
for lab,m in (("old","normal"),("gate_z2",NormalBound(tail_index_guard=True)),("nogate",NormalBound(tail_index_guard=True,tail_gate_z=None))):
    out = run_setting(pr, method=m, delta=0.1, num_races=400, batch_size=1)
    print(lab, out["errors"], "/400 read", round(out["fraction_read"],4), flush=True)
