r"""``ModelSelection``: a NumPyro ``MCMCKernel`` over a list of candidate models.

Carlin & Chib's (1995) product space (:mod:`subsample_mcmc.kernels.product_space`): every
model keeps its own parameters; the selected model's move by
:class:`~subsample_mcmc.numpyro.RacingMH`, the others' draws from their Laplace
pseudopriors, and the model index drawn by a Gumbel-max race over the models' per-datum
log-likelihoods (Eq. 2-3 of Chen & Ghahramani 2016, with each model's Taylor proxy as
control variate), Wang-Landau tuning the model prior during warmup (App. C.2).
:func:`model_posterior` turns the draws into ``p(k | y)`` with standard errors.
"""

from __future__ import annotations

import operator
import warnings
from typing import NamedTuple, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.util import is_prng_key

from ..kernels.product_space import (
    Pseudoprior, PseudopriorFit, copula_pseudoprior, laplace_adjustment, model_log_f0, model_probabilities, proxy_sums, pseudoprior, pseudoprior_draw, pseudoprior_fit, pseudoprior_log_density,
    wang_landau_update,
)
from ..kernels.laplace import log_density_sum
from ..kernels.proxy import proxy_residual
from ..racing import ArmControlVariates, FeatureProxyTable, feature_proxy_table, sample_discrete, sample_discrete_exact
from .control import LinearFeatureControlVariate
from .mh import RacingMH
from .model import (InitOnceKernel, check_delta, check_method, check_race_fraction, check_race_options, full_data_model,
                    jit_with_data, outside_traces, rephrased_warnings)

__all__ = ["ModelSelection", "ModelSelectionState", "ModelPosterior", "model_posterior", "conditional_samples"]

#: the site of the model index in ``mcmc.get_samples()`` and ArviZ's posterior
MODEL_SITE = "model"
#: joins a model's name and its site names (``"<name>.<site>"``); not NumPyro's scope divider "/", which
#: ArviZ's netCDF files refuse in variable names
SITE_DIVIDER = "."
#: model_posterior warns when a model with probability above 1% has fewer visits than this, or when the
#: weighted draws' effective number is below this fraction of the draws
_MIN_VISITS, _MIN_EFFECTIVE_FRACTION = 20, 0.05
#: pseudoprior="auto": pseudoprior draws of the Laplace check, and the log-weight sd above which a model's
#: pseudoprior is refitted from a NUTS pilot (sd 1 nat: the chain already leaves the model several times
#: less often than a perfect fit would)
_AUTO_CHECK_DRAWS, _AUTO_MAX_LOG_WEIGHT_SD = 200, 1.0
#: the NUTS pilot's tree depth (NumPyro's default is 10): a bound on its cost, pilot_draws * 3/2 * 255
#: gradient passes.  A float32 NegativeBinomial2 likelihood at a large concentration (lgamma differences that
#: cancel) is noisy enough that NUTS builds maximal trees: at N = 5,000 the whole ModelSelection run took 571 s
#: with depth 10 and 142 s with depth 8 (benchmarks/model_selection_pilot.py; both pilots warn)
_PILOT_TREE_DEPTH = 8
#: max_race_fraction="auto" with feature control variates: a race undecided after 1/32 of its raced points hands over
#: to the exact draw (benchmarks/results/arch_race_budgets.md)
_FEATURE_RACE_BUDGET = 1 / 32

#: control_variate: pseudoprior draws per model at which the proxies' residuals pick the points read exactly
_PROXY_PROBES = 4
#: the auxiliary site given to a candidate without continuous latent sites (a fixed null model): a
#: standard normal the likelihood never reads, so that the model has a RacingMH state like the others.
#: Its Laplace pseudoprior is its prior, N(0, 1), so its terms cancel in the model race's arms; it is
#: dropped from the draws
_AUXILIARY_SITE = "_no_parameters"


def _with_auxiliary_site(model):
    """``model`` with :data:`_AUXILIARY_SITE` ~ N(0, 1) sampled first (and nothing else changed)."""

    def parameter_free(*args, **kwargs):
        numpyro.sample(_AUXILIARY_SITE, dist.Normal(0.0, 1.0))
        return model(*args, **kwargs)

    parameter_free.__name__ = getattr(model, "__name__", "parameter_free")
    return parameter_free


class ModelSelectionState(NamedTuple):
    i: jax.Array
    z: dict  # {"model": k, "<name>.<site>": unconstrained value of each model's sites}
    inner_states: tuple  # one RacingMHState per model
    pseudopriors: tuple  # one Pseudoprior per model, fixed at init
    log_prior_adjustment: jax.Array  # [K] Wang-Landau's a (frozen after warmup)
    num_likelihood_evals: jax.Array  # everything the sweep computed (model race + MH step)
    race_stage: jax.Array  # stages of the model race (0: exact)
    mh_race_stage: jax.Array  # stages of the selected model's MH race (0: exact step)
    accept_prob: jax.Array  # the selected model's MH accept indicator
    rng_key: jax.Array
    exact_model_draw: jax.Array = False  # the model index is drawn exactly (the race cost more; decided in warmup)
    race_cost: jax.Array = 0.0  # the model race's evaluations summed over the decision window of warmup
    model_draw_checked: jax.Array = False  # check_decisions: this sweep's model draw was a race, re-drawn exactly
    model_draw_disagrees: jax.Array = False  # ... and the exact draw (same Gumbel noise) chose another model
    feature_proxies: Optional[tuple] = None  # control_variate: each model's LinearFeatureProxy at its MAP
    raced_indices: Optional[jax.Array] = None  # ... the points the model race samples
    exact_indices: Optional[jax.Array] = None  # ... the points it sums exactly in every race
    feature_table: Optional[FeatureProxyTable] = None  # ... the proxies' per-datum coefficients, one row per datum
    exact_sums: Optional[jax.Array] = None  # ... [K] each model's log-likelihood over those points at its parameters (NaN: unknown)
    exact_rows: Optional[tuple] = None  # ... the per-datum arguments' rows at those points (None: models index themselves)


def _names(models) -> tuple[list, list]:
    if isinstance(models, dict):
        names, fns = [str(k) for k in models], list(models.values())
    elif isinstance(models, (list, tuple)):
        fns = list(models)
        names = [getattr(m, "__name__", None) for m in fns]
        if any(n is None or n == "<lambda>" for n in names) or len(set(names)) < len(names):
            names = [f"m{j}" for j in range(len(fns))]
    else:
        raise TypeError(f"models must be a list or a dict of NumPyro models, got {type(models).__name__}")
    if len(fns) < 2:
        raise ValueError(f"models must hold at least two candidate models, got {len(fns)}")
    for name, m in zip(names, fns):
        if not callable(m):
            raise TypeError(f"models[{name!r}] is not callable: pass NumPyro model functions")
        if not name or SITE_DIVIDER in name or "/" in name or name == MODEL_SITE:
            raise ValueError(f"models: the name {name!r} may not be empty, contain {SITE_DIVIDER!r} or '/', nor be "
                             f"{MODEL_SITE!r} (sites are reported as '<name>{SITE_DIVIDER}<site>'); use '_' instead")
    return names, fns


