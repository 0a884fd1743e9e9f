r"""``RacingMH``: a NumPyro ``MCMCKernel`` whose MH test is a two-arm race (Eq. 12).

Each step proposes ``x'`` (Gaussian random walk, or a mini-batch Langevin/SGLD move
with its exact forward and reverse densities) in the unconstrained space, then decides
the Metropolis-Hastings test by racing the per-datum log-likelihoods of ``x`` and
``x'`` (Racing-Normal by default; Racing-EBS or adapted lil'UCB as options), reading
the data plate without replacement and stopping as soon as the bound separates the
two arms (Sec. 4 of Chen & Ghahramani 2016).  The decision errs with probability at
most ``delta``.

Warmup (``num_warmup`` steps of ``numpyro.infer.MCMC``):

* the start is a MAP estimate found by Adam on mini-batches (``init_strategy="map"``,
  cost independent of N) unless ``init_params`` are given;
* the step size follows dual averaging (Hoffman & Gelman 2014, NumPyro's
  ``dual_averaging``) toward ``target_accept_prob``, driven by the accept indicator;
* a diagonal inverse mass matrix is initialised from the curvature at the start (the
  proxy's full-data Hessian, or a mini-batch one) and re-estimated from the warmup
  samples between 15% and 50% of warmup (Welford, regularised as in Stan); the step
  size is then re-adapted over the second half.

The kernel state carries ``num_likelihood_evals`` (per-datum log-likelihood
evaluations in that step, race and gradient together), ``accept_prob`` (the accept
indicator), ``mean_accept_prob`` and ``race_stage``; ask for them with
``mcmc.run(..., extra_fields=("num_likelihood_evals", "accept_prob", "race_stage"))``
and ``az.from_numpyro`` puts them in ``sample_stats``.
"""

from __future__ import annotations

import copy
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree
from numpyro.infer.hmc_util import dual_averaging, welford_covariance
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import is_prng_key

from ..kernels.mh import racing_mh_step
from ..kernels.proxy import TaylorProxy, taylor_proxy
from ..racing import METHODS
from .control import DataSpaceControlVariate
from .model import ModelSubsampler

__all__ = ["RacingMH", "RacingMHState"]


class RacingMHState(NamedTuple):
    i: jax.Array
    z: dict
    step_size: jax.Array
    inverse_mass_matrix: jax.Array
    accept_prob: jax.Array
    mean_accept_prob: jax.Array
    num_likelihood_evals: jax.Array
    race_stage: jax.Array
    da_state: tuple
    welford_state: tuple
    proxy: Optional[TaylorProxy]
    rng_key: jax.Array


_DA_INIT, _DA_UPDATE = dual_averaging()
_WF_INIT, _WF_UPDATE, _WF_FINAL = welford_covariance(diagonal=True)


