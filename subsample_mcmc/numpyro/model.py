r"""From a NumPyro model to per-datum log-likelihoods at the indices a race reads.

The only place (with the kernels of this subpackage) that touches NumPyro internals.
A :class:`ModelSubsampler` inspects a model once and then evaluates, through NumPyro's
own handlers (``substitute``, ``trace`` and a plate-index messenger), with the model
code itself and no second hand-written copy of it:

* ``log_likelihood(values, idx)``: ``[len(idx)]`` per-datum log-likelihoods
  ``log p(y_n | theta)`` of the observed sites inside the data plate, for the data
  points ``idx`` only;
* ``log_prior(values)``: every other log-density term (latent sites, observed sites
  outside the data plate), evaluated on a single datum so that it costs O(1) in N;
* ``deterministic(values)``: the deterministic sites, as NUTS returns them.

Model contract
--------------
* **Plain models** -- ``with numpyro.plate("data", N): numpyro.sample("y", ..., obs=y)``.
  The data plate's indices are replaced by ``idx`` and every *per-datum argument* is
  indexed by ``idx`` along axis 0, so the model computes the likelihood of ``idx`` only.
  A per-datum argument is any leaf, at any depth of the positional or keyword arguments
  (dicts, lists, tuples, named tuples and other JAX pytrees are searched), whose leading
  dimension is N: a JAX array, a NumPy array (any float or int dtype, e.g. pandas
  ``.values``; converted with ``jnp.asarray``) or a python list of length N (converted
  to an array).  Python scalars, ``None`` and arrays of another leading size are passed
  unchanged.  Consequently

  - arrays of leading size N that are *not* per-datum data must not be passed as
    arguments (close over them instead);
  - per-datum data must not be closed over (read from a global), nor hidden in an
    object that is not a pytree: the kernels could not index it;
  - the model must be *subsample-consistent*: the log-likelihood of datum n may not
    depend on which other data points are evaluated with it, and nothing outside the
    data plate may depend on the per-datum arguments (statistics such as
    ``x.mean(0)``, ``x.std(0)``, ``len(y)`` computed inside the model would be computed
    on the subset).  Standardise and compute such statistics once, outside the model,
    and pass them as arguments (N itself as a python ``int``);
  - pandas ``DataFrame``/``Series`` arguments are refused: pass ``.to_numpy()``.

  ``ModelSubsampler`` checks this once, at construction, by comparing the model run on
  all the data (one jitted pass, like the prototype trace) with the model run on a
  3-point subset and on the 1-point subset ``log_prior`` uses: an observed site whose
  value does not shrink with the subset (closed-over data), a per-datum log-likelihood
  that differs from its full-data value (whole-data statistics), a log-density term
  outside the plate that changes with the points read, or a model that fails on a
  subset all raise a ``ValueError`` naming the site and the fix.  Deterministic sites
  outside the plate that change are computed on all the data (see below).
* **Models that index their data themselves** --
  ``with numpyro.plate("data", N) as idx: numpyro.sample("y", ..., obs=y[idx])``: the
  check above finds that indexing the arguments too would read the wrong rows, and
  the arguments are left alone (as for HMCECS models); the plate's indices do the work.
* **HMCECS models** -- ``numpyro.plate("data", N, subsample_size=b)`` with
  ``numpyro.subsample(data, event_dim=...)``: the plate's indices are replaced by ``idx``
  and NumPyro itself subsamples the data; arguments are left alone (NumPy arrays of
  leading size N become JAX arrays so that traced indices can index them).
  :func:`full_data_model` gives the same model with its subsample plates at full size;
  it is the kernels' ``model`` attribute, which ArviZ's ``from_numpyro`` and
  ``numpyro.infer.log_likelihood`` replay, so pointwise log-likelihoods have shape
  ``[chains, draws, N]``.
* One plate holding observed sites is the data plate; with several candidates,
  ``data_plate=`` picks one (its absence is an error naming the candidates).  Observed
  sites of the other plates are not subsampled: when they read per-datum arguments of
  the data plate, their log-density is evaluated on all the data at every step (O(N)).
* Not supported, each a ``ValueError`` naming the site: latent sample sites inside the
  data plate (local latent variables), and sites marked
  ``infer={"enumerate": "parallel"}`` (enumeration is not implemented; a dropped
  enumerated site would silently evaluate the likelihood at one random assignment).
  Marginalise local discrete variables by hand (``dist.MixtureSameFamily``) or use
  NumPyro's NUTS with enumeration / ``DiscreteHMCGibbs`` on all the data.
* Deterministic sites are returned as NUTS returns them: those inside the data plate
  (and those outside it that depend on the data) are computed by one run of the model
  on all the data per posterior draw (O(N), as with NUTS), the others on one datum.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.distributions import Delta, biject_to
from numpyro.infer.gibbs import GIBBS_SITES_KWARG
from numpyro.infer.mcmc import MCMCKernel
from numpyro.primitives import Messenger

from ..racing import METHODS, METHODS_NEEDING_RANGE, VARIANCES

try:  # where numpyro.infer.gibbs.conditioned puts the user's model
    from numpyro.infer.gibbs import _conditioned_model
except ImportError:  # pragma: no cover - other NumPyro versions
    _conditioned_model = None

__all__ = ["FullDataModel", "FullDataPlate", "InitOnceKernel", "ModelSubsampler", "PlateIndices", "full_data_model"]



@contextlib.contextmanager
def rephrased_warnings(prefix: str = "", suffix: str = ""):
    """Warnings raised inside the block are raised again, once it completes, as ``prefix + message + suffix``
    (same category): where a start ran (one more start outside ``pmap``'s trace) or which model it is."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        warnings.warn(f"{prefix}{w.message}{suffix}", w.category, stacklevel=3)


def outside_traces(setup):
    """Run a kernel method ``f(self, model_args, model_kwargs, ...)`` (its ``_setup``, ModelSelection's
    concrete pseudoprior fits) outside any enclosing trace when the data
    are concrete.  Under ``chain_method="parallel"`` NumPyro calls ``init`` inside ``pmap`` with the data
    closed over (concrete) but the trace current, so the model's prototype trace, the support checks and
    the discrete supports would be tracers: host-side checks fail on them, and a second ``run`` (from
    ``post_warmup_state``) met the first trace's leaked values in the cache.  ``jax.core.eval_context``
    evaluates them now, as under the other chain methods.  Traced data (a user's own ``jit``) stay traced."""

    @functools.wraps(setup)
    def wrapper(self, model_args, model_kwargs, *rest, **kwargs):
        if any(isinstance(v, jax.core.Tracer) for v in jax.tree.leaves((model_args, model_kwargs))):
            return setup(self, model_args, model_kwargs, *rest, **kwargs)
        with jax.core.eval_context():
            return setup(self, model_args, model_kwargs, *rest, **kwargs)

    return wrapper


class InitOnceKernel(MCMCKernel):
    """An ``MCMCKernel`` whose ``init`` runs once per chain.

    NumPyro's ``MCMC`` calls a kernel's ``init`` again before a phase that starts from a given
    state (``mcmc.run`` after ``mcmc.warmup``, or from ``post_warmup_state``) unless the kernel
    has a ``_sample_fn``, as NumPyro's own HMC and Gibbs kernels set in theirs.  Subclasses
    implement ``_init_states``; ``init`` calls it and sets ``_sample_fn``, so the second phase
    starts from the given state without a second mode search, check pass or proxy fit.

    Under ``chain_method="parallel"`` NumPyro calls ``init`` inside ``pmap``, so the start checks see
    tracers and their host-side warnings cannot be raised.  When the data are concrete and no
    ``init_params`` are given, ``init`` first runs the start once more outside the trace, on the key
    ``PRNGKey(0)`` (:meth:`_check_start_outside_trace`), and raises its warnings (and errors) there:
    one more start (mode search, checks) per kernel, before the chains' own.  Kernels that make
    such a concrete start themselves set ``_check_traced_start = False``.
    """

    _check_traced_start = True

    def init(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        """The initial state (NumPyro's ``MCMCKernel.init``; ``MCMC.run`` calls it).

        Args:
            rng_key: a PRNG key, or an array of ``C`` keys for ``C`` vectorised chains (the
                state then has a leading chain axis).
            num_warmup: the warmup steps that will follow (adaptation schedules scale with it).
            init_params: ``None`` (the kernel's ``init_strategy``), or a dict of the latent
                sites' values in the unconstrained space, with a leading chain axis for
                vectorised chains; the class docstring says how each kernel uses them.
            model_args, model_kwargs: the model's data arguments, as given to ``MCMC.run``.
        """
        traced = isinstance(rng_key, jax.core.Tracer)
        if traced and init_params is None and self._check_traced_start and not getattr(self, "_started", False):
            self._check_start_outside_trace(model_args, model_kwargs, num_warmup)
        state = self._init_states(rng_key, num_warmup, init_params, model_args, model_kwargs)
        if not traced:
            self._started = True
        self._sample_fn = self.sample
        return state

    @outside_traces
    def _check_start_outside_trace(self, model_args, model_kwargs, num_warmup):
        """A start on ``PRNGKey(0)`` outside ``pmap``'s trace, discarded: its checks' warnings are
        raised again with a note saying where they come from (see the class docstring)."""
        if any(isinstance(v, jax.core.Tracer) for v in jax.tree.leaves((model_args, model_kwargs))):
            return  # data traced by a user's own jit: nothing concrete to check
        with rephrased_warnings(suffix=" [chain_method='parallel': NumPyro starts each chain inside pmap's trace, "
                                       "where the start checks cannot warn; this warning comes from one more start, "
                                       "on PRNGKey(0), made outside it]"):
            self._init_states(jax.random.PRNGKey(0), num_warmup, None, model_args, model_kwargs)
        self._started = True

    def _init_states(self, rng_key, num_warmup, init_params, model_args, model_kwargs):
        raise NotImplementedError


def check_delta(delta) -> float:
    """``delta`` as a float in ``(0, 0.5)``, or a ``TypeError``/``ValueError`` naming it (a string such
    as ``"0.05"`` is refused, not converted; NumPy and JAX scalars are numbers)."""
    if isinstance(delta, (str, bytes, bool)) or np.ndim(delta) != 0:
        raise TypeError(f"delta must be a number in (0, 0.5), got {delta!r}; e.g. delta=0.05")
    try:
        float(delta)
    except (TypeError, ValueError) as err:
        raise TypeError(f"delta must be a number in (0, 0.5), got {delta!r}; e.g. delta=0.05") from err
    if not (0.0 < float(delta) < 0.5):
        raise ValueError(f"delta must lie in (0, 0.5), got {delta}; e.g. delta=0.05")
    return float(delta)


def check_method(method, kernel: str, reward_range=None) -> str:
    """``method`` if it names a race (:data:`~subsample_mcmc.racing.METHODS`) that ``kernel`` can run, else a
    ``ValueError`` naming it and the fix.  A bound that needs the rewards' range
    (:data:`~subsample_mcmc.racing.METHODS_NEEDING_RANGE`: ``"ebs"``, ``"lil_ucb"``) needs ``reward_range`` here:
    the kernels' rewards are computed on the fly and carry a control variate, so the race cannot take the range
    from an array of them (refused when the kernel is built, not inside ``run``)."""
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if method in METHODS_NEEDING_RANGE and reward_range is None:
        fix = (f"pass {kernel}(..., method={method!r}, reward_range=C) with C bounding the spread of every "
               "per-datum reward the races see (the log-likelihood differences l_i(theta') - l_i(theta) less "
               "the Taylor proxy's, over the states the chain visits), or "
               if kernel == "RacingMH" else f"{kernel} takes no reward_range; ")
        raise ValueError(f"method={method!r} needs the range C of each per-datum reward (its confidence width "
                         f"uses it): {fix}use method='normal' (the default) or 'normal_union', which estimate the "
                         "spread from the data read")
    return method


def check_race_options(first_batch, variance) -> tuple:
    """``(first_batch, variance)`` checked for a kernel's races: ``first_batch`` an integer >= 2 (a race's
    variance needs two rewards per arm; NumPy integers and integral floats such as ``50.0`` are taken),
    ``variance`` one of :data:`~subsample_mcmc.racing.VARIANCES`; else a ``TypeError``/``ValueError``
    naming the argument, raised when the kernel is built rather than inside ``run``."""
    if isinstance(first_batch, (str, bytes, bool)) or np.ndim(first_batch) != 0:
        raise TypeError(f"first_batch must be an integer >= 2, got {first_batch!r}; e.g. first_batch=50")
    if not (np.isfinite(float(first_batch)) and float(first_batch) == int(first_batch) and int(first_batch) >= 2):
        raise ValueError(f"first_batch must be an integer >= 2 (a race's variance needs two rewards), got "
                         f"{first_batch!r}; e.g. first_batch=50")
    if not isinstance(variance, str) or variance not in VARIANCES:
        raise ValueError(f"variance must be one of {VARIANCES}, got {variance!r}; e.g. variance='pairwise'")
    return int(first_batch), variance


def check_race_fraction(value, name: str = "max_race_fraction"):
    """``value`` as a float in ``(0, 1]`` or None, else a ``TypeError``/``ValueError`` naming ``name``."""
    if value is None:
        return None
    if isinstance(value, (str, bytes, bool)) or np.ndim(value) != 0:
        raise TypeError(f"{name} must be a share of the data in (0, 1] or None, got {value!r}; e.g. {name}=1/32")
    if not (0.0 < float(value) <= 1.0):
        raise ValueError(f"{name} must lie in (0, 1] (a share of the raced points) or be None (no budget), "
                         f"got {value!r}; e.g. {name}=1/32")
    return float(value)


def check_bool(value, name: str) -> bool:
    """``value`` as a bool if it is one (Python or NumPy), else a ``TypeError`` naming ``name``: a string such as
    ``"no"`` would read as true."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_model(model, name: str = "model"):
    """Refuse what is not a model function (a string, an array) when a kernel is built."""
    if not callable(model) or isinstance(model, type):
        raise TypeError(f"{name} must be a NumPyro model function (def model(x, y=None): ...), got {model!r}")


def check_init_params(init_params, shapes: dict, num_chains: Optional[int] = None, optional=(),
                      kernel: str = "RacingMH") -> None:
    """Raise a ``ValueError`` naming the site and the fix when ``init_params`` does not fit the model.

    ``shapes``: each latent site's shape in the unconstrained space (the space NumPyro's
    ``init_params`` live in); ``num_chains``: vectorised chains, each value then needs a leading
    axis of that length; ``optional``: sites that may be left out (started by the kernel)."""
    if init_params is None:
        return
    if not isinstance(init_params, dict):
        raise TypeError(f"init_params must be a dict {{latent site name: value in the unconstrained space}}, got "
                        f"{type(init_params).__name__}")
    unknown = sorted(set(init_params) - set(shapes))
    if unknown:
        raise ValueError(f"init_params has {unknown}, which are not latent sites {kernel} starts (those are "
                         f"{sorted(shapes)}); drop them (observed and deterministic sites take no start)")
    missing = sorted(set(shapes) - set(init_params) - set(optional))
    if missing:
        raise ValueError(f"init_params lacks the latent sites {missing}: give each of {sorted(shapes)} a value in "
                         "the unconstrained space, or pass no init_params")
    for k, v in init_params.items():
        want = tuple(shapes[k]) if num_chains is None else (int(num_chains),) + tuple(shapes[k])
        if tuple(np.shape(v)) != want:
            axis = "" if num_chains is None else f" (a leading axis of the {num_chains} chains: one start per chain)"
            raise ValueError(f"init_params[{k!r}] has shape {tuple(np.shape(v))}; site {k!r} needs shape {want}"
                             f"{axis}, in the unconstrained space")


def _base_distribution(fn):
    """``fn`` through its expand, to_event and mask wrappers."""
    while hasattr(fn, "base_dist"):
        fn = fn.base_dist
    return fn


class PlateIndices(Messenger):
    """Replace the indices of plate ``name`` (of full size ``size``) by ``indices``."""

    def __init__(self, fn=None, *, name: str, indices, size: int):
        self.name, self.indices, self.size = name, indices, size
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] == "plate" and msg["name"] == self.name:
            # the size the model gave the plate: numpyro scales the plate's sites by it over the
            # number of indices (``ModelSubsampler._per_datum`` divides that out)
            msg["size_in_model"] = msg["args"][0]
            msg["value"] = self.indices
            msg["args"] = (self.size, int(self.indices.shape[0]))


class FullDataPlate(Messenger):
    """Run subsampled plates (``plate(name, N, subsample_size=b)``) at their full size N.

    ``numpyro.subsample`` then returns the whole data and the plate's log-density scale
    is 1, so the model computes the full-data likelihood.

    Args:
        fn: the model (or use as a context manager).
        names: plate names to expand (default: every subsampled plate).
    """

    def __init__(self, fn=None, names=None):
        self.names = None if names is None else frozenset(names)
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] != "plate" or (self.names is not None and msg["name"] not in self.names):
            return
        size, sub = msg["args"]
        if sub is not None and sub != size:
            msg["args"] = (size, size)
            msg["value"] = jnp.arange(size)


class FullDataModel:
    """``model`` run under :class:`FullDataPlate`: the same model, whole data.

    It is what the kernels expose as ``kernel.model`` (read by ArviZ's ``from_numpyro``
    and usable with ``numpyro.infer.log_likelihood`` or ``Predictive``).  For models
    without a subsample plate it behaves exactly as ``model``.  It compares equal to
    ``model`` (NumPyro's ``Gibbs`` checks that its blocks share one model).
    """

    def __init__(self, model):
        self.model = model
        self.__wrapped__ = model
        self.__name__ = getattr(model, "__name__", type(self).__name__)
        self.__doc__ = getattr(model, "__doc__", None)

    def __call__(self, *args, **kwargs):
        with FullDataPlate():
            return self.model(*args, **kwargs)

    def __eq__(self, other):
        other = other.model if isinstance(other, FullDataModel) else other
        return self.model == other

    def __hash__(self):
        return hash(self.model)

    def __repr__(self):
        return f"FullDataModel({self.model!r})"


def full_data_model(model):
    """``model`` with its subsample plates at full size (see :class:`FullDataModel`)."""
    return model if model is None or isinstance(model, FullDataModel) else FullDataModel(model)


def _leading(x, n: int) -> bool:
    return hasattr(x, "shape") and len(np.shape(x)) >= 1 and np.shape(x)[0] == n


def _is_pandas(x) -> bool:
    return type(x).__module__.split(".")[0] == "pandas"


def _pandas_fix(full: str, leaf) -> str:
    """What to pass instead of the pandas object ``leaf`` given as argument ``full``."""
    kind = type(leaf).__name__
    if kind not in ("DataFrame", "Series"):  # the .values of a nullable dtype (Int64: an IntegerArray)
        try:
            dtype = np.dtype(getattr(leaf.dtype, "numpy_dtype", "float64")).name
        except TypeError:
            dtype = "float64"
        return (f"pass {full}.to_numpy(dtype={dtype!r}) after dropping missing values (.values of a nullable "
                "dtype such as Int64 is this pandas array)")
    fix = f"pass {full}.to_numpy() (or .values) instead"
    if kind == "DataFrame":  # a model that reads df["col"] needs the columns
        fix += (f", or the columns the model reads as separate arrays (e.g. x={full}['x'].to_numpy(), "
                f"y={full}['y'].to_numpy())")
    return fix


def _as_array(x, n: int):
    """A per-datum leaf as an array JAX can index with traced indices (else ``x``)."""
    if isinstance(x, list):
        try:
            arr = np.asarray(x)
        except (ValueError, TypeError):
            return x
        return jnp.asarray(arr) if arr.dtype.kind in "biufc" and arr.ndim >= 1 else x
    if isinstance(x, np.ndarray) and x.ndim >= 1 and x.shape[0] == n and x.dtype.kind in "biufc":
        return jnp.asarray(x)
    return x


def split_data(model_args, model_kwargs):
    """``(arrays, rebuild)``: the array leaves (NumPy or JAX, at least one dimension) of
    ``(model_args, model_kwargs)`` and ``rebuild(arrays) -> (model_args, model_kwargs)``
    with everything else (Python numbers, strings, ``None``, pandas objects) kept static."""
    leaves, treedef = jax.tree.flatten((tuple(model_args), dict(model_kwargs or {})))
    dynamic = [isinstance(v, (np.ndarray, jax.Array)) and np.ndim(v) > 0 for v in leaves]

    def rebuild(arrays):
        it = iter(arrays)
        return jax.tree.unflatten(treedef, [next(it) if dyn else v for v, dyn in zip(leaves, dynamic)])

    return [v for v, dyn in zip(leaves, dynamic) if dyn], rebuild


def jit_with_data(fn, model_args, model_kwargs, cache: Optional[dict] = None, name: Optional[str] = None):
    """``g(*xs) = fn(*xs, model_args, model_kwargs)``, jitted with the data arrays of
    ``model_args`` / ``model_kwargs`` passed as arguments of the compiled program
    (:func:`split_data`).

    A jitted closure over the data would embed every array in the program as a
    constant: at N = 1e5-1e6 that makes tracing and XLA compilation take seconds (the
    constants are folded, copied and hashed).

    With a ``cache`` dict (kept by the caller, e.g. a kernel) and a ``name``, the compiled
    program is kept under ``name`` and the arguments' static part (everything but the
    arrays): a later call with new data of the same shapes and dtypes reuses it (``fn``
    must then compute the same thing whenever it is called under that name; the first
    one is kept).  A kernel's ``init`` runs once per chain: without it every chain of
    ``chain_method="sequential"`` recompiled the mode search."""
    arrays, rebuild = split_data(model_args, model_kwargs)

    def call(arrays, *xs):
        return fn(*xs, *rebuild(arrays))

    call.__name__ = call.__qualname__ = getattr(fn, "__name__", "call")  # compile logs and profiles name fn

    jitted = None
    if cache is not None:
        key = _static_key(name, model_args, model_kwargs)
        if key is not None:
            jitted = cache.get(key)
            if jitted is None:
                jitted = cache[key] = jax.jit(call)
    if jitted is None:
        jitted = jax.jit(call)
    wrapped = functools.wraps(fn)(lambda *xs: jitted(arrays, *xs))
    wrapped.lower = lambda *xs: jitted.lower(arrays, *xs)
    return wrapped


def _static_key(name, model_args, model_kwargs):
    """A hashable key of ``name`` and the arguments' structure and static leaves (``None``
    when a static leaf cannot be hashed: then nothing is cached)."""
    leaves, treedef = jax.tree.flatten((tuple(model_args), dict(model_kwargs or {})))
    static = tuple(("array", np.shape(v), str(v.dtype)) if isinstance(v, (np.ndarray, jax.Array)) and np.ndim(v) > 0
                   else v for v in leaves)
    key = (name, treedef, static)
    try:
        hash(key)
    except TypeError:
        return None
    return key


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else ""


def _failing_site(exc: BaseException) -> Optional[str]:
    """Name of the NumPyro site statement during which ``exc`` was raised, if any."""
    tb, name = exc.__traceback__, None
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_globals.get("__name__") == "numpyro.primitives" and frame.f_code.co_name in (
                "sample", "deterministic", "factor", "param"):
            name = frame.f_locals.get("name", name)
        tb = tb.tb_next
    return name


class ModelSubsampler:
    """Inspect ``model`` once; evaluate its likelihood on subsets of the data plate.

    Args:
        model: a NumPyro model (a :class:`FullDataModel` is unwrapped).
        model_args, model_kwargs: arguments used to inspect the model.
        data_plate: name of the data plate when several plates hold observed sites.

    Raises:
        ValueError: no plate holds an observed site; several do and ``data_plate`` is
            missing or unknown; a latent site lives inside the data plate (local latents,
            ``obs_mask`` imputation); a site is marked for enumeration; a latent site has an
            improper (``ImproperUniform``) or ``Delta`` prior, or a support that moves with
            other latents; a pandas object is passed as per-datum data; the
            model is not subsample-consistent (see the module docstring: closed-over
            data, whole-data statistics computed inside the model, a prior that depends
            on the data).  Those raised once the data plate is known carry its size N as the
            attribute ``plate_size``.
    """

    def __init__(self, model, model_args=(), model_kwargs=None, data_plate: Optional[str] = None):
        if isinstance(model, FullDataModel):
            model = model.model
        self.model = model
        model_args = tuple(model_args)
        model_kwargs = dict(model_kwargs or {})
        try:
            proto = handlers.trace(handlers.seed(model, 0)).get_trace(*model_args, **model_kwargs)
        except Exception as e:  # noqa: BLE001 -- re-raised, naming missing data when that is the cause
            improper = self._improper_sites(model, model_args, model_kwargs) if isinstance(
                e, NotImplementedError) else []
            if improper:
                raise ValueError(
                    f"sites {improper} have improper priors (ImproperUniform, which has no sampler): the racing "
                    "kernels draw the model's prototype, their starts and their restarts from the prior. Give "
                    "each a proper prior (e.g. dist.Normal(0, 10) for a flat one on the real line), or use "
                    "NumPyro's NUTS for this model") from e
            unusable = self._unusable_argument(model_args, model_kwargs)
            if unusable:
                raise ValueError(f"the model fails on its data ({type(e).__name__}: {_first_line(e)}): "
                                 f"{unusable}") from e
            missing = self.nan_arguments(model_args, model_kwargs)
            if not missing:
                raise
            where = ", ".join(f"{name!r} at index {index}" for name, index in missing)
            raise ValueError(
                f"the model fails on its data ({type(e).__name__}: {_first_line(e)}), which hold NaN values: "
                f"{where} (the first along the leading axis); drop or impute rows with missing values "
                "before sampling") from e
        plates = {n: s for n, s in proto.items() if s["type"] == "plate"}
        observed_in = {}
        for name, site in proto.items():
            if site["type"] == "sample" and site["is_observed"]:
                for frame in site["cond_indep_stack"]:
                    observed_in.setdefault(frame.name, []).append(name)
        candidates = [p for p in plates if p in observed_in]
        if data_plate is None:
            if not candidates:
                observed = [n for n, s in proto.items() if s["type"] == "sample" and s["is_observed"]]
                if not observed:
                    raise ValueError(
                        "the model has no observed sample site: subsampling needs a likelihood "
                        "(numpyro.sample(..., obs=data)) inside a data plate"
                    )
                raise ValueError(
                    f"no plate contains the observed sites {observed}; wrap the likelihood in "
                    "`with numpyro.plate('data', N): ...` so the data can be subsampled"
                )
            if len(candidates) > 1:
                raise ValueError(
                    f"several plates contain observed sites: {candidates}; pass data_plate= "
                    "to choose the one to subsample"
                )
            data_plate = candidates[0]
        elif data_plate not in plates:
            raise ValueError(f"data_plate={data_plate!r} is not a plate of the model; plates: {list(plates)}")
        elif data_plate not in candidates:
            raise ValueError(f"data_plate={data_plate!r} contains no observed site; candidates: {candidates}")
        self.plate = data_plate
        size, sub = plates[data_plate]["args"]
        self.size = int(size)
        try:  # an error from here on names the plate's size to a caller comparing several models' plates
            self.subsample_style = sub is not None and sub != size
            self.data_sites = tuple(observed_in[data_plate])

            def in_plate(site):
                return any(f.name == data_plate for f in site["cond_indep_stack"])

            latent = {n: s for n, s in proto.items() if s["type"] == "sample" and not s["is_observed"]}
            enumerated = [n for n, s in latent.items() if (s.get("infer") or {}).get("enumerate")]
            if enumerated:
                where = "inside" if any(in_plate(latent[n]) for n in enumerated) else "outside"
                raise ValueError(
                    f"sites {enumerated} ({where} the data plate {data_plate!r}) are marked "
                    "infer={'enumerate': 'parallel'}: RacingMH and RacingGibbs do not enumerate discrete "
                    "sites, and a subsampled likelihood would be evaluated at one random assignment "
                    "instead of being marginalised. Marginalise them by hand, e.g. for a mixture "
                    "numpyro.sample('y', dist.MixtureSameFamily(dist.Categorical(probs=w), "
                    "dist.Normal(loc, scale)), obs=y), or use NumPyro's NUTS/HMC (which enumerate "
                    "them) or DiscreteHMCGibbs on all the data. A global discrete site (outside the "
                    "data plate) can instead be drawn by RacingGibbs: remove its 'enumerate' annotation."
                )
            local = [n for n, s in latent.items() if in_plate(s)]
            imputed = [n for n in local if n.endswith("_unobserved") and n[:-len("_unobserved")] in proto]
            if imputed:  # numpyro.sample(name, ..., obs=y, obs_mask=m) imputes the masked values as a latent site
                raise ValueError(
                    f"sites {imputed} are the missing observations that obs_mask= imputes, one latent value per "
                    f"masked datum inside the data plate {data_plate!r}: the racing kernels subsample the data "
                    "plate and cannot update them. Drop the rows with missing values before sampling, or leave "
                    "them out of the likelihood with numpyro.handlers.mask(mask=m) around the observed site "
                    "(no obs_mask=); or use NumPyro's NUTS to impute them.")
            if local:
                raise ValueError(
                    f"latent sites {local} are sampled inside the data plate {data_plate!r} (local "
                    "latent variables, one per datum): the racing kernels subsample the data plate and "
                    "cannot update them. Marginalise them out in the model (a discrete assignment e.g. "
                    "with dist.MixtureSameFamily), move them out of the plate, or use NumPyro's NUTS "
                    "(with infer={'enumerate': 'parallel'} for discrete sites) or DiscreteHMCGibbs on "
                    "all the data."
                )
            delta = [n for n, s in latent.items() if isinstance(_base_distribution(s["fn"]), Delta)]
            if delta:  # as NUTS, which refuses them too: a point mass has no density a move can explore
                raise ValueError(
                    f"latent sites {delta} have a Delta distribution (a point mass, not a parameter): a move "
                    "away from its value has probability 0 and the chain freezes. Compute the value with "
                    "numpyro.deterministic(name, value) instead; for a fixed value, pass it in as data.")
            self.latent_sites = tuple(latent)
            self.discrete_sites = tuple(n for n, s in latent.items() if s["fn"].support.is_discrete)
            self.continuous_sites = tuple(n for n in latent if n not in self.discrete_sites)
            self.transforms = {n: biject_to(latent[n]["fn"].support) for n in self.continuous_sites}
            self.prototype_trace = proto
            # deterministic sites computed by one run on all the data (see `deterministic`)
            self.full_data_deterministic = tuple(
                n for n, s in proto.items() if s["type"] == "deterministic" and in_plate(s))
            # plain plates: per-datum arguments are indexed (unless the model turns out to index
            # them itself with the plate's indices, `with plate(...) as idx: y[idx]`)
            self.index_arguments = not self.subsample_style
            self.full_data_prior_sites = ()  # observed sites outside the data plate read on all data
            self._check_argument_types(model_args, model_kwargs)
            self._check_data_lengths(proto, model_args, model_kwargs)
            self._check_subsample_consistency(model_args, model_kwargs)
            #: {site: support name} of the data sites whose support bounds move with the latent values
            self.moving_supports, moving_discrete, self.moving_observed = self._moving_supports(model_args,
                                                                                                model_kwargs)
            latent_moving = {k: v for k, v in {**moving_discrete, **self.moving_supports}.items()
                             if k in self.continuous_sites}
            if latent_moving:
                name, kind = next(iter(latent_moving.items()))
                raise ValueError(
                    f"latent site {name!r} has a support that moves with the other latent sites ({kind}: its "
                    "bounds change when they do, as b in b ~ Uniform(0, a) or b ~ Uniform(0, k + 1) with k "
                    "discrete): the racing kernels map each latent "
                    "site to the unconstrained space by a fixed transform, taken at the model's prototype, and "
                    "would sample it within the wrong bounds. Give it a fixed support, e.g. "
                    "u = numpyro.sample('u', dist.Uniform(0, 1)); b = numpyro.deterministic('b', a * u), or use "
                    "NumPyro's NUTS for this model.")
            self.moving_supports = {k: v for k, v in self.moving_supports.items() if k in self.data_sites}
            #: {site: support name} of the data sites whose support bounds move with the discrete sites
            self.moving_supports_discrete = {k: v for k, v in moving_discrete.items() if k in self.data_sites}
        except ValueError as e:
            e.plate_size = self.size
            raise

    @staticmethod
    def _improper_sites(model, model_args, model_kwargs) -> list:
        """Latent sites with an :class:`~numpyro.distributions.ImproperUniform` prior (one run of the
        model with NumPyro's uniform initial values in their place; ``[]`` if that run fails too)."""
        from numpyro.distributions import ImproperUniform
        from numpyro.infer.initialization import init_to_uniform

        try:
            tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), substitute_fn=init_to_uniform)).get_trace(
                *model_args, **model_kwargs)
        except Exception:  # noqa: BLE001 -- nothing to name
            return []
        return [n for n, s in tr.items() if s["type"] == "sample" and not s["is_observed"]
                and isinstance(_base_distribution(s["fn"]), ImproperUniform)]

    # -- argument handling --------------------------------------------------------
    def nan_arguments(self, model_args, model_kwargs, index: Optional[int] = None) -> list:
        """``[(argument name, first NaN index)]`` of the array arguments (at any depth)
        holding NaN values -- along their leading axis, or only at ``index`` when given."""
        found = []
        for name, value in self._argument_names(tuple(model_args), dict(model_kwargs or {})):
            for path, leaf in jax.tree_util.tree_flatten_with_path(value, is_leaf=_is_pandas)[0]:
                if _is_pandas(leaf) or isinstance(leaf, jax.core.Tracer) or not hasattr(leaf, "shape"):
                    continue
                arr = np.asarray(leaf)
                if arr.ndim < 1 or arr.dtype.kind not in "fc":
                    continue
                bad = np.isnan(arr.reshape(arr.shape[0], -1)).any(axis=1)
                if index is not None:
                    bad = bad[index:index + 1] if index < bad.shape[0] else bad[:0]
                if bad.any():
                    first = int(np.argmax(bad)) + (0 if index is None else index)
                    found.append((name + jax.tree_util.keystr(path), first))
        return found

    def _argument_names(self, model_args, model_kwargs):
        """``(name, value)`` of every argument, names from the model's signature."""
        fn = self.model
        if _conditioned_model is not None and isinstance(fn, functools.partial) and fn.func is _conditioned_model:
            fn = fn.args[0]
        try:
            params = [p for p in inspect.signature(fn).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            params = []
        names = [params[i].name if i < len(params) else f"args[{i}]" for i in range(len(model_args))]
        return list(zip(names, model_args)) + [(k, v) for k, v in model_kwargs.items() if k != GIBBS_SITES_KWARG]

    def _unusable_argument(self, model_args, model_kwargs) -> Optional[str]:
        """Why an argument JAX cannot read is the likely cause of a failed model run (``None`` if none is):
        a pandas object (a DataFrame, a Series, the array of a nullable dtype such as ``Int64``) or a NumPy
        array of dtype ``object`` (``DataFrame.values`` of columns of mixed types, e.g. float and bool)."""
        for name, value in self._argument_names(model_args, model_kwargs):
            for path, leaf in jax.tree_util.tree_flatten_with_path(value, is_leaf=_is_pandas)[0]:
                full = name + jax.tree_util.keystr(path)
                if _is_pandas(leaf):
                    return f"argument {full!r} is a pandas {type(leaf).__name__}, which JAX cannot read: {_pandas_fix(full, leaf)}"
                if isinstance(leaf, np.ndarray) and leaf.dtype == object:
                    return (f"argument {full!r} is a NumPy array of dtype object, which JAX cannot read (pandas "
                            f"gives one for DataFrame.values of columns of mixed types, e.g. float and bool): pass "
                            f"df[columns].to_numpy(dtype=float) as {full}")
        return None

    def _check_argument_types(self, model_args, model_kwargs):
        n = self.size
        for name, value in self._argument_names(model_args, model_kwargs):
            leaves = jax.tree_util.tree_flatten_with_path(value, is_leaf=_is_pandas)[0]
            for path, leaf in leaves:
                if _is_pandas(leaf) and _leading(leaf, n):
                    full = name + jax.tree_util.keystr(path)
                    fix = _pandas_fix(full, leaf)
                    raise ValueError(
                        f"argument {full!r} is a pandas {type(leaf).__name__} with N={n} rows: {fix}; "
                        "per-datum arrays are indexed along their leading dimension, which pandas objects "
                        "do not support"
                    )

    def _check_data_lengths(self, proto, model_args, model_kwargs):
        """Each observed site of the data plate holds one value per datum along the plate's dim: data
        arguments of different lengths (``X`` with N rows, ``y`` with fewer) would otherwise fail deep in a
        distribution's log-density with a broadcasting error that names neither."""
        plate = proto[self.plate]
        expected = int(plate["args"][1] if plate["args"][1] is not None else plate["args"][0])
        for name in self.data_sites:
            site = proto[name]
            frame = next(f for f in site["cond_indep_stack"] if f.name == self.plate)
            shape = jnp.shape(site["value"])
            dim = frame.dim - len(site["fn"].event_shape)
            if len(shape) < -dim or shape[dim] in (1, expected):
                continue
            lengths = sorted({(arg, int(np.shape(v)[0])) for arg, v in self._argument_names(model_args, model_kwargs)
                              if np.ndim(v) >= 1 and not _is_pandas(v)}, key=lambda t: t[1])
            listed = ", ".join(f"{arg!r}: {n}" for arg, n in lengths)
            raise ValueError(
                f"the observed site {name!r} holds {shape[dim]} values along the data plate {self.plate!r}, "
                f"whose size is {expected}: the data arguments differ in length along their first axis "
                f"({listed}); pass arrays with one row per datum (the same N) and the plate size N")

    def _map_data(self, fn, model_args, model_kwargs):
        n = self.size

        def is_leaf(v):
            return isinstance(v, list) and len(v) == n

        args = tuple(jax.tree.map(fn, a, is_leaf=is_leaf) for a in model_args)
        kwargs = {k: (v if k == GIBBS_SITES_KWARG else jax.tree.map(fn, v, is_leaf=is_leaf))
                  for k, v in model_kwargs.items()}
        return args, kwargs

    def _full_args(self, model_args, model_kwargs):
        """Arguments with NumPy/list per-datum leaves as JAX arrays, not indexed."""
        n = self.size
        return self._map_data(lambda x: _as_array(x, n), model_args, dict(model_kwargs or {}))

    def _slice(self, idx, model_args, model_kwargs, index: Optional[bool] = None, rows=None):
        """The arguments for the data points ``idx``: per-datum leaves indexed along axis 0
        (plain models), or only converted to JAX arrays (HMCECS-style models, and models
        that index their data with the plate's indices themselves; ``index`` overrides).
        ``rows``: :meth:`gather_rows` of the same ``idx``, put in place of the indexed leaves."""
        if not (self.index_arguments if index is None else index):
            return self._full_args(model_args, model_kwargs)
        n = self.size
        given = None if rows is None else iter(rows)

        def take(x):
            x = _as_array(x, n)
            if not _leading(x, n) or isinstance(x, list):
                return x
            return x[idx] if given is None else next(given)

        return self._map_data(take, model_args, dict(model_kwargs or {}))

    def gather_rows(self, idx, model_args=(), model_kwargs=None) -> Optional[tuple]:
        """The rows ``idx`` of every per-datum argument, in the order :meth:`log_likelihood` reads
        them: a caller that evaluates the likelihood at the same points many times (a control
        variate's exactly-read points, every race) gathers them once and passes them as ``rows``.
        ``None`` for a model that indexes its data itself (``numpyro.subsample``-style plates,
        ``y[idx]`` with the plate's indices): only the model can gather its rows then."""
        if not self.index_arguments:
            return None
        n, rows = self.size, []

        def take(x):
            x = _as_array(x, n)
            if _leading(x, n) and not isinstance(x, list):
                rows.append(x[idx])
            return x

        self._map_data(take, model_args, dict(model_kwargs or {}))
        return tuple(rows)

    def _moving_supports(self, model_args, model_kwargs) -> tuple:
        """Which continuous latent and observed data sites have support bounds that change when
        the latent values move (e.g. ``Uniform(0, theta)``, or ``Uniform(0, k + 1)`` with ``k``
        discrete): ``({site: support name} moving with the continuous sites, {site: support name}
        moving with the discrete sites)``.  Checked on a few data points: at the prototype, at a
        point shifted by 0.7 on the unconstrained scale, and with each discrete site set to the
        first and the last value of its support in turn; empty when the arguments are traced.
        Third: ``{site: support name}`` of the observed data sites with a bounded support whose
        observed *value* moves with the continuous sites (``obs=y - loc`` under a Weibull: the
        support of the likelihood in the parameters moves although the distribution's does not)."""
        try:
            unc = self.unconstrained_prototype()
            proto = self.constrain(unc)
            idx = jnp.arange(min(8, self.size))
            traces = [self._trace(self.constrain({k: v + shift for k, v in unc.items()}), idx, model_args,
                                  model_kwargs) for shift in (0.0, 0.7)]
            discrete_traces = []
            for name in self.discrete_sites:
                fn = self.prototype_trace[name]["fn"]
                if not fn.has_enumerate_support:
                    continue
                support = fn.enumerate_support(expand=True)
                discrete_traces += [self._trace({**proto, name: support[i]}, idx, model_args, model_kwargs)
                                    for i in (0, -1)]
        except Exception:  # noqa: BLE001 -- traced model arguments: nothing to compare
            return {}, {}, {}

        def moving(trs):
            out = {}
            for name in self.continuous_sites + self.data_sites:
                supports = [t[name]["fn"].support for t in trs]
                for attr in ("lower_bound", "upper_bound"):
                    if not hasattr(supports[0], attr):
                        continue
                    bounds = [np.asarray(getattr(sup, attr), np.float64) for sup in supports]
                    if any(b.shape != bounds[0].shape or not np.allclose(b, bounds[0], equal_nan=True)
                           for b in bounds[1:]):
                        out[name] = type(supports[0]).__name__.strip("_")
                        break
            return out

        def observed_moving():
            out = {}
            for name in self.data_sites:
                support = traces[0][name]["fn"].support
                while hasattr(support, "base_constraint"):  # to_event: the bounds of the base support
                    support = support.base_constraint
                bounds = [getattr(support, attr, None) for attr in ("lower_bound", "upper_bound")]
                if not any(b is not None and np.any(np.isfinite(np.asarray(b, np.float64))) for b in bounds):
                    continue
                values = [np.asarray(t[name]["value"], np.float64) for t in traces]
                if values[0].shape != values[1].shape or not np.allclose(*values, equal_nan=True):
                    out[name] = type(support).__name__.strip("_")
            return out

        return (moving(traces), (moving(traces[:1] + discrete_traces) if discrete_traces else {}),
                observed_moving())

    def _trace(self, values, idx, model_args, model_kwargs, rows=None):
        args, kwargs = self._slice(idx, model_args, dict(model_kwargs or {}), rows=rows)
        model = handlers.substitute(handlers.seed(self.model, 0), data=values)
        model = PlateIndices(model, name=self.plate, indices=idx, size=self.size)
        return handlers.trace(model).get_trace(*args, **kwargs)

    def full_trace(self, values, model_args=(), model_kwargs=None):
        """Trace of the model on all the data (subsample plates at full size) at ``values``."""
        args, kwargs = self._full_args(model_args, model_kwargs)
        model = handlers.substitute(handlers.seed(FullDataPlate(self.model), 0), data=values)
        return handlers.trace(model).get_trace(*args, **kwargs)

    def _plate_dim(self, site) -> int:
        return [f.dim for f in site["cond_indep_stack"] if f.name == self.plate][0]

    def _per_datum(self, site, m: int, tr):
        """``[m]`` log-likelihoods of the ``m`` data points of a data site in trace ``tr``, weighted
        by the model's own scale (``handlers.scale``: per-datum weights).  NumPyro's plate also
        scales its sites, by the size the model gave it over the number of indices
        (:class:`PlateIndices` records that size in the plate's entry of ``tr``, the trace the site
        comes from): that factor is divided out."""
        lp = site["fn"].log_prob(site["value"])
        if site.get("mask") is not None:
            lp = jnp.where(site["mask"], lp, 0.0)
        if site.get("scale") is not None:
            size_in_model = tr.get(self.plate, {}).get("size_in_model", m)
            plate_factor = size_in_model / m if size_in_model != m else 1.0
            lp = lp * (site["scale"] / plate_factor)
        dim = self._plate_dim(site)
        lp = jnp.broadcast_to(lp, jnp.broadcast_shapes(jnp.shape(lp), (m,) + (1,) * (-dim - 1)))
        lp = jnp.moveaxis(lp, dim, 0)
        return lp.reshape(m, -1).sum(1)

    def _prior_terms(self, tr) -> dict:
        """Log-density of every sample site outside the data plate's observed sites."""
        terms = {}
        for name, site in tr.items():
            if site["type"] != "sample" or name in self.data_sites:
                continue
            if site["is_observed"] or name in self.latent_sites:
                lp = site["fn"].log_prob(site["value"])
                if site.get("mask") is not None:
                    lp = jnp.where(site["mask"], lp, 0.0)
                scale = site.get("scale")
                terms[name] = jnp.sum(lp) if scale is None else scale * jnp.sum(lp)
        return terms

    # -- the setup checks (once, O(1) in N) ---------------------------------------------
    def _hint(self) -> str:
        return (
            f"The kernels evaluate the model on subsets of the data plate {self.plate!r}: every "
            "per-datum array must reach the model as a model argument (positional or keyword, "
            f"possibly inside a dict, list or tuple) whose leading dimension is N={self.size}, "
            "which the kernels index. Data read from a global variable (closed over), held in "
            "an object that is not a JAX pytree, laid out along another leading dimension, or "
            "sliced inside the model (an autoregression's obs=y[1:] with y[:-1] under a plate of "
            "N - 1 points) is not indexed: pass it as such an argument (for lags, build them "
            "outside the model: model(y_lag=y[:-1], y_next=y[1:]) under a plate of their length), or "
            "subsample it yourself with numpyro.subsample(data, event_dim=...) inside "
            "numpyro.plate(..., subsample_size=...)."
        )

    def _subset_evaluation(self, values, idx, model_args, model_kwargs, index=None):
        """Per-site per-datum log-likelihoods, prior terms and deterministic values on the
        subset ``idx`` (traceable), with the shape checks that name the offending site."""
        m, n = int(idx.shape[0]), self.size
        args, kwargs = self._slice(idx, model_args, dict(model_kwargs or {}), index=index)
        model = handlers.substitute(handlers.seed(self.model, 0), data=values)
        tracer = handlers.trace(PlateIndices(model, name=self.plate, indices=idx, size=n))
        try:
            tr = tracer.get_trace(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - re-raised with the hint
            site, done = _failing_site(e), [k for k in tracer.trace if tracer.trace[k]["type"] != "plate"]
            at = f" at site {site!r}" if site else (f" after site {done[-1]!r}" if done else "")
            statistics = (
                " A model that computes statistics over its per-datum arguments (x.mean(0), "
                "x.std(0), a standardisation) fails on one datum, which is how the kernels "
                "evaluate everything outside the data plate: standardise / compute such "
                "statistics once outside the model and pass the results as arguments."
                if m == 1 else "")
            raise ValueError(
                f"evaluating the model on {m} of the N={n} points of the data plate {self.plate!r} "
                f"failed{at} ({type(e).__name__}: {_first_line(e)}). {self._hint()}{statistics}"
            ) from e
        lls = {}
        for name in self.data_sites:
            site = tr[name]
            dim = self._plate_dim(site)
            event_dim = len(site["fn"].event_shape)

            def check_shape(what, shape, axis, name=name):
                if len(shape) >= -axis and shape[axis] not in (m, 1):
                    raise ValueError(
                        f"observed site {name!r} has {shape[axis]} entries along the data plate "
                        f"{self.plate!r} in its {what} (shape {shape}) when the model is evaluated "
                        f"on {m} of its N={n} points: its data is not indexed by the kernels. "
                        + self._hint()
                    )

            check_shape("observed value", jnp.shape(site["value"]), dim - event_dim)
            try:
                lp = site["fn"].log_prob(site["value"])
            except Exception as e:  # noqa: BLE001 - re-raised with the hint
                raise ValueError(
                    f"observed site {name!r} (observed value of shape {jnp.shape(site['value'])}) cannot "
                    f"be evaluated on {m} of the N={n} points of the data plate {self.plate!r} "
                    f"({type(e).__name__}: {_first_line(e)}). {self._hint()}"
                ) from e
            batch = tuple(site["fn"].batch_shape)
            if len(jnp.shape(lp)) > len(batch):
                raise ValueError(
                    f"observed site {name!r}: its observed value has shape {jnp.shape(site['value'])} but its "
                    f"distribution has batch shape {batch} and event shape {tuple(site['fn'].event_shape)}, so "
                    f"its log-density broadcasts to {jnp.shape(lp)} and mixes the data points (evaluated on {m} "
                    f"of the N={n} points of the data plate {self.plate!r}). Pass the observations with the "
                    "distribution's shape: a column vector y of shape (N, 1) as y.ravel() (or y[:, 0]), or "
                    "give the distribution the same trailing dimension."
                )
            check_shape("log-density", jnp.shape(lp), dim)
            lls[name] = self._per_datum(site, m, tr)
        det = {k: s["value"] for k, s in tr.items() if s["type"] == "deterministic"}
        return lls, self._prior_terms(tr), det

    def _evaluate(self, values, subsets, model_args, model_kwargs, index, reference):
        """One jitted evaluation (eager ops would compile one by one) of the model on all
        the data (``reference``) and on each subset; a subset's ``ValueError`` is returned,
        not raised."""
        n, errors = self.size, {}

        def evaluate(values, model_args, model_kwargs):
            out = {}
            if reference:
                tr = self.full_trace(values, model_args, model_kwargs)
                out["all"] = ({k: self._per_datum(tr[k], n, tr) for k in self.data_sites}, self._prior_terms(tr),
                              {k: s["value"] for k, s in tr.items() if s["type"] == "deterministic"})
            for key, idx in subsets.items():
                try:
                    out[key] = self._subset_evaluation(values, jnp.asarray(np.asarray(idx, np.int32)),
                                                       model_args, model_kwargs, index=index)
                except ValueError as e:
                    errors[key], out[key] = e, None
            return out

        return jax.device_get(jit_with_data(evaluate, model_args, model_kwargs)(values)), errors

    def _check_subsample_consistency(self, model_args, model_kwargs):
        """Compare the model evaluated on all the data with the model evaluated on a 3-point
        subset (in shuffled order) and on the 1-point subset ``log_prior`` uses: the
        per-datum log-likelihoods of the 3 points, the terms outside the data plate and the
        deterministic sites outside it must agree.  One compilation and one pass over the
        data, once, at construction (as the prototype trace).  A plain-plate model that
        only agrees when its arguments are *not* indexed indexes its data with the plate's
        indices itself (``with plate(...) as idx: y[idx]``): it is then run that way."""
        n = self.size
        if n < 4 or any(isinstance(v, jax.core.Tracer) for v in jax.tree.leaves((model_args, model_kwargs))):
            return
        a = [(4 * n) // 5, n // 5, n // 2]
        subsets = {"a": a, "one": [0]}
        with jax.ensure_compile_time_eval():
            proto = self.prototype_trace
            values = {k: proto[k]["value"] for k in self.latent_sites}
            if any(isinstance(v, jax.core.Tracer) for v in jax.tree.leaves(values)):  # traced setup
                proto = handlers.trace(handlers.seed(self.model, 0)).get_trace(*model_args, **model_kwargs)
                values = {k: proto[k]["value"] for k in self.latent_sites}
            if any(isinstance(v, jax.core.Tracer) for v in jax.tree.leaves(values)):
                return
            res, errors = self._evaluate(values, subsets, model_args, model_kwargs, self.index_arguments, True)
            ll_all, prior_all, det_all = res["all"]
            problem = self._likelihood_problem(res["a"], errors.get("a"), ll_all, a)
            if problem is not None and self.index_arguments:
                res2, errors2 = self._evaluate(values, subsets, model_args, model_kwargs, False, False)
                problem2 = self._likelihood_problem(res2["a"], errors2.get("a"), ll_all, a)
                if problem2 is None:
                    self.index_arguments, res, errors, problem = False, res2, errors2, None
                elif errors.get("a") is not None and errors2.get("a") is None:
                    # it fails on indexed arguments but runs on the plate's indices: it indexes its data
                    # itself, and that way its subsets disagree with the full data; say so
                    problem = problem2
        if problem is not None:
            raise problem

        def changed(u, v):
            u, v = np.asarray(u), np.asarray(v)
            return u.shape != v.shape or not np.allclose(u, v, rtol=1e-4, atol=1e-6 * (1 + np.nanmax(
                np.abs(np.where(np.isfinite(u), u, 0)), initial=0.0)), equal_nan=True)

        def check_prior(prior, m):
            moved = [k for k in prior if k in prior_all and changed(prior[k], prior_all[k])]
            # observed sites of another plate that read the indexed arguments: evaluated on
            # all the data (that plate is not subsampled), see `log_prior`
            observed = tuple(k for k in moved if k not in self.latent_sites)
            self.full_data_prior_sites = tuple(dict.fromkeys(self.full_data_prior_sites + observed))
            moved = [k for k in moved if k in self.latent_sites]
            if moved:
                raise ValueError(
                    f"{moved} (log-density terms outside the data plate {self.plate!r}) depends on the "
                    f"data points read ({[float(prior[k]) for k in moved]} when the model is evaluated "
                    f"on {m} point(s), {[float(prior_all[k]) for k in moved]} on all N={n}): the "
                    "kernels evaluate everything outside the plate on a single datum, so priors may "
                    "not use per-datum arguments (statistics such as y.std() or len(y)). Compute "
                    "such statistics outside the model and pass them as separate arguments (N as a "
                    "python int)."
                )

        check_prior(res["a"][1], len(a))
        if "one" in errors:
            raise errors["one"]
        check_prior(res["one"][1], 1)  # log_prior evaluates on one datum
        # deterministic sites outside the plate that depend on the data: computed on all data
        det_1 = res["one"][2]
        dependent = [k for k, v in det_all.items() if k not in self.full_data_deterministic and (
            k not in det_1 or changed(det_1[k], v))]
        self.full_data_deterministic = self.full_data_deterministic + tuple(dependent)

    def _likelihood_problem(self, result, error, ll_all, idx) -> Optional[ValueError]:
        """Why the per-datum log-likelihoods on the subset ``idx`` disagree with those on
        all the data (``None`` when they agree)."""
        if error is not None:
            return error
        for name in self.data_sites:
            sub, full = np.asarray(result[0][name], np.float64), np.asarray(ll_all[name], np.float64)[idx]
            scale = 1.0 + np.nanmax(np.abs(np.where(np.isfinite(full), full, 0.0)), initial=0.0)
            bad = ~np.isclose(sub, full, rtol=1e-3, atol=1e-5 * scale, equal_nan=True)
            if bad.any():
                j = int(np.argmax(bad))
                return ValueError(
                    f"the per-datum log-likelihood of observed site {name!r} at data index {idx[j]} is "
                    f"{sub[j]:.6g} when the model is evaluated on {len(idx)} of the N={self.size} points "
                    f"of the data plate {self.plate!r} but {full[j]:.6g} on all of them: it depends on "
                    "the other data points evaluated with it. The model computes statistics over its "
                    "per-datum arguments (e.g. x.mean(0), x.std(0), a standardisation, len(y)), but "
                    "the kernels evaluate it on subsets of the data. Standardise the data / compute "
                    "such statistics once outside the model and pass the results as arguments."
                )
        return None

    # -- the functions the kernels need ----------------------------------------------
    def log_likelihood(self, values, idx, model_args=(), model_kwargs=None, rows=None):
        """``[len(idx)]`` per-datum log-likelihoods at constrained ``values``; ``rows``: the
        per-datum arguments' rows at ``idx`` gathered beforehand (:meth:`gather_rows`)."""
        idx = jnp.asarray(idx)
        tr = self._trace(values, idx, model_args, model_kwargs, rows=rows)
        m = idx.shape[0]
        return sum(self._per_datum(tr[name], m, tr) for name in self.data_sites)

    def log_prior(self, values, model_args=(), model_kwargs=None):
        """All log-density terms outside the data plate's observed sites, evaluated on one
        datum (O(1) in N) -- except observed sites of other plates that read per-datum
        arguments of the data plate (``full_data_prior_sites``, found at construction):
        those plates are not subsampled, so their terms come from a run on all the data
        (O(N) per evaluation)."""
        tr = self._trace(values, jnp.zeros((1,), jnp.int32), model_args, model_kwargs)
        terms = self._prior_terms(tr)
        if self.full_data_prior_sites:
            full = self._prior_terms(self.full_trace(values, model_args, model_kwargs))
            terms.update({k: full[k] for k in self.full_data_prior_sites if k in full})
        total = jnp.zeros(())
        for term in terms.values():
            total = total + term
        return total

    def deterministic(self, values, model_args=(), model_kwargs=None):
        """Deterministic sites at constrained ``values``, as NUTS returns them.

        Sites inside the data plate (full plate shape) and sites outside it that depend
        on the data come from one run of the model on all the data (O(N), as NUTS's
        ``postprocess_fn``); the others from a run on one datum (O(1)).
        """
        tr = self._trace(values, jnp.zeros((1,), jnp.int32), model_args, model_kwargs)
        out = {n: s["value"] for n, s in tr.items() if s["type"] == "deterministic"
               and n not in self.full_data_deterministic}
        if self.full_data_deterministic:
            full = self.full_trace(values, model_args, model_kwargs)
            out.update({n: full[n]["value"] for n in self.full_data_deterministic if n in full})
        return out

    # -- unconstrained parameterisation ----------------------------------------------
    def constrain(self, unconstrained: dict) -> dict:
        return {k: self.transforms[k](v) for k, v in unconstrained.items()}

    def unconstrain(self, constrained: dict) -> dict:
        return {k: self.transforms[k].inv(v) for k, v in constrained.items()}

    def unconstrained_prototype(self) -> dict:
        """The continuous latent sites' prototype values (one model run) in the unconstrained space:
        the shapes ``init_params`` and a kernel's flat state take."""
        return self.unconstrain({k: self.prototype_trace[k]["value"] for k in self.continuous_sites})

    def log_abs_det_jacobian(self, unconstrained: dict):
        """The transforms' log-Jacobian at ``unconstrained``, each site's scaled by its scale
        (``handlers.scale`` around a latent site), as NumPyro's HMC/NUTS potential scales it (its
        log-det factor is a site under the same handlers): the same model, the same target."""
        total = jnp.zeros(())
        for k, u in unconstrained.items():
            t = self.transforms[k]
            term = t.log_abs_det_jacobian(u, t(u))
            scale = self.prototype_trace[k].get("scale")
            total = total + jnp.sum(term if scale is None else scale * term)
        return total