class ModelSelection(InitOnceKernel):
    r"""Bayesian model choice among NumPyro models that share one data plate.

    The chain runs on Carlin & Chib's product space (see
    :mod:`~subsample_mcmc.kernels.product_space` for the maths, Eq. 25 of Chen &
    Ghahramani 2016): per sweep, every unselected model's parameters are drawn from its
    pseudoprior (the Laplace approximation ``N(m_j, S_j)`` at its MAP, found by
    :class:`RacingMH`'s mode search at ``init``, or a copula fitted to a pilot run where the
    Laplace approximation misses: ``pseudoprior``), the selected model's parameters move
    by one :class:`RacingMH` step (its defaults: Crank-Nicolson-t around the Laplace
    approximation where it fits, the random walk otherwise), and the model index ``k``
    is drawn by a Gumbel-max race (Eq. 2-3, Racing-Normal by default) whose ``K`` arms
    are the models' per-datum log-likelihoods less their Taylor proxies (third-order
    residuals), with

    .. math::

        \log f_0(k) = \log \pi(k) + a_k + \log p(\theta_k \mid k) - \log g_k(\theta_k)
                      + \textstyle\sum_n h_{k,n}(\theta_k).

    The race errs with probability at most ``delta`` (total variation, Prop. 1).  **Never
    more than exact**: early in warmup and over its last quarter the race's cost per sweep is
    measured, and when it exceeds ``K N`` (the exact draw; twice that early on) the chain
    draws ``k`` exactly from then on (``exact_model_draw`` in the state; the progress bar says so).  During
    warmup Wang-Landau lowers ``a_k`` by ``1/(1 + t/100)`` at each visit of ``k`` (App.
    C.2) so that every model is visited; ``a`` is then frozen and
    :func:`model_posterior` divides it out: ``p(k | y) ∝ p~(k | y) exp(-a_k)``.

    Args:
        models: a list of NumPyro models (named by their function names when unique,
            else ``m0, m1, ...``) or a dict ``{name: model}``.  They take the same
            arguments and each has one data plate of the same size ``N``; they may use
            the same site names (sites are reported as ``"<name>.<site>"``).  Each
            model's latent sites must be continuous (global parameters); a model with none (a
            fixed null model) is a candidate too: it gets an auxiliary N(0, 1) site its
            likelihood never reads, whose pseudoprior is its prior (the terms cancel in
            ``log f_0``), and it has no sites in the draws.
        prior: prior model probabilities ``pi(k)``: a sequence in the models' order or a dict
            ``{name: p}``; positive weights, normalised (default uniform).
        method, delta, first_batch, variance: the model race and the MH races
            (:func:`~subsample_mcmc.racing.best_arm`); ``method="exact"`` is the
            full-data product-space sampler (exact model draws and exact MH steps) coupled
            to the race through the same random numbers.
        wang_landau: tune ``a`` during warmup (default True); False keeps ``a`` at its start.
        initial_adjustment: ``a``'s start: ``"laplace"`` (default) ``a_k = -log Z^_k``, the
            Laplace evidences from each model's mode and pseudoprior
            (:func:`~subsample_mcmc.kernels.product_space.laplace_adjustment`; one full-data
            pass per model at ``init``), so that the models are nearly balanced from the first
            sweep and Wang-Landau only corrects the Laplace error; ``"zero"``: ``a = 0`` (with
            ``wang_landau=False`` the chain then samples ``p(k | y)`` itself, and a model with
            tiny posterior probability is rarely visited).
        pseudoprior: each model's pseudoprior ``g_j``.  ``"auto"`` (default): the Laplace
            Gaussian at its mode, checked at ``init`` by :func:`~subsample_mcmc.kernels.product_space.pseudoprior_fit`
            (200 pseudoprior draws, full data) and, where it misses (log-weight sd above 1 nat,
            or above 0.5 with Pareto ``k > 0.7``: skewed posteriors, such as ARCH lags near their zero
            bound, where the chain would stick in the model), replaced by ``"copula"``: a Gaussian
            copula with Yeo-Johnson marginals fitted to a NUTS pilot run of the model alone
            (:func:`~subsample_mcmc.kernels.product_space.copula_pseudoprior`; ``pilot_draws``
            draws, full data); ``kernel.auto_choice`` records each model's check and choice.
            ``"laplace"`` or ``"copula"`` force one kind; a dict ``{name: Pseudoprior}`` reuses
            an earlier run's fits (:meth:`pseudopriors`).  NumPyro calls ``init`` once per
            sequential chain, so each such chain fits its own pilots (vectorized chains share
            chain 0's; parallel chains, whose ``init`` NumPyro traces inside ``pmap``, share one fit
            made outside the trace); to fit once, ``init`` a kernel yourself and pass its
            :meth:`pseudopriors` (as the ARCH job does).
        pilot_draws: draws of each NUTS pilot (``pseudoprior="copula"``; half as many warmup).
        check_decisions: re-draw raced model indices exactly with the same Gumbel noise (a
            full-data pass over every model, not counted in ``num_likelihood_evals``) and record
            in the extra fields ``model_draw_checked`` and ``model_draw_disagrees`` whether the
            chain's draw (a race's, or after a race out of its budget the exact draw over the models
            the race kept) differs from it: the decision error rate, which Prop. 1 bounds by
            ``delta``.  ``True`` checks every sweep's draw; an integer ``m >= 1`` checks every
            ``m``-th sweep's (sweeps ``i`` with ``i % m == 0``; 0 is False), so that a timed run pays the
            diagnostic's full pass on ``1/m`` of its sweeps only.
        mh_options: further keyword arguments of each model's :class:`RacingMH` (e.g.
            ``num_restarts``, ``proposal``).
        control_variate: ``{name: LinearFeatureControlVariate}`` for every model: the model race's
            control variate becomes each model's Taylor proxy in its likelihood's linear features
            (:class:`~subsample_mcmc.numpyro.LinearFeatureControlVariate`; App. C.2's features of the
            ARCH model, or a GLM's linear predictor), built at ``init`` around each model's MAP, with
            the few points of largest residual read exactly.  The selected model's MH race uses the
            same proxy at its two arms ``x`` and ``x'`` (and the same points read exactly) in place
            of :class:`RacingMH`'s parameter-space Taylor proxy.  A datum's proxy costs O(p' p) (its
            derivatives in the features are stored), against the parameter-space proxy's derivatives
            of the model at every datum read.  Between balanced models whose totals differ by a few
            nats the race stops early only when the heavy-tailed points are read exactly: on ARCH
            orders of the DJIA ``exact_fraction=0.01`` left most races reading to the last stage,
            App. C.2's 0.2 (``models.arch.arch_control_variates``), with the MH race on the same
            proxies, cut the sweep's evaluations 3.5x (``benchmarks/results/arch_order_selection_djia.md``).
            The model race reads every model's proxy from one row per datum of a
            :class:`~subsample_mcmc.racing.FeatureProxyTable` built at ``init`` (each distinct covariate
            column once, every model's feature change from one product over those columns): on the DJIA's
            six ARCH orders a raced point's control variates cost 0.18 of what each proxy's own arrays
            cost at 7,580 points per trip, about three exact terms per model
            (``benchmarks/results/arch_race_point_cost.md``).  The table holds ``N`` times the models'
            monomial counts (10 each for two features at order 3) plus the distinct covariate columns.
            The model race's sums over the exactly-read points (every model's, at its parameters after
            the sweep) stay in the state (``exact_sums``); the next sweep's MH race of the model drawn
            takes its current parameters' sum from there (they have not moved since) and reads those
            points for its proposal only.  The rows of the models' per-datum arguments at those points
            are gathered once per chain (``exact_rows``) when the models take their data in plain plates
            (the kernels then pass the model the rows of its points; not when a model indexes its data
            with the plate's indices itself): on the DJIA a racing sweep took 0.836 +- 0.040 of its time
            gathering them in every race (``benchmarks/results/arch_exact_rows_cost.md``).
        data_plate: the data plate's name when a model has several candidates.
        max_race_fraction: a reading budget for every race (model race and MH races), as a share
            of the points it races: a race still undecided at the last stage boundary within it
            stops, and the draw is made exactly (the model index from the full-data sums of the
            models the race has not eliminated, with the same Gumbel noise; the MH test with the same
            ``u``), which is what the race would answer having read everything: the error promise is
            unchanged, the full passes are counted in ``num_likelihood_evals`` (:func:`~subsample_mcmc.racing.best_arm`'s
            ``max_points``).  A raced point costs several contiguous full-pass points (gathered
            rows, the control variate, the race's statistics), and between balanced models most
            races stop in the first stages while a few read to the last.  On the DJIA's six ARCH
            orders (37,900 returns) a compiled sweep took 0.84 of its time without a budget at 1/16
            (paired over 15 rounds: no budget 1.198 +- 0.057 times 1/16's sweep), and 1/32 took 0.935
            +- 0.058 of 1/16's, 1/64 1.068 +- 0.089 (``benchmarks/results/arch_race_budgets.md``).
            Default ``"auto"``: ``1/32`` with ``control_variate`` (whose raced points cost several
            exactly-read ones), none with the parameter-space proxies, whose races on a balanced
            normal mean (N = 20,000) read a few hundred points on average but often past a budget
            of 1/32, each such race then paying the full pass; a number or ``None``: that budget,
            or none.

    Draws: ``mcmc.get_samples()`` has ``"model"`` (the index into ``kernel.names``) and
    each model's sites as ``"<name>.<site>"`` *at every draw*: while model ``j`` is not
    selected its parameters are pseudoprior draws.  Use :func:`conditional_samples` for
    ``p(theta_j | y, j)`` and :func:`model_posterior` for ``p(k | y)``.  Extra fields:
    ``num_likelihood_evals`` (the model race at every point it computed, all arms and the
    proxies' cost, plus the MH step), ``race_stage`` (the model race's stages; 0 when
    exact), ``mh_race_stage``, ``accept_prob`` and ``log_prior_adjustment``.

    Example:
        >>> import jax, numpy as np, numpyro, numpyro.distributions as dist
        >>> from numpyro.infer import MCMC
        >>> def constant(x, y):
        ...     b0 = numpyro.sample("b0", dist.Normal(0, 10))
        ...     with numpyro.plate("data", x.shape[0]):
        ...         numpyro.sample("y", dist.Normal(b0, 1), obs=y)
        >>> def linear(x, y):
        ...     b0 = numpyro.sample("b0", dist.Normal(0, 10))
        ...     b1 = numpyro.sample("b1", dist.Normal(0, 10))
        ...     with numpyro.plate("data", x.shape[0]):
        ...         numpyro.sample("y", dist.Normal(b0 + b1 * x, 1), obs=y)
        >>> x = np.random.default_rng(0).normal(size=5000); y = 1 + 0.5 * x + np.random.default_rng(1).normal(size=5000)
        >>> mcmc = MCMC(ModelSelection([constant, linear]), num_warmup=200, num_samples=200, progress_bar=False)
        >>> mcmc.run(jax.random.PRNGKey(0), x, y)
        >>> post = model_posterior(mcmc)
        >>> post.names, round(float(post.probabilities[1]), 2)
        (['constant', 'linear'], 1.0)
    """

    # under a traced init, _concrete_start starts each model's kernel concretely, with its warnings
    _check_traced_start = False

    sample_field = "z"

    def __init__(self, models: Union[Sequence, dict], *, prior=None, method: str = "normal", delta: float = 0.05,
                 first_batch: int = 50, variance: str = "pairwise", wang_landau: bool = True,
                 initial_adjustment: str = "laplace", pseudoprior: Union[str, dict] = "auto",
                 pilot_draws: int = 1000, check_decisions: Union[bool, int] = False, mh_options: Optional[dict] = None,
                 control_variate: Optional[dict] = None, data_plate: Optional[str] = None,
                 max_race_fraction: Union[str, float, None] = "auto"):
        self.names, self._models = _names(models)
        k = len(self._models)
        if prior is None:
            prior = np.full(k, 1.0 / k)
        if isinstance(prior, dict):
            if set(prior) != set(self.names):
                raise ValueError(f"prior as a dict must give every model name {self.names} a probability, got "
                                 f"keys {sorted(prior)}")
            prior = [prior[n] for n in self.names]
        try:
            prior = np.asarray(prior, np.float64)
        except (TypeError, ValueError) as e:
            raise ValueError(f"prior must hold {k} positive probabilities (a list in the models' order or a dict "
                             f"{{name: p}}), got {prior!r}") from e
        if prior.shape != (k,) or not np.all(prior > 0) or not np.all(np.isfinite(prior)):
            raise ValueError(f"prior must hold {k} positive probabilities (one per model), got {prior}")
        self.prior = prior / prior.sum()
        check_method(method, "ModelSelection")
        delta = check_delta(delta)
        first_batch, variance = check_race_options(first_batch, variance)
        self.race_options = dict(method=method, delta=float(delta), first_batch=first_batch, variance=variance)
        self.wang_landau = bool(wang_landau)
        if isinstance(max_race_fraction, str) and max_race_fraction != "auto":
            raise TypeError(f"max_race_fraction must be 'auto', a share of the raced points in (0, 1] or None, got "
                            f"{max_race_fraction!r}; e.g. max_race_fraction=1/32")
        if isinstance(max_race_fraction, str):
            # measured on the feature control variates' races only (arch_race_budgets.md); on the parameter-space
            # proxies' races a budget of 1/32 sent many of a normal-mean chain's model races to the full pass
            max_race_fraction = _FEATURE_RACE_BUDGET if control_variate is not None else None
        self.max_race_fraction = check_race_fraction(max_race_fraction)
        if initial_adjustment not in ("laplace", "zero"):
            raise ValueError(f"initial_adjustment must be 'laplace' or 'zero', got {initial_adjustment!r}")
        self.initial_adjustment = initial_adjustment
        if isinstance(pseudoprior, dict):
            if set(pseudoprior) != set(self.names) or not all(isinstance(g, Pseudoprior) for g in pseudoprior.values()):
                raise ValueError(f"pseudoprior as a dict must map every model name {self.names} to a Pseudoprior "
                                 "(e.g. ModelSelection.pseudopriors(mcmc.last_state) of an earlier run)")
            self._given_pseudopriors = {k: jax.tree.map(jnp.asarray, g) for k, g in pseudoprior.items()}
            pseudoprior = "given"
        elif pseudoprior not in ("auto", "laplace", "copula"):
            raise ValueError(f"pseudoprior must be 'auto', 'laplace', 'copula' or a dict {{name: Pseudoprior}}, "
                             f"got {pseudoprior!r}")
        if int(pilot_draws) != pilot_draws or pilot_draws < 50:
            raise ValueError(f"pilot_draws must be an integer >= 50, got {pilot_draws!r}")
        self.pseudoprior_kind, self.pilot_draws = pseudoprior, int(pilot_draws)
        if isinstance(check_decisions, (bool, np.bool_)):
            check_decisions = int(bool(check_decisions))
        elif not (isinstance(check_decisions, (int, np.integer)) and check_decisions >= 0):
            raise ValueError(f"check_decisions must be True, False or an integer m >= 0 (check every m-th "
                             f"sweep's model draw; 0: none), got {check_decisions!r}")
        #: 0: off; m >= 1: the model draws of sweeps i with i % m == 0 are re-drawn exactly
        self.check_decisions = int(check_decisions)
        if control_variate is not None:
            if (not isinstance(control_variate, dict) or set(control_variate) != set(self.names)
                    or not all(isinstance(c, LinearFeatureControlVariate) for c in control_variate.values())):
                raise ValueError(f"control_variate must map every model name {self.names} to a "
                                 "LinearFeatureControlVariate (or be None for the parameter-space proxies)")
        self.control_variates = control_variate
        self.auto_choice = {}  # pseudoprior="auto": {name: {"pseudoprior", "k_hat", "log_weight_sd"}} after init
        mh_options = dict(mh_options or {})
        for key in ("method", "delta", "first_batch", "variance", "data_plate", "max_race_fraction"):
            if key in mh_options:
                raise ValueError(f"mh_options may not set {key!r}: pass it to ModelSelection itself")
        # second-order proxies unless asked: the model races compare proxies of several models, and
        # RacingMH's automatic order (made per kernel) could differ between them
        if mh_options.get("control_variate", "taylor") == "taylor":
            mh_options.setdefault("taylor_order", 2)
        self._mh_options = mh_options
        self._parameter_free = set()  # names of the candidates given the auxiliary site
        try:
            self.kernels = [RacingMH(m, **self.race_options, data_plate=data_plate,
                                     max_race_fraction=self.max_race_fraction, **mh_options) for m in self._models]
        except TypeError as e:
            raise TypeError(f"mh_options: {e}; mh_options takes RacingMH's keyword arguments (e.g. num_restarts, "
                            "proposal)") from e
        self.data_plate = data_plate
        self._size = None
        self._num_warmup = 0
        self._vectorized = False
        self._unravels = None

    # -- plumbing -------------------------------------------------------------------------
    @property
    def num_models(self) -> int:
        return len(self._models)

    def _setup(self, model_args, model_kwargs):
        if self._size is not None:
            return
        sizes = []
        for j, name in enumerate(self.names):
            kern = self.kernels[j]
            try:
                try:
                    ms = kern._setup(model_args, model_kwargs)
                except ValueError as e:
                    if "no continuous latent site" not in str(e):
                        raise
                    # a fixed (parameter-free) candidate: give it a site its likelihood never reads
                    kern = self.kernels[j] = RacingMH(_with_auxiliary_site(self._models[j]), **self.race_options,
                                                      data_plate=self.data_plate, **self._mh_options)
                    self._parameter_free.add(name)
                    ms = kern._setup(model_args, model_kwargs)
            except TypeError as e:
                raise TypeError(f"model {name!r} cannot be called with the data arguments given to MCMC.run ({e}): "
                                "every candidate model must take the same data arguments") from e
            except ValueError as e:
                text = str(e)
                if "discrete latent sites" in text:
                    raise ValueError(
                        f"model {name!r}: {text.split(':')[0]}; ModelSelection moves each model's parameters by "
                        "RacingMH (continuous sites only): marginalise the discrete site out of the model (e.g. a "
                        "mixture distribution), or make each of its values a candidate model of its own") from e
                if sizes and getattr(e, "plate_size", sizes[0]) != sizes[0]:
                    text += (f" (ModelSelection reads the same data points for every model: the models before "
                             f"{name!r} have a data plate of N={sizes[0]}; give every model the same data plate)")
                if "no observed sample site" in text:
                    text += ("; ModelSelection calls every candidate model with the same data arguments (those "
                             "given to MCMC.run): check that this model's signature takes them as the others do")
                raise ValueError(f"model {name!r}: {text}") from e
            sizes.append(ms.size)
            if getattr(kern, "_moving_support", None):
                site, kind = kern._moving_support
                raise ValueError(f"model {name!r}: observed site {site!r} has a support that moves with the "
                                 f"parameters ({kind}); a race cannot see it: use NUTS for this model")
        if len(set(sizes)) > 1:
            listing = ", ".join(f"{n}: N={s}" for n, s in zip(self.names, sizes))
            raise ValueError(f"the models' data plates differ in size ({listing}); the model race reads the same "
                             "data points for every model: give every model the same data (condition all of them "
                             "on the same observations)")
        self._size = sizes[0]

    def _log_prior_fns(self, model_args, model_kwargs):
        return [kern._log_prior_fn(model_args, model_kwargs) for kern in self.kernels]

    def _log_lik_fns(self, model_args, model_kwargs):
        return [kern._log_lik_fn(model_args, model_kwargs) for kern in self.kernels]

    # -- MCMCKernel API -------------------------------------------------------------------
    def _init_states(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        self._num_warmup = int(num_warmup)
        self._vectorized = not is_prng_key(rng_key)
        fits = features = None
        if isinstance(rng_key, jax.core.Tracer):
            fits, features = self._concrete_start(model_args, model_kwargs, num_warmup)
        self._setup(model_args, model_kwargs)
        if init_params is not None:
            if not isinstance(init_params, dict) or not set(init_params) <= set(self.names):
                raise ValueError("init_params of ModelSelection must be a dict {model name: that model's "
                                 f"init_params}} with names among {self.names}")
        self._check_control_variate_sizes()
        keys = (jax.vmap(lambda k: jax.random.split(k, self.num_models + 1))(rng_key) if self._vectorized
                else jax.random.split(rng_key, self.num_models + 1))
        inner, pseudo = [], []
        for j, (name, kern) in enumerate(zip(self.names, self.kernels)):
            key_j = keys[:, j] if self._vectorized else keys[j]
            params = None if init_params is None else init_params.get(name)
            st = self._init_model(name, kern, key_j, num_warmup, params, model_args, model_kwargs)
            if fits is None:  # (else checked at the concrete start)
                self._check_control_variate(name, kern, st, model_args, model_kwargs)  # before the pseudoprior fit
            g = fits[name] if fits else self._pseudoprior(name, kern, st, model_args, model_kwargs)
            if self._vectorized and jnp.ndim(g.mean) == 1:  # one fit serves every chain
                c = jnp.shape(st.i)[0]
                g = jax.tree.map(lambda v: jnp.broadcast_to(v, (c,) + jnp.shape(v)), g)
            inner.append(st._replace(i=jnp.zeros(jnp.shape(st.i), jnp.int32)))  # not weakly typed: one compile
            pseudo.append(g)
        self._unravels = [kern._unravel for kern in self.kernels]
        key_state = keys[:, -1] if self._vectorized else keys[-1]
        adjust = self._initial_adjustment(inner, pseudo, model_args, model_kwargs)
        if features is None:
            features = self._feature_proxies(inner, pseudo, model_args, model_kwargs)
        if features:
            features = dict(features, exact_rows=self._exact_rows(features["exact_indices"], model_args, model_kwargs))

        def build(key, inner, pseudo, adjust, features):
            k = jnp.zeros((), jnp.int32)
            return ModelSelectionState(
                i=jnp.zeros((), jnp.int32), z=self._z(k, inner), inner_states=tuple(inner),
                pseudopriors=tuple(pseudo), log_prior_adjustment=adjust,
                num_likelihood_evals=jnp.zeros((), jnp.int32), race_stage=jnp.zeros((), jnp.int32),
                mh_race_stage=jnp.zeros((), jnp.int32), accept_prob=jnp.zeros((), jnp.float32), rng_key=key,
                exact_model_draw=jnp.asarray(self.race_options["method"] == "exact") | self._kinked(inner),
                race_cost=jnp.zeros((), jnp.float32), model_draw_checked=jnp.zeros((), bool),
                model_draw_disagrees=jnp.zeros((), bool), **features)

        # the control variate's fields carry the chain axis too: mapped over, not closed over (a closed-over
        # [C, ...] field came out [C, C, ...], and each chain's race saw C data points)
        if self._vectorized:
            return jax.vmap(build)(key_state, tuple(inner), tuple(pseudo), adjust, features)
        return build(key_state, inner, pseudo, adjust, features)

    def _kinked(self, inner):
        """Whether some model's likelihood has a kink in its parameters (its RacingMH init found the
        Taylor proxy's curvature far from the likelihood's: ``residual_spread_ratio`` inf, the chain in
        exact mode): the model race, which reads the proxies' residuals, would decide on the few data near
        the kink without reading them, so the model index is drawn exactly (with user control variates,
        which replace the proxies in the race, it is not); or whether some model's mode lies on the edge of
        its support (``support_boundary``: a likelihood whose support moves with the parameters), which no
        race over a subset of the data can see, control variates or not."""
        boundary = jnp.any(jnp.stack([jnp.asarray(st.support_boundary) for st in inner]))
        if self.control_variates is not None:
            return boundary
        return boundary | jnp.any(jnp.stack([jnp.isinf(st.residual_spread_ratio) & st.exact_mode for st in inner]))

    @staticmethod
    def _init_model(name, kern, key, num_warmup, params, model_args, model_kwargs, note=""):
        """Model ``name``'s RacingMH state; a start outside the likelihood's support named as such, and the
        kernel's start warnings raised again with the model's name (and ``note``)."""
        try:
            with rephrased_warnings(prefix=f"model {name!r}: ", suffix=note):
                return kern.init(key, num_warmup, params, model_args, model_kwargs)
        except ValueError as e:
            text = str(e)
            if "not finite at the start" in text and "outside the likelihood's support" in text:
                text += (f". If the data are impossible under model {name!r} at any parameter value, its "
                         "posterior probability is 0: leave it out of the candidates")
            raise ValueError(f"model {name!r}: {text}") from e

    @outside_traces
    def _concrete_start(self, model_args, model_kwargs, num_warmup) -> tuple:
        """``(pseudopriors, control-variate fields or None)`` when NumPyro traces ``init``
        (``chain_method="parallel"`` runs it inside ``pmap``).  The ``"auto"`` check, the NUTS pilot, the
        control variates' check against each model and the choice of their exactly-read points decide on
        concrete values, so they run outside the trace (:func:`~subsample_mcmc.numpyro.model.outside_traces`),
        at a concrete start of each model's kernel (its mode search, once, on ``fold_in(PRNGKey(0), j)``; its
        warnings are raised there), before anything is cached inside the trace; the results serve every
        chain, as chain 0's serve vectorized chains."""
        self._setup(model_args, model_kwargs)
        self._check_control_variate_sizes()
        fits, inner = {}, []
        for j, (name, kern) in enumerate(zip(self.names, self.kernels)):
            st = self._init_model(name, kern, jax.random.fold_in(jax.random.PRNGKey(0), j), num_warmup, None,
                                  model_args, model_kwargs,
                                  note=" [chain_method='parallel': NumPyro starts each chain inside pmap's trace; "
                                       "this warning comes from one start per model, on fold_in(PRNGKey(0), j), "
                                       "made outside it]")
            self._check_control_variate(name, kern, st, model_args, model_kwargs)
            fits[name] = self._pseudoprior(name, kern, st, model_args, model_kwargs)
            inner.append(st)
        features = (None if self.control_variates is None else
                    self._feature_proxies(inner, [fits[name] for name in self.names], model_args, model_kwargs))
        return fits, features

    def _pseudoprior(self, name, kern, st, model_args, model_kwargs):
        """Model ``j``'s pseudoprior (``pseudoprior`` of the constructor): the Laplace Gaussian
        from its RacingMH state ``st``; with ``"auto"`` checked by :func:`pseudoprior_fit`
        (``_AUTO_CHECK_DRAWS`` full-data passes) and replaced by the NUTS-pilot copula
        (:meth:`_pilot`) when it misses: log-weight sd above ``_AUTO_MAX_LOG_WEIGHT_SD`` nats, or
        above half of it with Pareto ``k_hat > 0.7`` (heavy tails; below that sd the weights are
        nearly constant and 200 draws' ``k_hat`` is noise)."""
        flat = ravel_pytree(jax.tree.map(lambda v: v[0], st.z) if self._vectorized else st.z)[0]
        if self.pseudoprior_kind == "given":
            g = self._given_pseudopriors[name]
            if g.mean.shape != flat.shape:
                raise ValueError(f"pseudoprior[{name!r}] has {g.mean.shape[-1]} parameters but model {name!r} "
                                 f"has {flat.shape[0]}")
            return jax.tree.map(lambda v: jnp.asarray(v, flat.dtype), g)
        make = lambda s: pseudoprior(s.center, s.inverse_mass_matrix, s.mass_factor)  # noqa: E731
        if name in self._parameter_free:  # the auxiliary site's Laplace fit is its N(0, 1) prior: exact
            if self.pseudoprior_kind == "auto":
                self.auto_choice[name] = dict(pseudoprior="laplace", parameter_free=True)
            return jax.vmap(make)(st) if self._vectorized else make(st)
        if self.pseudoprior_kind == "copula":
            return self._pilot(name, kern, st, model_args, model_kwargs)
        g = jax.vmap(make)(st) if self._vectorized else make(st)
        if self.pseudoprior_kind == "laplace":
            return g
        g0 = jax.tree.map(lambda v: v[0], g) if self._vectorized else g
        kern._unravel = ravel_pytree(jax.tree.map(lambda v: v[0], st.z) if self._vectorized else st.z)[1]

        def check(key, g, args, kwargs):
            return pseudoprior_fit(key, self._log_joint(kern, args, kwargs), g, _AUTO_CHECK_DRAWS)

        key = jax.random.fold_in(st.rng_key[0] if self._vectorized else st.rng_key, 11)
        fit = jit_with_data(check, model_args, model_kwargs)(key, g0)
        self.auto_choice[name] = dict(k_hat=float(fit.k_hat), log_weight_sd=float(fit.log_weight_sd))
        sd = float(fit.log_weight_sd)
        if not sd <= _AUTO_MAX_LOG_WEIGHT_SD or (float(fit.k_hat) > 0.7 and sd > 0.5 * _AUTO_MAX_LOG_WEIGHT_SD):
            self.auto_choice[name]["pseudoprior"] = "copula"
            return self._pilot(name, kern, st, model_args, model_kwargs)
        self.auto_choice[name]["pseudoprior"] = "laplace"
        return g

    def _pilot(self, name, kern, st, model_args, model_kwargs):
        """Carlin & Chib's pilot run for model ``name``: NumPyro's NUTS on the model alone
        (full data; ``pilot_draws // 2`` warmup then ``pilot_draws`` draws, started at the model's
        searched mode, tree depth at most ``_PILOT_TREE_DEPTH``) and the copula pseudoprior fitted to
        its draws on the unconstrained scale
        (:func:`~subsample_mcmc.kernels.product_space.copula_pseudoprior`).  NUTS, not RacingMH:
        the pilot exists for the posteriors the Laplace approximation misses (skewed, lags at a
        bound), where a Metropolis walk crawls and its draws would fit the copula to one corner.
        Warns when the pilot's draws are too few to fit it (min bulk ESS < 50, divergences, or
        trees at the depth bound), naming x64 under float32.
        With vectorized chains one pilot (chain 0's key) serves every chain."""
        from numpyro.diagnostics import effective_sample_size
        from numpyro.infer import MCMC, NUTS, init_to_value

        key0 = st.rng_key[0] if self._vectorized else st.rng_key
        first = (lambda v: v[0]) if self._vectorized else (lambda v: v)
        z0 = jax.tree.map(first, st.z)
        model = self._models[self.names.index(name)]
        n = self.pilot_draws
        mode = kern._subsampler.constrain(ravel_pytree(z0)[1](first(st.center)))
        nuts = NUTS(model, max_tree_depth=_PILOT_TREE_DEPTH, init_strategy=init_to_value(values=mode))
        mcmc = MCMC(nuts, num_warmup=max(n // 2, 50), num_samples=n, progress_bar=False)
        mcmc.run(jax.random.fold_in(key0, 7), *model_args, extra_fields=("diverging", "num_steps"), **model_kwargs)
        draws = {site: v for site, v in mcmc.get_samples().items() if site in z0}
        # the kernel's own transforms (those of its flat state), not unconstrain_fn, which reruns the model on
        # all the data once per draw
        flat = jax.vmap(lambda d: ravel_pytree(kern._subsampler.unconstrain(d))[0])(draws)
        flat = jnp.asarray(flat, ravel_pytree(z0)[0].dtype)
        ess = float(np.min(effective_sample_size(np.asarray(flat, np.float64)[None])))
        extra = mcmc.get_extra_fields()
        diverging = int(np.sum(extra["diverging"]))
        deep = int(np.sum(np.asarray(extra["num_steps"]) >= 2 ** _PILOT_TREE_DEPTH - 1))
        if not ess >= 50 or diverging or deep > n // 10:
            x64 = ("" if flat.dtype == jnp.float64 or not (diverging or deep) else "; in float32 a likelihood whose terms cancel (lgamma "
                   "differences of a NegativeBinomial at a large concentration) can be too noisy for NUTS: "
                   "jax.config.update('jax_enable_x64', True) before building the data")
            warnings.warn(f"ModelSelection: the NUTS pilot of model {name!r} has min bulk ESS {ess:.0f}, "
                          f"{diverging} divergent transitions and {deep} trees at its depth bound "
                          f"({_PILOT_TREE_DEPTH}) in {n} draws; its copula pseudoprior may miss the posterior (the "
                          "chain then sticks in or avoids this model): raise pilot_draws or reparametrize the "
                          f"model{x64}", stacklevel=4)
        return copula_pseudoprior(flat)

    def _check_control_variate_sizes(self):
        """What ``control_variate`` needs of the data plate, checked before any fit."""
        if self.control_variates is None:
            return
        for name, cv in self.control_variates.items():
            if cv.size != self._size:
                raise ValueError(f"control_variate[{name!r}] has {cv.size} covariate rows, the data plate "
                                 f"{self._size}: build it from the same data the models are conditioned on")
        n_exact = int(np.floor(max(c.exact_fraction for c in self.control_variates.values()) * self._size))
        if self._size - n_exact < self.race_options["first_batch"]:
            raise ValueError(f"control_variate: exact_fraction leaves {self._size - n_exact} raced points, fewer "
                             f"than first_batch={self.race_options['first_batch']}: lower exact_fraction")

    def _check_control_variate(self, name, kern, st, model_args, model_kwargs):
        """The features' likelihood of model ``name`` against the model's own, at its mode."""
        if self.control_variates is None:
            return
        first = (lambda v: v[0]) if self._vectorized else (lambda v: v)
        cv, ms = self.control_variates[name], kern._subsampler
        values = ms.constrain(kern._unravel(first(st.center)))
        cv.check(lambda v, idx: ms.log_likelihood(v, idx, model_args, model_kwargs), values,
                 name=f"control_variate[{name!r}]")

    def _feature_proxies(self, inner, pseudo, model_args, model_kwargs) -> dict:
        """``control_variate``'s state fields: each model's :class:`~subsample_mcmc.racing.LinearFeatureProxy`
        at its MAP (chain 0's with vectorized chains), and the points read exactly: the
        ``exact_fraction`` of largest residual ``|l_n - h_n|`` (about its median) at
        ``_PROXY_PROBES`` pseudoprior draws of every model (each features' likelihood was checked
        against its model in ``_init_states``, before the pseudoprior fits)."""
        if self.control_variates is None:
            return {}
        first = (lambda v: v[0]) if self._vectorized else (lambda v: v)
        proxies, active, score = [], [], jnp.zeros(self._size)
        for j, (name, kern, st, g) in enumerate(zip(self.names, self.kernels, inner, pseudo)):
            cv, ms, unravel = self.control_variates[name], kern._subsampler, kern._unravel
            values = ms.constrain(unravel(first(st.center)))  # checked in _init_states
            proxy = cv.proxy(values, sums=False)  # the sums once the raced points are known
            g0 = jax.tree.map(first, g)

            @jax.jit  # the per-datum arrays as arguments: closed over, XLA would fold them as constants
            def residuals(key, data, proxy, g0, cv=cv, ms=ms, unravel=unravel):
                a = cv.matrix(ms.constrain(unravel(pseudoprior_draw(key, g0))))
                r = cv.log_likelihood_points(a, data=data) - proxy.values(a, jnp.arange(cv.size))
                return jnp.abs(r - jnp.median(r)), a

            key = jax.random.fold_in(first(st.rng_key), 13)
            moved = np.zeros(proxy.reference.size, bool)
            for i in range(_PROXY_PROBES):
                r, a = residuals(jax.random.fold_in(key, i), (cv.covariates, cv.response), proxy, g0)
                score = jnp.maximum(score, jnp.nan_to_num(r, nan=jnp.inf))
                moved |= np.asarray(a != proxy.reference).reshape(-1)
            proxies.append(proxy)
            # the entries of A that moved at the probes: the proxy's sums contract moments over those only (ARCH's
            # nu row moves one entry of q + 1); one that moves later makes the race sum that proxy's values instead
            active.append(np.flatnonzero(moved))
        n_exact = int(np.floor(max(c.exact_fraction for c in self.control_variates.values()) * self._size))
        order = np.argsort(-np.asarray(score), kind="stable")
        exact, raced = np.sort(order[:n_exact]), np.sort(order[n_exact:])
        proxies = tuple(p.restricted(raced, act) for p, act in zip(proxies, active))
        out = dict(feature_proxies=proxies, raced_indices=jnp.asarray(raced, jnp.int32),
                   exact_indices=jnp.asarray(exact, jnp.int32), feature_table=feature_proxy_table(proxies),
                   exact_sums=jnp.full((self.num_models,), jnp.nan, jnp.result_type(first(inner[0].log_lik_sum))))
        if self._vectorized:
            c = jnp.shape(inner[0].i)[0]
            out = jax.tree.map(lambda v: jnp.broadcast_to(v, (c,) + jnp.shape(v)), out)
        return out

    def _exact_rows(self, exact, model_args, model_kwargs) -> Optional[tuple]:
        """The per-datum arguments' rows at the exactly-read points ``exact`` (``[C, |E|]`` with vectorized
        chains), gathered once per chain (:meth:`ModelSubsampler.gather_rows`): every sweep's model race and
        MH race read those points, and a gather of them per sweep cost about as much as the likelihood's
        arithmetic there.  ``None`` when a model indexes its data itself (only it can gather its rows)."""
        subsamplers = [kern._subsampler for kern in self.kernels]
        if not all(ms.index_arguments for ms in subsamplers):
            return None
        if self._vectorized:
            return jax.vmap(lambda e: subsamplers[0].gather_rows(e, model_args, model_kwargs))(exact)
        return subsamplers[0].gather_rows(exact, model_args, model_kwargs)

    def _initial_adjustment(self, inner, pseudo, model_args, model_kwargs):
        """Wang-Landau's start ``a`` ``[K]`` (``[C, K]`` for vectorized chains), float32."""
        shape = (jnp.shape(inner[0].i)[0],) if self._vectorized else ()
        if self.initial_adjustment == "zero":
            return jnp.zeros(shape + (self.num_models,), jnp.float32)
        joints, log_g = [], []
        for kern, st, g in zip(self.kernels, inner, pseudo):
            def at_mode(center, g, args, kwargs, kern=kern):
                return self._log_joint(kern, args, kwargs)(center), pseudoprior_log_density(center, g)

            fn = jax.vmap(at_mode, in_axes=(0, 0, None, None)) if self._vectorized else at_mode
            joint, density = jit_with_data(fn, model_args, model_kwargs)(st.center, g)
            joints.append(joint)
            log_g.append(density)
        return laplace_adjustment(jnp.stack(joints, -1), jnp.stack(log_g, -1)).astype(jnp.float32)

    def _log_joint(self, kern, model_args, model_kwargs):
        """``theta -> log p(y, theta | k)`` on model ``kern``'s flat parameters, every datum read."""
        lp, ll = kern._log_prior_fn(model_args, model_kwargs), kern._log_lik_fn(model_args, model_kwargs)
        everything = jnp.arange(self._size)
        return lambda theta: lp(theta) + jnp.sum(ll(theta, everything))

    def pseudopriors(self, state) -> dict:
        """``{name: Pseudoprior}`` of ``state`` (``mcmc.last_state``; chain 0 when chains are
        vectorized): pass it as ``ModelSelection(models, pseudoprior=...)`` to run another
        chain (the exact sampler, more draws) on the same product space without refitting."""
        out = {}
        for name, g in zip(self.names, state.pseudopriors):
            if jnp.ndim(g.mean) == 2:
                g = jax.tree.map(lambda v: v[0], g)
            out[name] = g
        return out

    def pseudoprior_fit(self, state, *model_args, num_draws: int = 1000, rng_key=None, **model_kwargs) -> dict:
        """How well each model's pseudoprior fits its posterior: ``{name: PseudopriorFit}``
        (:func:`~subsample_mcmc.kernels.product_space.pseudoprior_fit`: Pareto ``k``, sd of the
        log weights, effective fraction; floats).  ``state`` is ``mcmc.last_state`` (or a state
        from :meth:`init`; chain 0 when chains are vectorized), ``model_args``/``model_kwargs``
        the data the chain ran on.  Read it by the rule ``pseudoprior="auto"`` applies: a model
        whose log-weight sd exceeds 1 nat, or 0.5 nat with ``k_hat > 0.7``, is one the chain
        sticks in (the model probabilities then rest on few switches; see
        :func:`model_posterior`'s effective draws).  Below an sd of about 0.5 nat the weights are
        nearly constant and ``k_hat`` alone is noise: a large ``k_hat`` there is no misfit.  Reads
        the data ``num_draws`` times per model."""
        self._setup(model_args, model_kwargs)
        key = jax.random.PRNGKey(0) if rng_key is None else rng_key
        out = {}
        for j, (name, kern, g, st) in enumerate(zip(self.names, self.kernels, state.pseudopriors,
                                                    state.inner_states)):
            z = st.z
            if jnp.ndim(g.mean) == 2:  # vectorized chains: chain 0
                g, z = jax.tree.map(lambda v: v[0], (g, z))
            kern._unravel = ravel_pytree(z)[1]

            def fit_one(k, g, args, kwargs, kern=kern):
                return pseudoprior_fit(k, self._log_joint(kern, args, kwargs), g, num_draws)

            fit = jit_with_data(fit_one, model_args, model_kwargs)(jax.random.fold_in(key, j), g)
            out[name] = PseudopriorFit(*(float(v) for v in fit))
        return out

    def _z(self, k, inner_states):
        z = {MODEL_SITE: k}
        for name, st in zip(self.names, inner_states):
            z.update({f"{name}{SITE_DIVIDER}{site}": v for site, v in st.z.items()})
        return z

    def sample(self, state, model_args, model_kwargs):
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        self._setup(model_args, model_kwargs)
        if self._vectorized:
            # chains one after another inside the program, not vmapped: under vmap the switch over the selected
            # model's move runs every model's move for every chain (and each race until the slowest chain's
            # stops): 8 chains' sweep on the DJIA's six ARCH orders took 320 ms racing, 82 ms exact vmapped, and
            # 58 and 16 ms so (benchmarks/results/arch_sweep_cost_chains8_vmap.md, arch_sweep_cost_chains8.md)
            return jax.lax.map(lambda s: self._sample_one(s, model_args, model_kwargs), state)
        return self._sample_one(state, model_args, model_kwargs)

    def _sample_one(self, state, model_args, model_kwargs):
        kernels, num = self.kernels, self.num_models
        if self._unravels is None:
            self._unravels = [ravel_pytree(st.z)[1] for st in state.inner_states]
        for kern, unravel in zip(kernels, self._unravels):
            kern._unravel = unravel
        key, key_pseudo, key_race = jax.random.split(state.rng_key, 3)
        k = state.z[MODEL_SITE]
        # 1. the unselected models' parameters from their pseudopriors
        with jax.named_scope("pseudoprior_draws"):  # names for a profile (jax.profiler)
            inner = []
            for j, (st, g) in enumerate(zip(state.inner_states, state.pseudopriors)):
                flat = ravel_pytree(st.z)[0]
                draw = pseudoprior_draw(jax.random.fold_in(key_pseudo, j), g).astype(flat.dtype)
                keep = k == j
                log_lik_sum = jnp.where(keep, st.log_lik_sum, jnp.nan).astype(st.log_lik_sum.dtype)
                inner.append(st._replace(z=self._unravels[j](jnp.where(keep, flat, draw)), log_lik_sum=log_lik_sum,
                                         i=state.i))

        # 2. the selected model's parameters by one RacingMH step (a real branch, except under vmap)
        lls = self._log_lik_fns(model_args, model_kwargs)

        def move(j):
            cv_fn = exact_fn = None
            if self.control_variates is not None and self.race_options["method"] != "exact":
                cv, constrain, unravel = (self.control_variates[self.names[j]], kernels[j]._subsampler.constrain,
                                          self._unravels[j])

                def cv_fn(x, x_new):  # the model race's feature proxy of model j, at both arms
                    # the current parameters' sum over the exactly-read points is the last model race's (the
                    # selected model's parameters have not moved since); the proposal's is unknown (NaN)
                    known = None if state.exact_sums is None else jnp.stack(
                        [state.exact_sums[j], jnp.full((), jnp.nan, state.exact_sums.dtype)])
                    return ArmControlVariates((state.feature_proxies[j],) * 2,
                                              tuple(cv.matrix(constrain(unravel(v))) for v in (x, x_new)),
                                              state.raced_indices, state.exact_indices, exact_sums=known)

                if state.exact_rows is not None:  # the proposal's sum from the rows gathered at init
                    def exact_fn(x, ll=lls[j]):
                        return ll(x, state.exact_indices, state.exact_rows)

            def fn(states):
                states = list(states)
                states[j] = kernels[j]._sample_one(states[j], model_args, model_kwargs, control_variate_fn=cv_fn,
                                                   exact_log_likelihood_fn=exact_fn)
                return tuple(states)
            return fn

        with jax.named_scope("mh_move"):
            inner = list(jax.lax.switch(k, [move(j) for j in range(num)], tuple(inner)))
        mh_evals = jnp.stack([st.num_likelihood_evals for st in inner])[k]
        mh_stage = jnp.stack([st.race_stage for st in inner])[k]
        accept = jnp.stack([jnp.asarray(st.accept_prob, jnp.float32) for st in inner])[k]
        inner = [st._replace(i=state.i + 1) for st in inner]

        # 3. the model index by a Gumbel-max race over the K models
        thetas = [ravel_pytree(st.z)[0] for st in inner]
        lp = jnp.stack([f(t) for f, t in zip(self._log_prior_fns(model_args, model_kwargs), thetas)])
        lg = jnp.stack([pseudoprior_log_density(t, g) for t, g in zip(thetas, state.pseudopriors)])
        proxies = [st.proxy for st in inner]
        exact = self.race_options["method"] == "exact"
        use_proxy = not exact and all(p is not None for p in proxies)
        log_pi = jnp.log(jnp.asarray(self.prior, lp.dtype))
        log_adjust = state.log_prior_adjustment.astype(lp.dtype)

        # each model's log-likelihood summed over the control variate's exactly-read points, at its parameters
        # after this sweep (NaN: not computed this sweep)
        unknown = None if state.exact_sums is None else jnp.full_like(state.exact_sums, jnp.nan)

        def draw_model(rewards_fns, sums, options):
            if self.max_race_fraction is not None:  # undecided at the budget: arm -1, the exact draw below
                raced = self._size - (0 if state.exact_indices is None else state.exact_indices.shape[0])
                options = dict(options, max_points=max(1, int(self.max_race_fraction * raced)))

            def rewards(idx):
                return jnp.stack([fn(t, idx) for fn, t in zip(rewards_fns, thetas)])

            d = sample_discrete(key_race, model_log_f0(log_pi, log_adjust, lp, lg, sums), rewards,
                                population_size=self._size, **options)
            return (d.value.astype(jnp.int32), d.race.num_points_computed, d.race.num_stages.astype(jnp.int32),
                    self._exact_candidates(d.race))

        # the models' full log-likelihood sums; with `computed` (bool[K]) only those models' (-inf for the others)
        def full_totals(computed=None):
            zero = lambda t: jnp.zeros((), t.dtype)  # noqa: E731
            totals = []
            for j, (ll, t) in enumerate(zip(lls, thetas)):
                def full(_, ll=ll, t=t):
                    return log_density_sum(zero, ll, t[None], self._size)[0]
                if computed is None:
                    totals.append(full(None))
                else:
                    minus_inf = jnp.full((), -jnp.inf, jax.eval_shape(full, None).dtype)
                    totals.append(jax.lax.cond(computed[j], full, lambda _, v=minus_inf: v, None))
            return jnp.stack(totals)

        # the exact draw (same key: the same Gumbel noise) from every model's full log-likelihood sum
        def by_exact(_):
            value = sample_discrete_exact(key_race, model_log_f0(log_pi, log_adjust, lp, lg, None), full_totals())
            return value, jnp.asarray(num * self._size, jnp.float32), jnp.zeros((), jnp.int32)

        if not exact and self.control_variates is not None:
            def by_race(_):
                cvs = [self.control_variates[name] for name in self.names]
                matrices = tuple(cv.matrix(kern._subsampler.constrain(unravel(t)))
                                 for cv, kern, unravel, t in zip(cvs, kernels, self._unravels, thetas))
                # every model's sum over the exactly-read points, here rather than in the race: the state keeps
                # them, and the next sweep's MH race of the model drawn reuses its current parameters' sum
                # (a state without the field, exact_sums=None: the race sums them itself, nothing is kept)
                sums = None
                if state.exact_sums is not None:
                    with jax.named_scope("race_exact_points"):
                        sums = jnp.sum(jnp.stack([fn(t, state.exact_indices, state.exact_rows)
                                                  for fn, t in zip(lls, thetas)]), axis=1)
                arm_cv = ArmControlVariates(state.feature_proxies, matrices, state.raced_indices, state.exact_indices,
                                            state.feature_table, exact_sums=sums)
                value, points, stages, candidates = draw_model(lls, None, dict(self.race_options,
                                                                                control_variate=arm_cv))
                # every model's log-likelihood at every point computed, plus its proxy (one more evaluation,
                # counted though it is a polynomial) at the raced ones
                n_exact = state.exact_indices.shape[0]
                return (value, ((2 * points - n_exact) * num).astype(jnp.float32), stages,
                        None if sums is None else sums.astype(unknown.dtype), candidates)
        elif use_proxy:
            point_cost = sum(kern._cost("point") + 1.0 for kern in kernels)

            def by_race(_):
                value, points, stages, candidates = draw_model(
                    [proxy_residual(ll, p, with_constant=True) for ll, p in zip(lls, proxies)],
                    proxy_sums(proxies, thetas), self.race_options)
                return value, points.astype(jnp.float32) * point_cost, stages, unknown, candidates

        if not exact and (use_proxy or self.control_variates is not None):
            # never more than exact: from warmup's decision on the chain draws k exactly when the race cost more.
            # check_decisions re-draws a raced k exactly (a diagnostic: its full pass is not counted in
            # num_likelihood_evals). The exact draw appears once in the program, for both uses.
            checked = (jnp.asarray(self.check_decisions > 0) & ~state.exact_model_draw
                       & (state.i % max(self.check_decisions, 1) == 0))
            def skip_race(_):
                return (jnp.full((), -1, jnp.int32), jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32), unknown,
                        jnp.ones((num,), bool))

            with jax.named_scope("model_race"):
                raced, race_points_cost, stages, exact_sums, survivors = jax.lax.cond(
                    state.exact_model_draw, skip_race, by_race, None)
            # a race that met a non-finite log-likelihood (-inf totals: models of probability 0) or used up its
            # budget (max_race_fraction) stops without a draw (-1) and an exact draw replaces it: after a budget,
            # over the models still in the race (its answer at T = N; survivors), their full passes counted. A
            # checked sweep also draws over every model (not counted) and compares the chain's draw with it.
            fallback = ~state.exact_model_draw & (raced < 0)
            computed = survivors | state.exact_model_draw | checked

            def exact_draws(_):
                totals = full_totals(computed)
                log_f0 = model_log_f0(log_pi, log_adjust, lp, lg, None)
                return (sample_discrete_exact(key_race, log_f0, totals),
                        sample_discrete_exact(key_race, log_f0, jnp.where(survivors, totals, -jnp.inf)))

            with jax.named_scope("model_exact_draw"):
                exact_value, survivors_value = jax.lax.cond(
                    state.exact_model_draw | checked | fallback, exact_draws,
                    lambda _: (jnp.full((), -1, jnp.int32),) * 2, None)
            chain_value = jnp.where(fallback, survivors_value, raced)
            value = jnp.where(state.exact_model_draw, exact_value, chain_value)
            cost = jnp.where(state.exact_model_draw, jnp.asarray(num * self._size, jnp.float32), race_points_cost)
            cost = cost + jnp.where(fallback, (jnp.sum(survivors) * self._size).astype(jnp.float32), 0.0)
            disagrees = checked & (jnp.where(exact_value >= 0, exact_value, k)
                                   != jnp.where(chain_value >= 0, chain_value, k))
        else:
            with jax.named_scope("model_exact_draw"):
                value, cost, stages = by_exact(None)
            checked = disagrees = jnp.zeros((), bool)
            exact_sums = unknown
        new_k = jnp.where(value >= 0, value, k).astype(jnp.int32)
        exact_draw, race_cost = self._choose_model_draw(state, cost, num)
        active = self.wang_landau & (state.i < self._num_warmup)
        a = wang_landau_update(state.log_prior_adjustment, new_k, state.i, active)
        return ModelSelectionState(
            i=state.i + 1, z=self._z(new_k, inner), inner_states=tuple(inner), pseudopriors=state.pseudopriors,
            log_prior_adjustment=a, num_likelihood_evals=(jnp.round(cost).astype(jnp.int32) + mh_evals).astype(jnp.int32),
            race_stage=stages, mh_race_stage=mh_stage.astype(jnp.int32), accept_prob=accept, rng_key=key,
            exact_model_draw=exact_draw, race_cost=race_cost, model_draw_checked=checked,
            model_draw_disagrees=disagrees, feature_proxies=state.feature_proxies,
            raced_indices=state.raced_indices, exact_indices=state.exact_indices, feature_table=state.feature_table,
            exact_sums=exact_sums, exact_rows=state.exact_rows)

    @staticmethod
    def _exact_candidates(race):
        """The models an exact draw must sum after ``race`` (:class:`~subsample_mcmc.racing.RaceResult`): a race
        truncated at its budget (``max_race_fraction``) leaves its survivors ``race.alive`` (an arm it eliminated
        was dropped on a bound that holds with probability ``1 - delta``, so the race run on to ``T = N`` would
        return the best survivor at the full sums, and so does the exact draw over them: the same error promise);
        any other race (decided, or stopped by a non-finite log-likelihood), every model."""
        return jnp.where(race.truncated, race.alive, True)

    def _choose_model_draw(self, state, cost, num):
        """Race or exact model draw, decided during warmup (as :class:`RacingMH` decides its MH
        step).  The race's evaluations per sweep are averaged over two windows: an early one
        (sweeps ``[W/10, W/10 + max(10, W/10))`` of ``W`` warmup sweeps), after which a race
        costing more than twice ``K N`` (the exact draw's cost) is dropped at once, so that a model
        race that cannot stop early does not multiply the warmup's cost; and the last quarter of
        warmup (at least 10 sweeps), after which a race costing more than ``K N`` is dropped.  From
        then on the chain draws ``k`` exactly (``exact_model_draw`` in the state)."""
        nw = self._num_warmup
        late = (3 * nw) // 4
        if nw - late < 10 or self.race_options["method"] == "exact":
            return state.exact_model_draw, state.race_cost
        early = nw // 10
        early_end = min(early + max(10, nw // 10), late)
        has_early = early_end - early >= 10
        t = state.i
        window = ((t >= late) & (t < nw)) | (has_early & (t >= early) & (t < early_end))
        race_cost = state.race_cost + jnp.where(window & ~state.exact_model_draw, cost, 0.0).astype(state.race_cost.dtype)
        exact_cost = num * self._size
        decide_early = has_early & (t == early_end - 1)
        exact = (state.exact_model_draw
                 | (decide_early & (race_cost / max(early_end - early, 1) > 2 * exact_cost))
                 | ((t == nw - 1) & (race_cost / (nw - late) > exact_cost)))
        return exact, jnp.where(decide_early, 0.0, race_cost).astype(state.race_cost.dtype)

    def postprocess_fn(self, model_args, model_kwargs):
        """The model index and each model's constrained values and deterministic sites,
        named ``"<name>.<site>"``."""
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        self._setup(model_args, model_kwargs)
        fns = [kern.postprocess_fn(model_args, model_kwargs) for kern in self.kernels]

        def fn(z):
            out = {MODEL_SITE: z[MODEL_SITE]}
            for name, f in zip(self.names, fns):
                prefix = f"{name}{SITE_DIVIDER}"
                sub = {key[len(prefix):]: v for key, v in z.items() if key.startswith(prefix)}
                out.update({prefix + site: v for site, v in f(sub).items() if site != _AUXILIARY_SITE})
            return out

        return fn

    @property
    def model(self):
        """The product-space model (``"model"`` drawn from the prior, then every candidate
        under its name's scope, on the full data): what ArviZ's ``from_numpyro`` traces for
        the observed data and replays for pointwise log-likelihoods (``"<name>.<site>"``, at
        each draw's parameters of that model: pseudoprior draws where it is not selected)."""
        names, models, prior = self.names, self._models, self.prior

        def product_space(*args, **kwargs):
            numpyro.sample(MODEL_SITE, dist.Categorical(probs=jnp.asarray(prior)))
            for name, m in zip(names, models):
                with handlers.scope(prefix=name, divider=SITE_DIVIDER):
                    full_data_model(m)(*args, **kwargs)

        return product_space

    def get_diagnostics_str(self, state):
        k = np.atleast_1d(np.asarray(state.z[MODEL_SITE]))
        shown = self.names[int(k[0])] if k.size == 1 else "/".join(self.names[int(v)] for v in k[:4])
        exact = float(jnp.mean(state.exact_model_draw))
        return "model {}, evals/step {}{}".format(
            shown, int(jnp.mean(state.num_likelihood_evals)),
            "" if exact == 0 or self.race_options["method"] == "exact" else ", exact model draw (racing cost more)")

    @property
    def default_fields(self):
        return ("z",)


class ModelPosterior(NamedTuple):
    """``p(k | y)`` from a :class:`ModelSelection` run (see :func:`model_posterior`)."""

    names: list
    probabilities: np.ndarray  # [K]
    stderr: np.ndarray  # [K] Monte Carlo standard errors (delta method, ArviZ MCSE of the influence series)
    visits: np.ndarray  # [K] draws in each model, all chains
    log_prior_adjustment: np.ndarray  # [C, K] the frozen Wang-Landau a of each chain
    #: Kish's effective number of the draws weighted by ``exp(-a_k)``, ``(sum w)^2 / sum w^2`` summed over
    #: chains: how many draws the estimate rests on (near the number of draws when Wang-Landau balanced the
    #: models, near 1 when one visit of a model whose ``a`` stayed low dominates)
    effective_draws: float = float("nan")

    def __repr__(self):
        rows = "\n".join(f"  {n:>12s}  {p:.4f} ± {s:.4f}  ({v} draws)"
                         for n, p, s, v in zip(self.names, self.probabilities, self.stderr, self.visits))
        return f"ModelPosterior(p(model | data) ± MCSE:\n{rows})"


def _kernel(mcmc) -> ModelSelection:
    kernel = getattr(mcmc, "sampler", None)
    if not isinstance(kernel, ModelSelection):
        raise TypeError(f"mcmc must be a numpyro.infer.MCMC run with a ModelSelection kernel, got sampler "
                        f"{type(kernel).__name__}")
    return kernel


def model_posterior(mcmc, num_batches: Optional[int] = None) -> ModelPosterior:
    r"""Posterior model probabilities of a :class:`ModelSelection` run, the Wang-Landau
    adjustment divided out: ``p(k | y) ∝ p~(k | y) exp(-a_k)`` per chain, averaged over
    chains, with Monte Carlo standard errors (the delta method: ArviZ's MCSE of the estimator's
    influence series, or batch means with ``num_batches`` batches per chain;
    :func:`~subsample_mcmc.kernels.product_space.model_probabilities`)."""
    kernel = _kernel(mcmc)
    models = np.asarray(mcmc.get_samples(group_by_chain=True)[MODEL_SITE])
    a = np.asarray(mcmc.last_state.log_prior_adjustment, np.float64).reshape(models.shape[0], kernel.num_models)
    p, se = model_probabilities(models, a, kernel.num_models, num_batches)
    visits = np.bincount(models.ravel(), minlength=kernel.num_models)
    effective = 0.0
    for chain in range(models.shape[0]):
        lw = -a[chain][models[chain]]
        w = np.exp(lw - lw.max())  # Kish's number is scale-free: the largest drawn weight is 1
        effective += float(w.sum() ** 2 / np.sum(w ** 2))
    post = ModelPosterior(list(kernel.names), p, se, visits, a, effective)
    few = [n for n, pk, v in zip(kernel.names, p, visits) if pk > 0.01 and v < _MIN_VISITS]
    if effective < _MIN_EFFECTIVE_FRACTION * models.size or few:
        why = (f"models {few} carry posterior probability from fewer than {_MIN_VISITS} draws each" if few else
               f"the draws weighted by exp(-a) amount to {effective:.1f} effective draws of {models.size}")
        warnings.warn(
            f"model_posterior: the estimate is not reliable: {why}. Wang-Landau did not balance the models "
            "during warmup (the frozen adjustment a is in .log_prior_adjustment), so the chain seldom visits "
            "some of them and a few visits decide the answer; the standard errors do not show it. Run a longer "
            "warmup (Wang-Landau's total adjustment grows like 100 log(num_warmup)), check that the chain "
            "moves between models (mcmc.get_samples()['model']), or compare chains.", UserWarning, stacklevel=2)
    return post


def conditional_samples(mcmc, model) -> dict:
    """Draws of ``p(theta_k | y, k)``: the sites of ``model`` (a name, or an index into the
    models' list; negative indices count from the end), without the ``"<name>."`` prefix, at the
    draws where it was selected (chains concatenated)."""
    kernel = _kernel(mcmc)
    k = len(kernel.names)
    if isinstance(model, str):
        j = kernel.names.index(model) if model in kernel.names else None
    else:
        try:  # ints, NumPy and JAX integer scalars; not floats or bools
            j = None if isinstance(model, (bool, np.bool_)) else operator.index(model)
        except TypeError:
            j = None
        j = j % k if j is not None and -k <= j < k else None  # Python's negative indexing: -1 is the last model
    if j is None:
        raise ValueError(f"model must be one of the models' names {kernel.names} or an index in [-{k}, {k - 1}] "
                         f"(negative indices count from the end), got {model!r}")
    samples = mcmc.get_samples()
    keep = np.asarray(samples[MODEL_SITE]) == j
    prefix = f"{kernel.names[j]}{SITE_DIVIDER}"
    return {k[len(prefix):]: np.asarray(v)[keep] for k, v in samples.items() if k.startswith(prefix)}
