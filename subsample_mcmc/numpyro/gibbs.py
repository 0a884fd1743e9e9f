r"""``RacingGibbs``: Gibbs updates of discrete sites by racing Gumbel-max draws.

Each discrete latent site with finite support ``{v_1 .. v_D}`` (``enumerate_support``)
is drawn from its full conditional

    p(X = v_i | rest) ∝ p(v_i, rest without data) prod_n p(y_n | v_i, rest),

a best-arm problem over D arms with the per-datum log-likelihoods as rewards
(Eq. 1-3 of Chen & Ghahramani 2016).  The race reads the data plate without
replacement and stops when the bound separates the arms, so the draw is within
total variation ``delta`` of the exact Gibbs draw (Prop. 1).  Continuous sites go
to ``inner_kernel`` (any NumPyro kernel implementing ``refresh``: ``NUTS``, ``HMC``,
:class:`~subsample_mcmc.numpyro.RacingMH`, ...) run on the model conditioned on the
discrete values, in the spirit of NumPyro's ``DiscreteHMCGibbs``.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer.gibbs import conditioned, with_conditioning
from numpyro.infer.mcmc import MCMCKernel
from numpyro.util import is_prng_key

from ..kernels.laplace import fit_laplace
from ..kernels.product_space import Pseudoprior, model_log_f0, shared_space_arms
from ..racing import sample_discrete, sample_discrete_exact
from ..racing.race import _run_at_most_once, first_batch_spread
from ..racing.discrete import check_tie_share
from .control import DataSpaceControlVariate
from .mh import _SPREAD_MIN_NATS, _SPREAD_RATIO_MAX, RacingMH
from .model import (InitOnceKernel, ModelSubsampler, check_delta, check_init_params, check_method, check_model,
                    check_race_options, full_data_model, jit_with_data, outside_traces)

__all__ = ["RacingGibbs", "RacingGibbsState"]


class RacingGibbsState(NamedTuple):
    z: dict
    inner_state: Any
    num_likelihood_evals: jax.Array
    race_stage: jax.Array
    rng_key: jax.Array
    proxy_cache: Any = None  # an inner RacingMH's Taylor proxies, one per discrete configuration
    proxy_cached: Any = None  # bool [configurations]: which entries of proxy_cache are built
    #: draws every discrete value exactly (from all the data), decided at init: a few data carry most of
    #: the spread of some arm's log-likelihood differences (see RacingGibbs, "Rare influential data")
    exact_mode: Any = False
    #: at init, the largest se_all / se_typical of first_batch_spread over the arms against the leader
    spread_ratio: Any = jnp.nan
    #: at init, with an inner RacingMH: the largest factor by which the discrete values change the
    #: continuous conditional's curvature: among the plausible configurations' Laplace fits where
    #: RacingGibbs fits them (up to 64 configurations), else against the proposal's mass matrix with one
    #: site's value changed at the start (NaN when not measured)
    inner_scale_ratio: Any = jnp.nan
    #: the Laplace approximation of the continuous sites' conditional posterior (flat, unconstrained) in
    #: each joint discrete configuration, stacked (a Pseudoprior over configurations), or None: what
    #: the joint moves draw the continuous sites from (:meth:`RacingGibbs._joint_laplace`)
    joint_laplace: Any = None
    #: whether this chain makes joint moves (decided at init: another configuration's conditional mode
    #: lies more than ``_COUPLED_SDS`` posterior sds from the best one's)
    joint_moves: Any = False
    #: at init, the largest distance in posterior sds between a configuration's conditional mode and the
    #: best configuration's (NaN when not measured)
    coupling_sds: Any = jnp.nan
    #: at init, the heavy-tail guard's minimum sample (:func:`~subsample_mcmc.racing.race.guard_minimum_sample`)
    #: at the population skewness and kurtosis of the joint move's per-datum differences, the largest over
    #: the configurations at their Laplace modes against the best one's (NaN when not measured)
    joint_guard_sample: Any = jnp.nan
    #: at init, the heavy-tail guard's minimum sample at the population skewness and kurtosis of the per-datum
    #: log-likelihood differences of each discrete site's values against the most probable one, at the start
    #: (the largest; NaN when not measured): the first batch of a conditional draw's race
    guard_sample: Any = jnp.nan

    @property
    def accept_prob(self) -> jax.Array:
        """The inner kernel's acceptance probability of its last move, so that
        ``extra_fields=("accept_prob",)`` works as with NumPyro's kernels (and ArviZ shows
        ``acceptance_rate``); NaN without an inner kernel or one that reports none."""
        nan = jnp.full(jnp.shape(self.num_likelihood_evals), jnp.nan, jnp.float32)
        inner = getattr(self.inner_state, "accept_prob", None)
        if inner is None:  # NumPyro's HMCGibbs-style states keep it one level down
            inner = getattr(getattr(self.inner_state, "hmc_state", None), "accept_prob", None)
        return nan if inner is None else jnp.asarray(inner)

# an inner RacingMH's Taylor proxy is cached per joint discrete configuration up to this many
_MAX_CACHED_CONFIGURATIONS = 256
# an inner RacingMH warns when another discrete value changes the continuous conditional's curvature more
# than this many times against its proposal's (a factor 2 in sd)
_INNER_SCALE_MAX = 4.0
# joint moves of the discrete and continuous sites are prepared for up to this many joint discrete
# configurations (one full-data Laplace fit each at init)
_MAX_JOINT_CONFIGURATIONS = 64
# and made when a configuration's conditional mode lies more than this many posterior sds (of the best
# configuration's conditional, coordinate-wise) from the best configuration's mode
_COUPLED_SDS = 2.0
# configurations whose Laplace log evidence lies within this many nats of the best one's are plausible
# (posterior weight above e^-10 of the best's): their curvatures are the ones an inner kernel must serve
_PLAUSIBLE_NATS = 10.0


class RacingGibbs(InitOnceKernel):
    """Racing Gibbs for the discrete sites, ``inner_kernel`` for the continuous ones.

    Args:
        model: a NumPyro model with one data plate (see
            :class:`~subsample_mcmc.numpyro.model.ModelSubsampler`).
        inner_kernel: kernel for the continuous latent sites (required if any).
        method, delta, first_batch, variance: the race
            (:func:`~subsample_mcmc.racing.best_arm`); ``method="exact"`` is the exact
            Gibbs sampler with the same random numbers.  A site's update differs from the exact
            one with probability at most ``delta`` (over the Gumbel noise and the reading order;
            with joint moves the update is two races, each at ``delta / 2``).
        tie_share: the share of ``delta`` given to near-ties of the Gumbel-perturbed values
            (default 0.5): the race runs at ``(1 - tie_share) delta`` and stops once its widths
            are below ``log(1 + tie_share delta)`` nats
            (:func:`~subsample_mcmc.racing.sample_discrete`), so a near-tie does not read all
            ``N``; 0: each race right for every noise draw.
        data_plate: name of the data plate when there are several candidates.
        control_variate: a :class:`~subsample_mcmc.numpyro.DataSpaceControlVariate`
            (the paper's Eq. 11 with binned reference points and exactly-read outliers).

    The state's ``num_likelihood_evals`` adds the races' reward evaluations (all arms
    at every computed point), the inner kernel's refresh when a discrete value changed
    (its ``refresh_likelihood_evals``) and, when the inner kernel reports it, the inner
    kernel's own step.

    With ``inner_kernel=RacingMH(...)`` and its Taylor proxy, the proxy's full-data sums
    depend on the discrete values: they are computed once per joint discrete
    configuration (a full-data pass the first time a configuration is visited) and
    kept in the state (up to 256 configurations; beyond, recomputed at every change),
    so a chain that moves among visited configurations costs O(points read) per step.

    **Coupled discrete and continuous sites.**  Where a discrete value moves the continuous
    sites' conditional posterior by many posterior sds (a degrees-of-freedom grid beside a
    scale, a change point beside its segments' levels), a one-site-at-a-time chain cannot
    leave the configuration it started in: at the continuous values that fit it, every other
    value is worse.  At init RacingGibbs fits the Laplace approximation
    ``g_c = N(m_c, S_c)`` of the continuous sites' conditional (unconstrained, full data,
    safeguarded Newton) in each joint discrete configuration ``c`` (up to 64); when some
    ``m_c`` lies more than 2 posterior sds from the best configuration's, each step adds, for
    each discrete site after its conditional draw, a joint move: ``theta_v ~ g_v`` for every
    other value ``v`` of the site, the current ``theta`` for the current value, and the value
    drawn from ``p(v | theta_.., y) ∝ p(v, theta_v | y) / g_v(theta_v)`` by the same race
    (the product-space step of :func:`~subsample_mcmc.kernels.product_space.shared_space_arms`,
    Carlin & Chib 1995), so that the discrete value and the continuous sites move together
    within total variation ``delta / 2`` of the exact move (the conditional draw takes the other
    half).  The move's race reads first at least the heavy-tail guard's minimum sample
    ``28 + 25 max(g1^2, k - 3)`` (Sugden et al. 2000) at the population skewness ``g1`` and
    kurtosis ``k`` of the per-datum differences between configurations at their modes, which
    init measures on all the data (:meth:`_joint_guard_sample`): the few data that separate two
    configurations are not missed by a small first batch.  The state's ``joint_moves``,
    ``coupling_sds`` and ``joint_guard_sample`` say what init decided and measured.
    With more than 64 configurations no joint move is made; init then measures the coupling one
    site at a time and warns where it is above 2 sds.

    **Starts.**  Each chain starts its discrete sites at values drawn uniformly from their
    supports with the chain's key (those in ``init_params`` excepted), so that chains start
    in different configurations; after a run, :func:`~subsample_mcmc.numpyro.check_discrete_chains`
    reports a discrete site whose chains disagree (where R-hat is infinite or NaN).

    """

    sample_field = "z"

    def __init__(self, model, inner_kernel: Optional[MCMCKernel] = None, *, method: str = "normal",
                 delta: float = 0.05, first_batch: int = 50, variance: str = "pairwise",
                 data_plate: Optional[str] = None,
                 control_variate: Optional[DataSpaceControlVariate] = None, tie_share: float = 0.5):
        if control_variate is not None and not isinstance(control_variate, DataSpaceControlVariate):
            raise TypeError("control_variate must be a DataSpaceControlVariate or None")
        self.control_variate = control_variate
        check_method(method, "RacingGibbs")
        check_model(model)
        delta = check_delta(delta)
        if inner_kernel is not None and (isinstance(inner_kernel, type) or not isinstance(inner_kernel, MCMCKernel)):
            raise TypeError(f"inner_kernel must be a kernel instance built on the same model, e.g. "
                            f"inner_kernel=RacingMH(model) or NUTS(model), got {inner_kernel!r}")
        tie_share = check_tie_share(tie_share)
        self._model = model
        self.inner_kernel = None if inner_kernel is None else inner_kernel.wrap_model(conditioned)
        first_batch, variance = check_race_options(first_batch, variance)
        self.race_options = dict(method=method, delta=float(delta), first_batch=first_batch,
                                 variance=variance, tie_share=float(tie_share))
        self.data_plate = data_plate
        self._ms: Optional[ModelSubsampler] = None
        self._supports: dict = {}
        self._vectorized = False
        self._joint_split = False
        self._joint_first_batch = None

    @property
    def model(self):
        """The model with its subsample plates at full size
        (:class:`~subsample_mcmc.numpyro.model.FullDataModel`; the model itself when it
        has none): what ArviZ's ``from_numpyro`` and ``numpyro.infer.log_likelihood``
        replay.  It compares equal to the model passed to the constructor."""
        return full_data_model(self._model)

    @outside_traces
    def _setup(self, model_args, model_kwargs):
        if self._ms is not None:
            return self._ms
        ms = ModelSubsampler(conditioned(self._model), model_args, model_kwargs, self.data_plate)
        if not ms.discrete_sites:
            raise ValueError("the model has no discrete latent site for RacingGibbs to update")
        for name in ms.discrete_sites:
            fn = ms.prototype_trace[name]["fn"]
            if not fn.has_enumerate_support:
                raise ValueError(
                    f"discrete site {name!r} ({type(fn).__name__}) has no finite support to "
                    "enumerate; RacingGibbs needs finite-support sites (e.g. Categorical, Bernoulli)"
                )
            if fn.batch_shape or fn.event_shape:
                raise ValueError(
                    f"RacingGibbs updates scalar discrete sites; site {name!r} has shape "
                    f"{fn.batch_shape + fn.event_shape}: write it as one scalar site per entry, e.g. "
                    f"[numpyro.sample(f'{name}_{{i}}', ...) for i in range(...)] stacked with jnp.stack"
                )
            self._supports[name] = jnp.reshape(fn.enumerate_support(expand=False), (-1,))
        if ms.moving_supports_discrete and self.race_options["method"] != "exact":
            name, kind = next(iter(ms.moving_supports_discrete.items()))
            raise ValueError(
                f"observed site {name!r} has a support that moves with the discrete sites ({kind}: its bounds "
                f"change with {list(ms.discrete_sites)}, as y ~ Uniform(0, k + 1)): a value that puts one data "
                "point outside the support has probability 0, and a race that has not read that point cannot "
                "see it, so RacingGibbs would draw impossible values. Use method='exact' (reads all the data "
                "at each draw), or NumPyro's DiscreteHMCGibbs / MixedHMC, or reparameterise the likelihood so "
                "that its support does not depend on the discrete sites")
        if ms.continuous_sites and self.inner_kernel is None:
            raise ValueError(
                f"continuous latent sites {list(ms.continuous_sites)} need an inner_kernel "
                "(e.g. RacingGibbs(model, inner_kernel=RacingMH(model)) or NUTS(model))"
            )
        if ms.size < self.race_options["first_batch"]:
            raise ValueError(
                f"the data plate {ms.plate!r} has N={ms.size} points, fewer than "
                f"first_batch={self.race_options['first_batch']}; lower first_batch"
            )
        if self.control_variate is not None:
            self.control_variate.validate(ms, model_args, model_kwargs)
        self._ms = ms
        return ms

    def _inner_kwargs(self, model_kwargs, discrete):
        return with_conditioning(model_kwargs, discrete)

    def _continuous_values(self, inner_state, model_args, model_kwargs, discrete):
        if self.inner_kernel is None:
            return {}
        kw = self._inner_kwargs(model_kwargs, discrete)
        if isinstance(self.inner_kernel, RacingMH):
            # transforms only: its postprocess_fn may replay the model on all the data
            return self.inner_kernel._setup(model_args, kw).constrain(inner_state.z)
        values = self.inner_kernel.get_constrain_fn(model_args, kw)(inner_state.z)
        return {k: values[k] for k in self._ms.continuous_sites}

    # -- MCMCKernel API -------------------------------------------------------------------
    def _init_states(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        self._setup(model_args, model_kwargs)
        self._vectorized = not is_prng_key(rng_key)
        ms = self._ms
        shapes = {**{k: jnp.shape(ms.prototype_trace[k]["value"]) for k in ms.discrete_sites},
                  **{k: jnp.shape(v) for k, v in ms.unconstrained_prototype().items()}}
        # any site may be left out (the discrete ones start at the prototype's values, the inner
        # kernel checks the continuous ones it needs)
        check_init_params(init_params, shapes, jnp.shape(rng_key)[0] if self._vectorized else None,
                          optional=tuple(shapes), kernel="RacingGibbs")
        if self._vectorized:
            # one chain at a time, then stacked (as RacingMH's vectorized init): a vmapped init
            # traced the inner kernel's start checks away (no mode-search warnings) and its
            # vmapped mode search is the program that deadlocked XLA's CPU runtime
            states = [self._init_one(k, num_warmup, None if init_params is None else
                                     jax.tree.map(lambda v, c=c: v[c], init_params), model_args, model_kwargs)
                      for c, k in enumerate(rng_key)]
            state = jax.tree.map(lambda *v: jnp.stack(v), *states)
        else:
            state = self._init_one(rng_key, num_warmup, init_params, model_args, model_kwargs)
        # each site's conditional draw and its joint move share the site's delta (a step's draw of a site is
        # then within delta of the exact one's in total variation); where init was traced, assume joint moves
        jm = state.joint_moves
        self._joint_split = state.joint_laplace is not None and (
            isinstance(jm, jax.core.Tracer) or bool(np.any(np.asarray(jm))))
        # a joint move's race reads at least the guard's minimum sample at the population moments first
        # (at most N: then it reads every datum); where init was traced, every datum
        self._joint_first_batch = self._guarded_first_batch(state.joint_guard_sample, traced=self._ms.size)
        # a conditional draw's race likewise (where init was traced: the first batch as given)
        self._discrete_first_batch = self._guarded_first_batch(state.guard_sample, traced=None)
        self._warn_concentrated(state)
        return state

    def _guarded_first_batch(self, guard, traced):
        """A race's first batch from the guard's minimum sample measured at init (``guard``, per chain):
        ``max(first_batch, ceil(guard))`` capped at ``N``; ``first_batch`` where nothing was measured;
        ``traced`` where init was traced."""
        if isinstance(guard, jax.core.Tracer):
            return traced
        g = np.asarray(guard, np.float64)
        g = float(np.max(g[np.isfinite(g)])) if np.any(np.isfinite(g)) else 0.0
        return int(min(max(self.race_options["first_batch"], int(np.ceil(g))), self._ms.size))

    def _step_race_options(self) -> dict:
        """The race options of one draw in a step: ``delta`` halved where the chains make joint moves
        (two races per discrete site, each at ``delta / 2``)."""
        options = dict(self.race_options)
        if getattr(self, "_joint_split", False):
            options["delta"] = options["delta"] / 2
        return options

    def _warn_concentrated(self, state):
        """A warning naming the rare-influential-data check for chains it sent to exact draws, one
        where an inner RacingMH's proposal scale cannot follow the continuous conditional across the
        discrete values (:meth:`_inner_scale_ratio` above ``_INNER_SCALE_MAX``), and one where the discrete
        values move the continuous posterior but there are too many configurations for joint moves."""
        if isinstance(state.exact_mode, jax.core.Tracer):
            return
        scale = np.atleast_1d(np.asarray(state.inner_scale_ratio, np.float64))
        if np.any(scale > _INNER_SCALE_MAX):
            warnings.warn(
                "RacingGibbs: the inner RacingMH's proposal is scaled to the continuous sites' conditional at the "
                "start's discrete values, and keeps that scale; another discrete value changes that conditional's "
                f"curvature up to {float(np.nanmax(scale)):.0f}-fold (a spike-and-slab indicator: the slab's "
                "data-fitted sd against the spike's prior sd). There the walk stays where it was and the discrete "
                "site flips back more often than it should, which R-hat does not show (a trial: an inclusion "
                "probability 5 standard errors high at R-hat 1.00). Use inner_kernel=NUTS(model), which adapts "
                "its step to each configuration.", UserWarning, stacklevel=4)
        coupling = np.atleast_1d(np.asarray(state.coupling_sds, np.float64))
        if state.joint_laplace is None and np.any(coupling > _COUPLED_SDS):
            warnings.warn(
                f"RacingGibbs: a discrete site's values move the continuous sites' posterior mode by up to "
                f"{float(np.nanmax(coupling)):.0f} posterior sds (Laplace fits at the start, one site at a time), and "
                f"with {self._num_configurations()} joint discrete configurations (more than "
                f"{_MAX_JOINT_CONFIGURATIONS}) no joint moves of the discrete and continuous sites are made: a chain "
                "may stay in the configuration it started in even where another fits the data far better, with "
                "nothing in R-hat. Merge or drop discrete sites so that at most "
                f"{_MAX_JOINT_CONFIGURATIONS} configurations remain, run several chains (they start in different "
                "configurations) and check them with subsample_mcmc.numpyro.check_discrete_chains.",
                UserWarning, stacklevel=4)
        exact = np.atleast_1d(np.asarray(state.exact_mode))
        if np.any(exact):
            ratio = float(np.max(np.atleast_1d(np.asarray(state.spread_ratio))[exact]))
            guard = float(np.nanmax(np.atleast_1d(np.asarray(state.guard_sample, np.float64))[exact]))
            n = self._ms.size
            if ratio == np.inf or ratio > _SPREAD_RATIO_MAX:
                seen = ("some values give some data points probability 0" if ratio == np.inf else
                        f"a first batch of {self.race_options['first_batch']} typically sees 1/{ratio:.0f} of "
                        "their sd")
                why = (f"a few data carry most of the differences between the values' log-likelihoods ({seen}: rare "
                       "events, a probability of 0 or a few extreme rows), so a race would miss them and err beyond "
                       "delta without any sign in the draws. For a race, make the differences less concentrated (keep "
                       "probabilities away from 0) or pass a DataSpaceControlVariate whose exactly-read points cover "
                       "those data.")
            else:
                why = (f"the per-datum differences between the values' log-likelihoods, measured at the chain's start, "
                       f"are so skewed or heavy-tailed that a race would first read 28 + 25 max(skewness^2, "
                       f"kurtosis - 3) = {guard:,.0f} points, more than all N = {n:,}: the exact draw gives the same "
                       "values without a race's overhead. (At another start, nearer the posterior, the measure may "
                       "differ; with more data a race may pay.)")
            warnings.warn(
                f"RacingGibbs: {int(exact.sum())} of {exact.size} chains draw the discrete sites exactly (all N data "
                f"for every value at every step): {why}", UserWarning, stacklevel=4)

    def _init_one(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        ms = self._ms
        init_params = dict(init_params or {})
        # dispersed starts: each site's value drawn uniformly from its support by the chain's key (a key
        # of its own, so the chain's other random numbers stay those of its key)
        start_keys = jax.random.split(jax.random.fold_in(rng_key, 0x5747), len(ms.discrete_sites))
        discrete = {k: jnp.asarray(init_params.pop(k)) if k in init_params
                    else self._uniform_value(k, sk) for k, sk in zip(ms.discrete_sites, start_keys)}
        key_inner, key = jax.random.split(rng_key)
        inner_state = None
        if self.inner_kernel is not None:
            inner_state = self.inner_kernel.init(key_inner, num_warmup, init_params or None, model_args,
                                                 self._inner_kwargs(model_kwargs, discrete))
        z = {**discrete, **({} if inner_state is None else inner_state.z)}
        exact_mode, ratio, discrete_guard = self._concentration(inner_state, discrete, model_args, model_kwargs)
        cache, cached = None, None
        if self._caches_proxy(inner_state):
            size = self._num_configurations()
            c = self._configuration(discrete)
            cache = jax.tree.map(lambda p: jnp.zeros((size,) + p.shape, p.dtype).at[c].set(p), inner_state.proxy)
            cached = jnp.zeros((size,), bool).at[c].set(True)
        table, joint, coupling, spread, guard = self._joint_laplace(inner_state, discrete, model_args,
                                                                    model_kwargs)
        # with the configurations' Laplace fits, the curvatures of those the posterior holds (not of the
        # values met at a random start, a change point's first segment of a few points among them)
        scale = (spread if table is not None and isinstance(self.inner_kernel, RacingMH)
                 else self._inner_scale_ratio(inner_state, discrete, model_args, model_kwargs))
        return RacingGibbsState(z, inner_state, jnp.array(0, jnp.int32), jnp.array(0, jnp.int32), key,
                                cache, cached, exact_mode, ratio, scale, table, joint, coupling, guard,
                                discrete_guard)

    def _uniform_value(self, name, key):
        """A value of discrete site ``name`` drawn uniformly from its support, in the prototype's dtype."""
        support = self._supports[name]
        value = support[jax.random.randint(key, (), 0, support.shape[0])]
        return value.astype(jnp.asarray(self._ms.prototype_trace[name]["value"]).dtype)

    def _configurations(self) -> dict:
        """Every joint discrete configuration, row-major as :meth:`_configuration` numbers them:
        ``{site: [K] values}``."""
        grids = jnp.meshgrid(*[self._supports[k] for k in self._ms.discrete_sites], indexing="ij")
        return {k: g.reshape(-1).astype(jnp.asarray(self._ms.prototype_trace[k]["value"]).dtype)
                for k, g in zip(self._ms.discrete_sites, grids)}

    def _joint_prior(self, flat, unravel, discrete, model_args, model_kwargs):
        """``(log prior of (discrete, theta), constrained values)`` on the continuous sites' flat
        unconstrained ``theta``, the transforms' log-Jacobian included (the data terms apart)."""
        ms = self._ms
        u = unravel(flat)
        values = {**discrete, **ms.constrain(u)}
        return ms.log_prior(values, model_args, model_kwargs) + ms.log_abs_det_jacobian(u), values

    def _log_joint(self, flat, unravel, discrete, model_args, model_kwargs):
        """``log p(discrete, theta, y)`` on all the data (:meth:`_joint_prior` plus the data terms)."""
        prior, values = self._joint_prior(flat, unravel, discrete, model_args, model_kwargs)
        every = jnp.arange(self._ms.size)
        return prior + jnp.sum(self._ms.log_likelihood(values, every, model_args, model_kwargs))

    def _joint_laplace(self, inner_state, start, model_args, model_kwargs):
        """``(table, joint_moves, coupling_sds, curvature_spread)``: the Laplace approximation ``g_c = N(m_c, S_c)`` of
        ``p(theta | c, y)`` in each joint discrete configuration ``c`` (:func:`~subsample_mcmc.kernels.laplace.
        fit_laplace` from the start's continuous values, full data), stacked as a
        :class:`~subsample_mcmc.kernels.product_space.Pseudoprior`; whether the chain makes joint moves (some
        ``m_c`` more than ``_COUPLED_SDS`` posterior sds of the best configuration's conditional from its mode
        ``m_*``, coordinate-wise: ``max_i |m_c - m_*|_i / sd_*i``); that largest distance; and the largest
        ``max(lambda, 1 / lambda)`` over the eigenvalues of ``S_*^{-1} S_c`` of the plausible configurations
        (log evidence within ``_PLAUSIBLE_NATS`` of the best): how much their conditionals' curvatures
        differ, what an inner random walk's single scale must serve.  A configuration
        whose fit is not finite gets the best configuration's ``g`` (any proper ``g`` keeps the move exact;
        a poor one only lowers its acceptance).  None, False, NaN without continuous sites, with an inner
        kernel whose state's ``z`` is not the continuous sites' unconstrained values, or where no fit is
        finite.  With more than ``_MAX_JOINT_CONFIGURATIONS`` joint configurations no joint move is made:
        the coupling is then measured one site at a time (each site's values, the other sites at ``start``,
        while those fits number at most ``_MAX_JOINT_CONFIGURATIONS``) for :meth:`_warn_concentrated`'s
        warning, and the table is None."""
        nan = jnp.asarray(jnp.nan, jnp.float32)
        off = None, jnp.asarray(False), nan, nan, nan
        if (inner_state is None or not self._ms.continuous_sites
                or not isinstance(getattr(inner_state, "z", None), dict)
                or set(inner_state.z) != set(self._ms.continuous_sites)):
            return off
        flat, unravel = ravel_pytree(inner_state.z)
        if self._num_configurations() > _MAX_JOINT_CONFIGURATIONS:
            if sum(int(v.shape[0]) for v in self._supports.values()) > _MAX_JOINT_CONFIGURATIONS:
                return off
            start = {k: jnp.asarray(v) for k, v in start.items()}
            per_site = {k: [] for k in self._ms.discrete_sites}
            for name in self._ms.discrete_sites:
                for v in self._supports[name]:
                    for k in self._ms.discrete_sites:
                        per_site[k].append(jnp.asarray(v if k == name else start[k]).astype(start[k].dtype))
            configurations = {k: jnp.stack(v) for k, v in per_site.items()}
            _, _, coupling, ok, _ = self._fit_configurations(flat, unravel, configurations, model_args, model_kwargs)
            return None, jnp.asarray(False), jnp.where(jnp.any(ok), coupling, jnp.nan), nan, nan
        modes, trils, coupling, ok, evidence = self._fit_configurations(flat, unravel, self._configurations(),
                                                                         model_args, model_kwargs)
        joint = jnp.any(ok) & (coupling > _COUPLED_SDS)
        # how far the plausible configurations' conditional covariances differ from the best one's: the
        # eigenvalues of S_*^{-1} S_c are the squared singular values of L_*^{-1} L_c
        best = jnp.argmax(evidence)
        plausible = ok & (evidence > evidence[best] - _PLAUSIBLE_NATS)
        sv = jnp.linalg.svd(jax.scipy.linalg.solve_triangular(trils[best], trils, lower=True), compute_uv=False)
        lam = jnp.maximum(sv ** 2, jnp.finfo(sv.dtype).tiny)
        spread = jnp.max(jnp.where(plausible, jnp.max(jnp.maximum(lam, 1.0 / lam), -1), 1.0)).astype(jnp.float32)
        guard = self._joint_guard_sample(modes, ok, best, unravel, model_args, model_kwargs)
        return (Pseudoprior(modes, trils), joint, jnp.where(jnp.any(ok), coupling, jnp.nan),
                jnp.where(jnp.any(ok), spread, jnp.nan), jnp.where(jnp.any(ok), guard, jnp.nan))

    def _joint_guard_sample(self, modes, ok, best, unravel, model_args, model_kwargs):
        r"""The first sample a joint move's race needs: the heavy-tail guard's minimum sample
        ``28 + 25 max(g1^2, k - 3)`` (:func:`~subsample_mcmc.racing.race.guard_minimum_sample`) at the
        **population** skewness ``g1`` and kurtosis ``k`` of ``d_n = log p(y_n | m_c, c) - log p(y_n | m_*, *)``,
        each configuration ``c`` at its Laplace mode against the best one, the largest over ``c``.

        A joint move compares configurations at different continuous values, and what separates them is
        often carried by a few data (the tail observations that tell a Student-t's degrees of freedom
        apart: skewness 6.9, kurtosis 85 for 4 against 6 on 2,000 points).  A first batch that misses them
        sees a small, light-tailed spread and stops on the wrong side; the race's own guard works from
        the sample's moments and cannot see what it has not read.  Init reads all the data, so it measures
        the population's moments, once per configuration (one full-data pass each)."""
        ms = self._ms
        every = jnp.arange(ms.size)
        configurations = self._configurations()

        def terms(i):
            values = {**{k: v[i] for k, v in configurations.items()}, **ms.constrain(unravel(modes[i]))}
            return ms.log_likelihood(values, every, model_args, model_kwargs)

        lead = terms(best)

        def sample(i):
            d = terms(i) - lead
            # a value of probability 0 at some datum: the race's exact fallback draws, nothing to guard
            finite = jnp.all(jnp.isfinite(d))
            _, _, guard = first_batch_spread(jnp.where(jnp.isfinite(d), d, 0.0), self.race_options["first_batch"])
            return jnp.where(finite, guard, 0.0)

        guards = jax.lax.map(sample, jnp.arange(modes.shape[0]))
        return jnp.max(jnp.where(ok & (jnp.arange(modes.shape[0]) != best), guards, 0.0)).astype(jnp.float32)

    def _fit_configurations(self, flat, unravel, configurations, model_args, model_kwargs):
        """``(modes, scale_trils, coupling, ok, log_evidence)``: the Laplace fits of the continuous sites' conditional in
        each of ``configurations`` (``{site: [K] values}``), non-finite fits replaced by the best one's; the
        largest coordinate-wise distance of a mode from the best fit's in the best fit's posterior sds; which
        fits were finite."""
        def fits(x0, configurations, args, kwargs):
            def one(values):
                la, _ = fit_laplace(lambda x: self._log_joint(x, unravel, values, args, kwargs), x0)
                return la.mode, la.scale_tril, la.log_evidence

            return jax.lax.map(one, configurations)

        modes, trils, evidence = jit_with_data(fits, model_args, model_kwargs)(flat, configurations)
        ok = jnp.isfinite(evidence) & jnp.all(jnp.isfinite(modes), -1) & jnp.all(jnp.isfinite(trils), (-2, -1))
        best = jnp.argmax(jnp.where(ok, evidence, -jnp.inf))
        sd = jnp.sqrt(jnp.sum(trils[best] ** 2, -1))  # marginal sds of the best configuration's conditional
        distance = jnp.max(jnp.abs(modes - modes[best]) / sd, -1)
        coupling = jnp.max(jnp.where(ok, distance, 0.0)).astype(jnp.float32)
        modes = jnp.where(ok[:, None], modes, modes[best])
        trils = jnp.where(ok[:, None, None], trils, trils[best])
        return modes, trils, coupling, ok, jnp.where(ok, evidence, -jnp.inf)

    def _inner_scale_ratio(self, inner_state, discrete, model_args, model_kwargs):
        """With an inner :class:`RacingMH`: the largest ``max(lambda, 1 / lambda)`` over the
        eigenvalues ``lambda`` of ``F' P_v F``, where ``F F' `` is the inner proposal's inverse mass
        matrix (the Laplace fit at the start's discrete configuration) and ``P_v = -H`` the
        full-data Hessian of the continuous sites' log posterior at the start with one discrete
        site set to ``v`` (each site, each value of its support, the others at the start; ``|lambda|``
        where ``P_v`` is not positive definite).  The proposal keeps that scale in every
        configuration: where a value makes the conditional far wider or narrower (a
        spike-and-slab indicator: the slab's data-fitted sd against the spike's prior sd), the
        walk stays where it was and the discrete site flips back more often than it should, with
        nothing in R-hat.  One Hessian pass per value; NaN without an inner RacingMH or under
        traced arguments."""
        nan = jnp.asarray(jnp.nan, jnp.float32)
        if not isinstance(self.inner_kernel, RacingMH) or inner_state is None or not self._ms.discrete_sites:
            return nan
        inner = self.inner_kernel
        flat = ravel_pytree(inner_state.z)[0]
        inv_mass = jnp.asarray(inner_state.inverse_mass_matrix, flat.dtype)
        factor = jnp.linalg.cholesky(inv_mass) if inv_mass.ndim == 2 else jnp.diag(jnp.sqrt(inv_mass))

        def ratios(x, values, name, args, kwargs):
            def one(v):
                kw = self._inner_kwargs(kwargs, {**discrete, name: v})
                value = inner._full_log_posterior(args, kw)[1]
                lam = jnp.abs(jnp.linalg.eigvalsh(factor.T @ -jax.hessian(value)(x) @ factor))
                lam = jnp.maximum(lam, jnp.finfo(x.dtype).tiny)
                return jnp.max(jnp.maximum(lam, 1.0 / lam))

            return jax.lax.map(one, values)

        worst = 1.0
        try:
            for name in self._ms.discrete_sites:
                values = self._supports[name].astype(jnp.asarray(discrete[name]).dtype)
                r = jit_with_data(lambda x, v, a, kw, name=name: ratios(x, v, name, a, kw),
                                  model_args, model_kwargs)(flat, values)
                worst = max(worst, float(np.nanmax(np.asarray(r, np.float64))))
        except (jax.errors.ConcretizationTypeError, jax.errors.TracerArrayConversionError):
            return nan  # an init traced by another transformation: nothing to measure
        return jnp.asarray(worst, jnp.float32)

    def _concentration(self, inner_state, discrete, model_args, model_kwargs):
        """``(exact_mode, ratio, guard)``: whether this chain draws its discrete values exactly, the largest
        ``se_all / se_typical`` (:func:`~subsample_mcmc.racing.race.first_batch_spread`) of the per-datum
        log-likelihood differences of each value of each discrete site against the most probable value
        at the start (inf where a value gives some, but not all, data points probability 0).  Exact
        where that ratio exceeds RacingMH's threshold (5) with a stage-1 sd above 0.01 nats: a first
        batch would miss the few data that decide the draw (a Bernoulli probability 0 at a rare 1, a
        rare extreme row) and the race would err beyond ``delta`` without a sign.  ``guard``: the largest
        heavy-tail guard minimum sample ``28 + 25 max(g1^2, k - 3)`` at those differences' population
        skewness and kurtosis, the first batch of the conditional draws' races (the race's own guard
        estimates the moments from what it has read, and a first batch that misses a one-sided tail
        sees a light one); where it reaches ``N`` the chain draws exactly too (the same draws without
        a race's overhead).  One full-data pass
        per value, once per chain; not with ``method='exact'`` or a control variate (whose exactly-read
        points are the remedy), nor when the arguments are traced."""
        off = (jnp.asarray(False), jnp.asarray(jnp.nan, jnp.float32), jnp.asarray(jnp.nan, jnp.float32))
        if self.race_options["method"] == "exact" or self.control_variate is not None:
            return off
        ms, m = self._ms, self.race_options["first_batch"]
        try:
            continuous = self._continuous_values(inner_state, model_args, model_kwargs, discrete)
            every = jnp.arange(ms.size)
            # in JAX operations only, so that it also runs where init is traced (chain_method="parallel")
            worst, exact = jnp.zeros((), jnp.float32), jnp.zeros((), bool)
            guard_max = jnp.zeros((), jnp.float32)
            for name in ms.discrete_sites:
                support = self._supports[name]

                def per_datum(v, name=name):
                    values = {**continuous, **discrete, name: v.astype(jnp.asarray(discrete[name]).dtype)}
                    return ms.log_likelihood(values, every, model_args, model_kwargs)

                totals = jax.lax.map(lambda v: jnp.sum(per_datum(v)), support)
                possible = jnp.isfinite(totals)  # none possible here: the step's exact fallback draws
                lead = support[jnp.argmax(jnp.where(possible, totals, -jnp.inf))]
                lead_terms = per_datum(lead)  # once, not once per value

                def spread(v, lead_terms=lead_terms, per_datum=per_datum):
                    d = per_datum(v) - lead_terms
                    finite = jnp.isfinite(d)
                    se_all, se_typ, guard = first_batch_spread(jnp.where(finite, d, 0.0), m)
                    some = jnp.any(~finite) & jnp.any(finite)  # partly impossible: a race may miss it
                    return jnp.where(some, jnp.inf, se_all / jnp.maximum(se_typ, jnp.finfo(d.dtype).tiny)), \
                        jnp.where(some, jnp.inf, se_all), guard

                ratios, ses, guards = jax.lax.map(spread, support)
                ratios, ses = (jnp.nan_to_num(a, nan=0.0, posinf=jnp.inf) for a in (ratios, ses))
                # (values whose differences a first batch sees at under 0.01 nats decide nothing)
                guard_max = jnp.maximum(guard_max, jnp.max(jnp.where(jnp.isfinite(guards) & (ses > _SPREAD_MIN_NATS),
                                                                     guards, 0.0)).astype(jnp.float32))
                any_possible = jnp.any(possible)
                worst = jnp.where(any_possible, jnp.maximum(worst, jnp.max(ratios).astype(jnp.float32)), worst)
                exact = exact | (any_possible & jnp.any((ratios > _SPREAD_RATIO_MAX) & (ses > _SPREAD_MIN_NATS)))
            # a race that must read every datum first is the exact draw with a race's overhead
            exact = exact | (guard_max >= ms.size)
        except jax.errors.ConcretizationTypeError:  # traced arguments: nothing to measure
            return off
        return exact, worst, guard_max

    def _num_configurations(self) -> int:
        size = 1
        for name in self._ms.discrete_sites:
            size *= int(self._supports[name].shape[0])
        return size

    def _caches_proxy(self, inner_state) -> bool:
        return (isinstance(self.inner_kernel, RacingMH) and getattr(inner_state, "proxy", None) is not None
                and self._num_configurations() <= _MAX_CACHED_CONFIGURATIONS)

    def _configuration(self, discrete) -> jax.Array:
        """Index of the joint discrete configuration (row-major over the sites' supports)."""
        c = jnp.zeros((), jnp.int32)
        for name in self._ms.discrete_sites:
            support = self._supports[name]
            position = jnp.argmax(support == discrete[name].astype(support.dtype)).astype(jnp.int32)
            c = c * support.shape[0] + position
        return c

    def sample(self, state, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        self._setup(model_args, model_kwargs)
        if self._vectorized:
            return jax.vmap(self._sample_one, in_axes=(0, None, None))(state, model_args, model_kwargs)
        return self._sample_one(state, model_args, model_kwargs)

    def _draw(self, key, log_prior, rewards, totals, num_arms, exact_mode, options):
        """One draw of the discrete value among ``num_arms`` arms: the race (skipped in exact mode)
        and, where it met a non-finite log-likelihood (a value of probability 0 at some datum, or a
        start where the current values have probability 0) or in exact mode, the exact draw from
        every arm's full-data sum (``totals()``, ``[num_arms]``) with the same Gumbel noise (-inf =
        probability 0).  Returns
        ``(index or -1, likelihood evaluations, stages)``: every arm at every computed point, and
        the exact draw's full pass when it ran."""
        ms = self._ms

        def race(_):
            d = sample_discrete(key, log_prior, rewards, population_size=ms.size, **options)
            return d.value, d.race.nonfinite, d.race.num_points_computed, d.race.num_stages

        def skip(_):  # exact mode: the exact draw below does it all
            zero = jnp.zeros((), jnp.int32)
            return jnp.full((), -1, jnp.int32), jnp.asarray(True), zero, zero

        value, nonfinite, computed, num_stages = jax.lax.cond(exact_mode, skip, race, None)

        def exact_draw(_):
            return sample_discrete_exact(key, log_prior, totals())

        value = _run_at_most_once(nonfinite, exact_draw, value)
        evals = (computed * num_arms).astype(jnp.int32) + jnp.where(nonfinite, ms.size * num_arms, 0).astype(jnp.int32)
        return value, evals, num_stages.astype(jnp.int32)

    def _joint_move(self, key, name, discrete, flat, unravel, table, exact_mode, model_args, model_kwargs):
        """The joint move of site ``name`` and the continuous sites (class docstring): returns
        ``(discrete, flat, evaluations, stages)``."""
        ms = self._ms
        support = self._supports[name]
        dtype = discrete[name].dtype
        arms = jax.vmap(lambda v: {**discrete, name: v.astype(dtype)})(support)
        g = jax.tree.map(lambda a: a[jax.vmap(self._configuration)(arms)], table)
        current = jnp.argmax(support == discrete[name].astype(support.dtype))
        key_arms, key_race = jax.random.split(key)
        thetas, log_g = shared_space_arms(key_arms, current, flat, g)
        log_prior, values = jax.vmap(lambda th, dv: self._joint_prior(th, unravel, dv, model_args, model_kwargs))(
            thetas, arms)
        log_f0 = model_log_f0(0.0, 0.0, log_prior, log_g)

        def rewards(idx):
            return jax.vmap(lambda v: ms.log_likelihood(v, idx, model_args, model_kwargs))(values)

        def totals():  # one arm at a time: O(N) memory
            every = jnp.arange(ms.size)
            return jax.lax.map(lambda i: jnp.sum(ms.log_likelihood(jax.tree.map(lambda a: a[i], values), every,
                                                                    model_args, model_kwargs)),
                               jnp.arange(support.shape[0]))

        options = self._step_race_options()
        if getattr(self, "_joint_first_batch", None):
            options["first_batch"] = self._joint_first_batch
        if self.control_variate is not None:
            options["control_variate"] = self.control_variate.for_arms(values)
        value, evals, stages = self._draw(key_race, log_f0, rewards, totals, support.shape[0], exact_mode, options)
        ok = value >= 0
        pick = jnp.maximum(value, 0)
        discrete = {**discrete, name: jnp.where(ok, support[pick].astype(dtype), discrete[name])}
        return discrete, jnp.where(ok, thetas[pick], flat), evals, stages

    def _sample_one(self, state, model_args, model_kwargs):
        ms = self._ms
        joint = state.joint_laplace is not None
        key, *keys = jax.random.split(state.rng_key, len(ms.discrete_sites) + 1)
        discrete = {k: state.z[k] for k in ms.discrete_sites}
        continuous = self._continuous_values(state.inner_state, model_args, model_kwargs, discrete)
        if joint:
            flat, unravel = ravel_pytree(state.inner_state.z)
            flat_before = flat
        evals = jnp.array(0, jnp.int32)
        stages = jnp.array(0, jnp.int32)
        for name, k in zip(ms.discrete_sites, keys):
            support = self._supports[name]
            def values_at(v, name=name):
                return {**continuous, **discrete, name: v.astype(discrete[name].dtype)}

            log_prior = jax.vmap(lambda v: ms.log_prior(values_at(v), model_args, model_kwargs))(support)

            def rewards(idx, values_at=values_at):
                return jax.vmap(lambda v: ms.log_likelihood(values_at(v), idx, model_args, model_kwargs))(support)

            def totals(values_at=values_at, support=support):
                every = jnp.arange(ms.size)
                return jax.lax.map(
                    lambda v: jnp.sum(ms.log_likelihood(values_at(v), every, model_args, model_kwargs)), support)

            options = self._step_race_options()
            if getattr(self, "_discrete_first_batch", None):
                options["first_batch"] = self._discrete_first_batch
            if self.control_variate is not None:
                arm_values = jax.vmap(values_at)(support)
                options["control_variate"] = self.control_variate.for_arms(arm_values)
            value, e, st = self._draw(k, log_prior, rewards, totals, support.shape[0], state.exact_mode, options)
            ok = value >= 0
            new = support[jnp.maximum(value, 0)].astype(discrete[name].dtype)
            discrete = {**discrete, name: jnp.where(ok, new, discrete[name])}
            evals, stages = evals + e, stages + st
            if joint:  # with a key of its own: the conditional draw keeps the key it had
                def move(carry, name=name, k_joint=jax.random.fold_in(k, 1)):
                    d, x, e, st = carry
                    d, x, e2, st2 = self._joint_move(k_joint, name, d, x, unravel, state.joint_laplace,
                                                     state.exact_mode, model_args, model_kwargs)
                    return d, x, e + e2, st + st2

                discrete, flat, evals, stages = _run_at_most_once(
                    state.joint_moves, move, (discrete, flat, evals, stages))
                continuous = ms.constrain(unravel(flat))
        inner_state = state.inner_state
        if joint:  # the continuous sites where the joint moves put them (the refresh below follows them)
            inner_state = inner_state._replace(z=unravel(flat))
        cache, cached = state.proxy_cache, state.proxy_cached
        if self.inner_kernel is not None:
            kw = self._inner_kwargs(model_kwargs, discrete)
            # the inner kernel's cache (a Taylor proxy's full-data sums, NUTS's potential
            # energy) depends on the discrete values only: rebuild it when one changed,
            # skipping the full-data pass otherwise (a real branch, also under vmap)
            changed = jnp.any(jnp.stack([jnp.any(discrete[k] != state.z[k]) for k in ms.discrete_sites]))
            if joint:  # a joint move may put the continuous sites elsewhere and the discrete ones back where
                # they were (the conditional draw a -> b, the joint move b -> a with theta ~ g_a): what the
                # inner state caches at its point (NUTS's potential energy and gradient, an exact RacingMH's
                # log-likelihood sum) is recomputed then too
                changed = changed | jnp.any(flat != flat_before)
            refresh_cost = getattr(self.inner_kernel, "refresh_likelihood_evals", 0)
            if cache is None:
                inner_state = _run_at_most_once(
                    changed, lambda st: self.inner_kernel.refresh(st, model_args, kw), inner_state)
                evals = evals + jnp.where(changed, jnp.int32(refresh_cost), jnp.int32(0))
            else:  # a RacingMH proxy: from the cache when this configuration was seen
                c = self._configuration(discrete)
                build = changed & ~cached[c]
                inner_state = _run_at_most_once(
                    build, lambda st: self.inner_kernel.refresh(st, model_args, kw), inner_state)
                reuse = changed & cached[c]
                kept = inner_state._replace(proxy=jax.tree.map(lambda a: a[c], cache),
                                            log_lik_sum=jnp.full_like(inner_state.log_lik_sum, jnp.nan))
                inner_state = jax.tree.map(lambda a, b: jnp.where(reuse, a, b), kept, inner_state)
                cache = jax.tree.map(lambda a, p: a.at[c].set(jnp.where(build, p, a[c])), cache, inner_state.proxy)
                cached = cached.at[c].set(cached[c] | build)
                evals = evals + jnp.where(build, jnp.int32(refresh_cost), jnp.int32(0))
            inner_state = self.inner_kernel.sample(inner_state, model_args, kw)
            if hasattr(inner_state, "num_likelihood_evals"):
                evals = evals + inner_state.num_likelihood_evals
        z = {**discrete, **({} if inner_state is None else inner_state.z)}
        # int32 as at init, also under jax_enable_x64 (the scan carry must keep its dtype)
        return RacingGibbsState(z, inner_state, jnp.asarray(evals, jnp.int32), jnp.asarray(stages, jnp.int32), key,
                                cache, cached, state.exact_mode, state.spread_ratio, state.inner_scale_ratio,
                                state.joint_laplace, state.joint_moves, state.coupling_sds,
                                state.joint_guard_sample, state.guard_sample)

    def postprocess_fn(self, model_args, model_kwargs):
        """The discrete values, the inner kernel's postprocessed values and the
        deterministic sites, as NUTS returns them (without an inner kernel they come from
        :meth:`ModelSubsampler.deterministic`: sites inside the data plate by one run of
        the model on all the data per draw)."""
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        ms = self._setup(model_args, model_kwargs)

        def fn(z):
            discrete = {k: z[k] for k in ms.discrete_sites}
            out = dict(discrete)
            if self.inner_kernel is not None:
                inner_z = {k: v for k, v in z.items() if k not in discrete}
                kw = self._inner_kwargs(model_kwargs, discrete)
                out.update(self.inner_kernel.postprocess_fn(model_args, kw)(inner_z))
            else:
                out.update(ms.deterministic(discrete, model_args, model_kwargs))
            return out

        return fn

    def refresh(self, state, model_args, model_kwargs):
        if self.inner_kernel is None:
            return state
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        self._setup(model_args, model_kwargs)

        def one(st):
            discrete = {k: st.z[k] for k in self._ms.discrete_sites}
            return st._replace(inner_state=self.inner_kernel.refresh(
                st.inner_state, model_args, self._inner_kwargs(model_kwargs, discrete)))

        return jax.vmap(one)(state) if self._vectorized else one(state)

    def wrap_model(self, wrapper):
        new = copy.copy(self)
        new._model = wrapper(self._model)
        new.inner_kernel = None if self.inner_kernel is None else self.inner_kernel.wrap_model(wrapper)
        new._ms = None
        new._supports = {}
        return new

    @property
    def default_fields(self):
        return ("z",)