class RacingMH(MCMCKernel):
    r"""Racing Metropolis-Hastings for the continuous latent sites of a NumPyro model.

    Args:
        model: a NumPyro model with one data plate (see
            :class:`~subsample_mcmc.numpyro.model.ModelSubsampler` for the contract).
        proposal: ``"random_walk"`` or ``"langevin"`` (SGLD drift from a mini-batch
            gradient, corrected by the racing MH test).
        step_size: initial step size (adapted during warmup when ``adapt_step_size``).
        target_accept_prob: target of the step-size adaptation (default 0.234 for the
            random walk, 0.574 for Langevin -- the optimal-scaling values).
        adapt_step_size, adapt_mass_matrix: warmup adaptation switches.
        method, delta, first_batch, variance: the race (see
            :func:`~subsample_mcmc.racing.best_arm`).
        grad_batch_size: mini-batch size of the Langevin gradient and of the MAP search.
        data_plate: name of the data plate when the model has several candidates.
        init_strategy: ``"map"`` (mini-batch Adam, default) or ``"prior"`` (a draw from
            the prior, unconstrained); ignored when ``init_params`` are given to ``run``.
        map_steps: Adam steps of the MAP search.
        reward_range: passed to the race (needed by ``"ebs"`` and ``"lil_ucb"``).
        control_variate: ``"taylor"`` (default): a second-order parameter-space Taylor
            proxy around the MAP (:mod:`subsample_mcmc.kernels.proxy`, as NumPyro's
            ``HMCECS.taylor_proxy``); its full-data sums cost one pass over the data at
            ``init`` (and at every ``refresh``).  A
            :class:`~subsample_mcmc.numpyro.DataSpaceControlVariate`: the paper's data-space
            expansion (Eq. 11).  ``None``: race the raw log-likelihoods (then prefer a
            small ``delta``, e.g. 0.01: near-threshold MH decisions err at rate up to
            ``delta`` and a random walk makes many of them).
        newton_steps: full-data Newton steps polishing the MAP before the proxy is built.

    Example:
        >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
        >>> from numpyro.infer import MCMC
        >>> def model(y):
        ...     mu = numpyro.sample("mu", dist.Normal(0, 10))
        ...     with numpyro.plate("data", y.shape[0]):
        ...         numpyro.sample("y", dist.Normal(mu, 1), obs=y)
        >>> y = jax.random.normal(jax.random.PRNGKey(0), (10_000,)) + 1.0
        >>> mcmc = MCMC(RacingMH(model), num_warmup=300, num_samples=300, progress_bar=False)
        >>> mcmc.run(jax.random.PRNGKey(1), y, extra_fields=("num_likelihood_evals",))
        >>> abs(float(mcmc.get_samples()["mu"].mean()) - 1.0) < 0.1
        True
    """

    sample_field = "z"

    def __init__(
        self,
        model,
        *,
        proposal: str = "random_walk",
        step_size: Optional[float] = None,
        target_accept_prob: Optional[float] = None,
        adapt_step_size: bool = True,
        adapt_mass_matrix: bool = True,
        method: str = "normal",
        delta: float = 0.05,
        first_batch: int = 50,
        variance: str = "pairwise",
        grad_batch_size: int = 256,
        data_plate: Optional[str] = None,
        init_strategy: str = "map",
        map_steps: int = 500,
        reward_range=None,
        control_variate: Optional[str] = "taylor",
        newton_steps: int = 2,
    ):
        if proposal not in ("random_walk", "langevin"):
            raise ValueError(f"proposal must be 'random_walk' or 'langevin', got {proposal!r}")
        if method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {method!r}")
        if not (0.0 < float(delta) < 0.5):
            raise ValueError(f"delta must lie in (0, 0.5), got {delta}")
        if control_variate not in (None, "taylor") and not isinstance(control_variate, DataSpaceControlVariate):
            raise ValueError(
                f"control_variate must be None, 'taylor' or a DataSpaceControlVariate, got {control_variate!r}"
            )
        if init_strategy not in ("map", "prior"):
            raise ValueError(f"init_strategy must be 'map' or 'prior', got {init_strategy!r}")
        if step_size is not None and not step_size > 0:
            raise ValueError(f"step_size must be > 0, got {step_size}")
        if target_accept_prob is not None and not (0.0 < target_accept_prob < 1.0):
            raise ValueError(f"target_accept_prob must lie in (0, 1), got {target_accept_prob}")
        self.model = model
        self.proposal = proposal
        self._step_size = step_size
        self.target_accept_prob = (
            target_accept_prob if target_accept_prob is not None
            else (0.234 if proposal == "random_walk" else 0.574)
        )
        self.adapt_step_size = adapt_step_size
        self.adapt_mass_matrix = adapt_mass_matrix
        self.race_options = dict(method=method, delta=float(delta), first_batch=int(first_batch),
                                 variance=variance)
        if reward_range is not None:
            self.race_options["reward_range"] = reward_range
        self.grad_batch_size = int(grad_batch_size)
        self.data_plate = data_plate
        self.init_strategy = init_strategy
        self.map_steps = int(map_steps)
        self.control_variate = control_variate
        self.newton_steps = int(newton_steps)
        self._subsampler: Optional[ModelSubsampler] = None
        self._num_warmup = 0
        self._unravel = None

    # -- model plumbing ---------------------------------------------------------------
    def _setup(self, model_args, model_kwargs):
        if self._subsampler is None:
            ms = ModelSubsampler(self.model, model_args, model_kwargs, self.data_plate)
            if ms.discrete_sites:
                raise ValueError(
                    f"RacingMH updates continuous sites only; the model has discrete latent sites "
                    f"{list(ms.discrete_sites)}: use RacingGibbs(inner_kernel=RacingMH(...))"
                )
            if not ms.continuous_sites:
                raise ValueError("the model has no continuous latent site for RacingMH to update")
            if ms.size < self.race_options["first_batch"]:
                raise ValueError(
                    f"the data plate {ms.plate!r} has N={ms.size} points, fewer than "
                    f"first_batch={self.race_options['first_batch']}; lower first_batch"
                )
            if isinstance(self.control_variate, DataSpaceControlVariate):
                self.control_variate.validate(ms, model_args, model_kwargs)
            self._subsampler = ms
        return self._subsampler

    def _log_prior_fn(self, model_args, model_kwargs):
        ms = self._subsampler

        def fn(flat):
            z = self._unravel(flat)
            return ms.log_prior(ms.constrain(z), model_args, model_kwargs) + ms.log_abs_det_jacobian(z)

        return fn

    def _log_lik_fn(self, model_args, model_kwargs):
        ms = self._subsampler

        def fn(flat, idx):
            return ms.log_likelihood(ms.constrain(self._unravel(flat)), idx, model_args, model_kwargs)

        return fn

    def _data_cv_fn(self):
        if not isinstance(self.control_variate, DataSpaceControlVariate):
            return None
        ms, cv = self._subsampler, self.control_variate

        def fn(x, x_new):
            arms = jax.tree.map(lambda a, b: jnp.stack([a, b]),
                                ms.constrain(self._unravel(x)), ms.constrain(self._unravel(x_new)))
            return cv.for_arms(arms)

        return fn

    def _minibatch_objective(self, model_args, model_kwargs):
        lp, ll = self._log_prior_fn(model_args, model_kwargs), self._log_lik_fn(model_args, model_kwargs)
        n, b = self._subsampler.size, min(self.grad_batch_size, self._subsampler.size)

        def objective(flat, key):
            idx = jax.random.randint(key, (b,), 0, n)  # O(b), not O(N)
            return lp(flat) + (n / b) * jnp.sum(ll(flat, idx))

        return objective

    # -- MCMCKernel API -------------------------------------------------------------------
    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else model_kwargs
        ms = self._setup(model_args, model_kwargs)
        self._num_warmup = int(num_warmup)
        self._vectorized = not is_prng_key(rng_key)
        if not self._vectorized:
            state = self._init_one(rng_key, init_params, model_args, model_kwargs)
            self._check_initial_point(ravel_pytree(state.z)[0], model_args, model_kwargs)
            return state
        # chain_method="vectorized": one state per key, the step is vmapped in `sample`
        init_axis = None if init_params is None else 0
        states = jax.vmap(lambda k, p: self._init_one(k, p, model_args, model_kwargs),
                          in_axes=(0, init_axis))(rng_key, init_params)
        for c in range(rng_key.shape[0]):
            self._check_initial_point(ravel_pytree(jax.tree.map(lambda v: v[c], states.z))[0],
                                      model_args, model_kwargs)
        return states

    def _init_one(self, rng_key, init_params, model_args, model_kwargs):
        ms = self._subsampler
        key_init, key_map, key_state = jax.random.split(rng_key, 3)
        if init_params is None:
            proto = ms.prototype_trace
            prior = {k: proto[k]["value"] for k in ms.continuous_sites}
            unc = ms.unconstrain(prior)
            keys = jax.random.split(key_init, len(unc))
            z = {k: jax.random.uniform(kk, jnp.shape(v), minval=-2.0, maxval=2.0)
                 for (k, v), kk in zip(unc.items(), keys)}
        else:
            z = {k: jnp.asarray(init_params[k]) for k in ms.continuous_sites}
        flat, unravel = ravel_pytree(z)
        self._unravel = unravel
        objective = self._minibatch_objective(model_args, model_kwargs)
        if init_params is None and self.init_strategy == "map":
            flat = _adam_map(objective, flat, key_map, self.map_steps)
        proxy = None
        lp = self._log_prior_fn(model_args, model_kwargs)
        if self.control_variate == "taylor":
            ll = self._log_lik_fn(model_args, model_kwargs)
            build = jax.jit(lambda x: taylor_proxy(ll, x, ms.size))

            @jax.jit
            def newton(x):
                prx = taylor_proxy(ll, x, ms.size)
                grad = prx.grad_sum + jax.grad(lp)(x)
                hess = prx.hess_sum + jax.hessian(lp)(x)
                step_newton = jnp.linalg.solve(hess, grad)
                ok = jnp.all(jnp.isfinite(step_newton)) & jnp.all(jnp.linalg.eigvalsh(hess) < 0)
                return jnp.where(ok, x - step_newton, x)

            for _ in range(self.newton_steps if init_params is None else 0):
                flat = newton(flat)
            proxy = build(flat)
            curvature = jnp.diagonal(proxy.hess_sum + jax.jit(jax.hessian(lp))(flat))
        else:
            # diagonal of the mini-batch Hessian, scaled to N
            curvature = jnp.diagonal(jax.jit(jax.hessian(objective))(flat, key_map))
        inv_mass = jnp.where(curvature < 0, 1.0 / jnp.maximum(-curvature, 1e-10), 1.0)
        inv_mass = jnp.clip(inv_mass, 1e-12, 1e6)
        d = flat.shape[0]
        step = self._step_size or (2.38 / np.sqrt(d) if self.proposal == "random_walk" else 1.0 * d ** (-1 / 6))
        step = jnp.asarray(step, flat.dtype)
        return RacingMHState(
            i=jnp.array(0),
            z=unravel(flat),
            step_size=step,
            inverse_mass_matrix=inv_mass.astype(flat.dtype),
            accept_prob=jnp.zeros(()),
            mean_accept_prob=jnp.zeros(()),
            num_likelihood_evals=jnp.array(0, jnp.int32),
            race_stage=jnp.array(0, jnp.int32),
            da_state=_DA_INIT(jnp.log(step)),
            welford_state=_WF_INIT(d),
            proxy=proxy,
            rng_key=key_state,
        )

    def _check_initial_point(self, flat, model_args, model_kwargs):
        if isinstance(flat, jax.core.Tracer):
            return  # vectorised chains: checked at run time by the race (nonfinite flag)
        ms = self._subsampler
        values = ms.constrain(self._unravel(flat))
        lp = jax.jit(self._log_prior_fn(model_args, model_kwargs))(flat)
        if not np.isfinite(float(lp)):
            raise ValueError(f"the log prior (sites {list(ms.latent_sites)}) is not finite at the initial point")
        n = ms.size
        chunk = min(1 << 16, n)

        @jax.jit
        def per_site(idx):
            tr = ms._trace(values, idx, model_args, model_kwargs)
            return [ms._per_datum(tr[name], idx.shape[0]) for name in ms.data_sites]

        for start in range(0, n, chunk):
            idx = jnp.minimum(jnp.arange(start, start + chunk), n - 1)
            for name, per in zip(ms.data_sites, per_site(idx)):
                bad = ~np.isfinite(np.asarray(per))
                if bad.any():
                    raise ValueError(
                        f"the log-likelihood of observed site {name!r} is not finite at the initial "
                        f"point (first at data index {int(idx[int(np.argmax(bad))])}); check the data "
                        "or pass init_params"
                    )

    def sample(self, state, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else model_kwargs
        self._setup(model_args, model_kwargs)
        if getattr(self, "_vectorized", False):
            return jax.vmap(self._sample_one, in_axes=(0, None, None))(state, model_args, model_kwargs)
        return self._sample_one(state, model_args, model_kwargs)

    def _sample_one(self, state, model_args, model_kwargs):
        ms = self._subsampler
        if self._unravel is None:
            self._unravel = ravel_pytree(state.z)[1]
        flat, _ = ravel_pytree(state.z)
        key, key_step = jax.random.split(state.rng_key)
        new_flat, info = racing_mh_step(
            key_step, flat,
            log_prior_fn=self._log_prior_fn(model_args, model_kwargs),
            log_likelihood_fn=self._log_lik_fn(model_args, model_kwargs),
            population_size=ms.size, step_size=state.step_size, proposal=self.proposal,
            inverse_mass_diag=state.inverse_mass_matrix, grad_batch_size=min(self.grad_batch_size, ms.size),
            proxy=state.proxy, control_variate_fn=self._data_cv_fn(), **self.race_options,
        )
        accept = info.accepted.astype(flat.dtype)
        i = state.i + 1
        n = i.astype(flat.dtype)
        mean_accept = state.mean_accept_prob + (accept - state.mean_accept_prob) / n
        step, inv_mass, da, wf = state.step_size, state.inverse_mass_matrix, state.da_state, state.welford_state
        nw = self._num_warmup
        if nw > 0 and (self.adapt_step_size or self.adapt_mass_matrix):
            step, inv_mass, da, wf = self._adapt(state, new_flat, accept)
        return RacingMHState(
            i=i, z=self._unravel(new_flat), step_size=step, inverse_mass_matrix=inv_mass,
            accept_prob=accept, mean_accept_prob=mean_accept,
            num_likelihood_evals=info.num_likelihood_evals.astype(jnp.int32),
            race_stage=info.race_stage.astype(jnp.int32), da_state=da, welford_state=wf,
            proxy=state.proxy, rng_key=key,
        )

    def _adapt(self, state, new_flat, accept):
        nw = self._num_warmup
        t = state.i  # index of this step
        in_warmup = t < nw
        step, inv_mass, da, wf = state.step_size, state.inverse_mass_matrix, state.da_state, state.welford_state
        if self.adapt_step_size:
            da_new = _DA_UPDATE(self.target_accept_prob - accept, da)
            da = jax.tree.map(lambda a, b: jnp.where(in_warmup, a, b), da_new, da)
            step = jnp.where(in_warmup, jnp.exp(da[0]), step)
            step = jnp.where(t == nw - 1, jnp.exp(da[1]), step)  # final: the averaged iterate
        if self.adapt_mass_matrix:
            start, end = (3 * nw) // 20, nw // 2
            collect = (t >= start) & (t < end)
            wf_new = _WF_UPDATE(new_flat, wf)
            wf = jax.tree.map(lambda a, b: jnp.where(collect, a, b), wf_new, wf)
            finish = t == end - 1
            if end - start >= 10:
                cov, _, _ = _WF_FINAL(wf, regularize=True)
                inv_mass = jnp.where(finish, cov, inv_mass)
                step = jnp.where(finish, step, step)
                da = jax.tree.map(lambda a, b: jnp.where(finish, a, b), _DA_INIT(jnp.log(step)), da)
        return step, inv_mass, da, wf

    def postprocess_fn(self, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else model_kwargs
        ms = self._setup(model_args, model_kwargs)

        def fn(z):
            values = ms.constrain(z)
            return {**values, **ms.deterministic(values, model_args, model_kwargs)}

        return fn

    def refresh(self, state, model_args, model_kwargs):
        """Recompute the proxy's full-data sums for new conditioning values (one pass
        over the data); without a proxy nothing cached depends on the arguments."""
        if state.proxy is None:
            return state
        model_kwargs = {} if model_kwargs is None else model_kwargs
        self._setup(model_args, model_kwargs)
        ll = self._log_lik_fn(model_args, model_kwargs)

        def one(st):
            return st._replace(proxy=taylor_proxy(ll, st.proxy.reference, self._subsampler.size))

        return jax.vmap(one)(state) if getattr(self, "_vectorized", False) else one(state)

    def wrap_model(self, wrapper):
        new = copy.copy(self)
        new.model = wrapper(self.model)
        new._subsampler = None
        new._unravel = None
        return new

    def get_diagnostics_str(self, state):
        return "step {:.2e}, acc. {:.2f}, evals/step {}".format(
            float(jnp.mean(state.step_size)), float(jnp.mean(state.mean_accept_prob)),
            int(jnp.mean(state.num_likelihood_evals)),
        )

    @property
    def default_fields(self):
        return ("z",)


def _adam_map(objective, flat, key, steps):
    """MAP by Adam on mini-batch log-posteriors (cost O(steps x batch), not O(N)): a
    constant rate, then a decaying one to damp the mini-batch noise."""
    scale = 0.05
    schedules = (optax.adam(scale), optax.adam(optax.exponential_decay(scale / 5, steps, 0.01)))
    for phase, opt in enumerate(schedules):

        def body(carry, k, opt=opt):
            x, s = carry
            g = jax.grad(lambda z: -objective(z, k))(x)
            g = jnp.where(jnp.isfinite(g), g, 0.0)
            upd, s = opt.update(g, s, x)
            return (optax.apply_updates(x, upd), s), None

        keys = jax.random.split(jax.random.fold_in(key, phase), steps)
        (flat, _), _ = jax.jit(lambda c, ks, body=body: jax.lax.scan(body, c, ks))((flat, opt.init(flat)), keys)
    return flat
