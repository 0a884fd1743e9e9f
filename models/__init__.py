"""Reference models built on subsample_mcmc (e.g. Bayesian ARCH order selection)."""
