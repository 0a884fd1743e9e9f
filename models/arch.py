r"""Bayesian ARCH(q) models with Student-t innovations (Sec. 5.2 and App. C.2 of Chen &
Ghahramani 2016).

The model for a demeaned return series ``r_1 .. r_T`` (in percent):

    r_t = sigma_t z_t,   z_t ~ t_nu(0, 1) iid,   sigma_t^2 = alpha_0 + sum_{i=1}^q alpha_i r_{t-i}^2,
    alpha_i, nu ~ Gamma(1, 1) iid   (i = 0 .. q),                                    (Sec. 5.2)

for every order ``q`` of a candidate set ``Q`` (default ``{5, 10, 15, 20, 25, 30}``).  All
orders share the same ``N = T - max(Q)`` likelihood terms by conditioning on the first
``max(Q)`` observations, so their likelihoods are comparable.

**Student-t scaling.**  ``t_nu(0, 1)`` is the *standard* Student-t (scale 1, variance
``nu / (nu - 2)`` when ``nu > 2``), so ``sigma_t`` is a scale, not a standard deviation:

    log p(r_t | sigma_t, nu) = log Gamma((nu+1)/2) - log Gamma(nu/2) - 1/2 log(nu pi)
                               - 1/2 log sigma_t^2 - (nu+1)/2 log(1 + r_t^2 / (nu sigma_t^2)).

The standardised (unit-variance) t used by the ``arch`` package exists only for
``nu > 2``, while the Gamma(1, 1) prior puts ``1 - e^{-2}`` = 86% of its mass below
``nu = 2``; the standard t is defined for every ``nu > 0``.  The two give the same
likelihood under the reparameterisation ``alpha_i^{arch} = alpha_i nu / (nu - 2)``, so
maximum likelihoods (and BICs) are comparable with ``arch_model(..., dist="t")``.

**Parameterisation.**  The NumPyro models (:func:`arch_numpyro_model`, :func:`arch_models`)
use NumPyro's own unconstraining transform (``log`` for the Gamma sites).  The padded
functions below (:func:`log_likelihood_points`, :func:`fit_laplace`, used by the job's
maximum-likelihood check) put each order's parameters on the real line through the
softplus ``x = log(1 + exp(x'))`` (App. C.2).  A position is a padded vector
``u = (alpha_0', alpha_1' .. alpha_{max Q}', nu')`` of length ``max(Q) + 2``; order ``q``
uses the entries selected by its mask and ignores the others, so every order has the
same static shape (``jit``/``vmap`` friendly).  The log prior in ``u`` includes the
softplus Jacobian: ``log p(u) = sum_active [-softplus(u_k) + log sigmoid(u_k)]``.

**Data.**  :func:`load_returns` reads the Dow Jones Industrial Average 1885-2023 (``djia``,
the default, N = 37,930 returns) or the S&P 500 1950-2018 (``sp500-1950``), shipped as
compressed CSV in ``models/data``, the daily series shipped with the ``arch`` package
(``sp500``, ``nasdaq``, 1999-2018) or a user's CSV of prices or returns and returns demeaned log
returns in percent; :func:`simulate_arch` draws a series with a known order.
:func:`lag_matrix` stores ``y_t = (r_t, r_{t-1}^2, .., r_{t-max Q}^2)`` for every term,
so one row is everything datum ``t`` contributes: per-datum log-likelihoods are
row-wise and a race reads rows in any order.

The order ``q`` is chosen by :class:`~subsample_mcmc.ModelSelection` over
:func:`arch_models` (Carlin & Chib's product space with a racing model draw); the main job
is :mod:`subsample_mcmc.models.arch_job`.
"""

from __future__ import annotations

import math
import os
from typing import NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
from jax import lax
import numpy as np
from jax.scipy.special import gammaln

__all__ = [
    "DEFAULT_ORDERS", "SERIES", "SHIPPED", "DEFAULT_SERIES", "ReturnSeries", "ArchData", "load_returns", "simulate_arch",
    "validate_orders", "lag_matrix", "series_rows", "prepare", "order_mask", "constrain", "student_t_logpdf",
    "log_likelihood_points", "log_prior", "LaplaceFit", "fit_laplace", "arch_parameters", "arch_numpyro_model",
    "arch_models", "inverse_softplus",
]

DEFAULT_ORDERS = (5, 10, 15, 20, 25, 30)
#: real daily price series shipped with the ``arch`` package (``arch.data.<name>``)
SERIES = ("sp500", "nasdaq")
#: longer real series shipped with this package (``models/data``, sources in its ``regenerate.py``)
SHIPPED = {"djia": ("djia.csv.gz", "Close", "Dow Jones Industrial Average 1885-2023"),
           "sp500-1950": ("sp500_1950.csv.gz", "Adj Close", "S&P 500 1950-2018")}
#: the main job's default series: the longest real one
DEFAULT_SERIES = "djia"
_DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
_MIN_TERMS_PER_PARAMETER = 10


class ReturnSeries(NamedTuple):
    """A demeaned log-return series in percent, ``r_t = 100 (log p_t - log p_{t-1}) - mean``."""

    name: str
    returns: np.ndarray  # [T] float64
    dates: Optional[np.ndarray]  # [T] datetime64 or None
    mean: float  # the mean removed (percent)


class ArchData(NamedTuple):
    """What the samplers need: ``y`` rows ``(r_t, r_{t-1}^2 .. r_{t-max Q}^2)``, masks, and ``series``
    (the same returns as one ``(r_t, r_t^2)`` row per time, the lags included: row ``t + max Q`` is the
    time of ``y[t]``), which :func:`arch_numpyro_model` reads its subsampled rows from."""

    y: jax.Array  # [N, 1 + max Q] float32
    orders: tuple  # the candidate orders
    masks: jax.Array  # [D, max Q + 2] 0/1 masks of the active parameters of each order
    series: jax.Array  # [N + max Q, 2] float32: (r_t, r_t^2) from t = -max Q, the models' ``series`` argument


# ----------------------------------------------------------------------------- data


def _log_returns_from_prices(prices: np.ndarray, name: str) -> np.ndarray:
    if np.any(prices <= 0):
        i = int(np.argmax(prices <= 0))
        raise ValueError(f"{name}: prices must be positive to take log returns; row {i} holds {prices[i]}")
    return 100.0 * np.diff(np.log(prices))


def _check_finite(x: np.ndarray, name: str) -> None:
    bad = ~np.isfinite(x)
    if bad.any():
        raise ValueError(
            f"{name} contains {int(bad.sum())} NaN or infinite value(s) (first at position "
            f"{int(np.argmax(bad))}); remove or fill them before fitting (nothing is dropped silently)"
        )


def _read_csv(path: str, column: Optional[str], kind: Optional[str]):
    import pandas as pd

    if not os.path.exists(path):
        raise FileNotFoundError(f"data file {path!r} does not exist; pass --data "
                                f"{'|'.join(SHIPPED)}|{'|'.join(SERIES)}|simulated|PATH.csv")
    try:
        frame = pd.read_csv(path)
    except Exception as err:  # pandas raises many types for broken files
        raise ValueError(f"could not read {path!r} as CSV ({type(err).__name__}: {err})") from err
    if frame.shape[0] == 0 or frame.shape[1] == 0:
        raise ValueError(f"{path!r} holds no rows or no columns")
    price_names = ("adj close", "adj_close", "close", "price", "prices")
    return_names = ("return", "returns", "ret", "r", "log_return", "log_returns")
    lower = {c.lower().strip(): c for c in frame.columns}
    if column is not None:
        if column not in frame.columns:
            raise ValueError(f"column {column!r} is not in {path!r}; columns: {list(frame.columns)}")
        chosen = column
        if kind is None:
            kind = "returns" if column.lower().strip() in return_names else "prices"
    else:
        chosen = next((lower[n] for n in price_names if n in lower), None)
        if chosen is not None:
            kind = kind or "prices"
        else:
            chosen = next((lower[n] for n in return_names if n in lower), None)
            if chosen is not None:
                kind = kind or "returns"
        if chosen is None:
            numeric = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c])]
            if len(numeric) != 1:
                raise ValueError(
                    f"{path!r}: cannot tell which column holds the series (columns {list(frame.columns)}); "
                    "name it Close/Price (prices) or Return (returns), or pass column=..."
                )
            chosen = numeric[0]
            kind = kind or ("prices" if (frame[chosen] > 0).all() else "returns")
    if kind not in ("prices", "returns"):
        raise ValueError(f"kind must be 'prices' or 'returns', got {kind!r}")
    values = pd.to_numeric(frame[chosen], errors="coerce").to_numpy(dtype=np.float64)
    if np.isnan(values).any():
        raw = frame[chosen][np.isnan(values)].iloc[0]
        raise ValueError(
            f"{path!r}: column {chosen!r} has {int(np.isnan(values).sum())} missing or non-numeric "
            f"value(s) (first at row {int(np.argmax(np.isnan(values)))}: {raw!r}); clean the file"
        )
    dates = None
    for c in frame.columns:
        if c.lower().strip() in ("date", "datetime", "time", "timestamp"):
            dates = pd.to_datetime(frame[c], errors="coerce").to_numpy()
    return values, kind, dates, chosen


def load_returns(source: str = DEFAULT_SERIES, *, column: Optional[str] = None, kind: Optional[str] = None) -> ReturnSeries:
    """Demeaned daily log returns in percent of a real series or a CSV file.

    Args:
        source: ``"djia"`` (the default: Dow Jones Industrial Average, daily close,
            1885-02-16 to 2023-11-21, 37,930 returns) or ``"sp500-1950"`` (S&P 500, adjusted
            close, 1950-2018, 17,345 returns), both shipped in ``models/data`` (sources named
            in its ``regenerate.py``); ``"sp500"`` or ``"nasdaq"`` (the ``arch`` package's
            ``arch.data``, adjusted close, 1999-2018 daily); or a path to a CSV file.
        column: the CSV column to use (default: ``Adj Close``/``Close``/``Price`` as
            prices, else ``Return``/``Returns`` as returns, else the only numeric column).
        kind: ``"prices"`` (log returns are taken) or ``"returns"`` (used as given, in
            the file's units); inferred from the column name when omitted.

    Raises:
        FileNotFoundError / ValueError with the fix, for a missing or unreadable file,
        non-numeric or missing values, or non-positive prices.
    """
    if source in SHIPPED:
        filename, column, _ = SHIPPED[source]
        values, _, dates, _ = _read_csv(os.path.join(_DATA_DIR, filename), column, "prices")
        r = _log_returns_from_prices(values, source)
        dates = None if dates is None else dates[1:]
        name = source
    elif source in SERIES:
        import importlib

        frame = importlib.import_module(f"arch.data.{source}").load()
        prices = frame["Adj Close"].to_numpy(dtype=np.float64)
        _check_finite(prices, f"arch.data.{source}")
        r = _log_returns_from_prices(prices, source)
        dates = frame.index.to_numpy()[1:]
        name = source
    else:
        if not isinstance(source, (str, os.PathLike)):
            raise TypeError(f"source must be one of {tuple(SHIPPED) + SERIES} or a CSV path, got {source!r}")
        values, kind, dates, chosen = _read_csv(str(source), column, kind)
        if kind == "prices":
            r = _log_returns_from_prices(values, str(source))
            dates = None if dates is None else dates[1:]
        else:
            r = values
        name = os.path.basename(str(source))
    _check_finite(r, name)
    mean = float(np.mean(r))
    return ReturnSeries(name, r - mean, dates, mean)


def simulate_arch(
    num_obs: int,
    *,
    order: int = 10,
    alpha0: float = 0.2,
    alpha_sum: float = 0.6,
    nu: float = 6.0,
    seed: int = 0,
    burn_in: int = 1000,
) -> tuple[np.ndarray, np.ndarray]:
    """Simulate ``num_obs`` returns from an ARCH(``order``) with ``t_nu(0, 1)`` innovations.

    The lag coefficients decay linearly, ``alpha_i ∝ order + 1 - i``, and sum to
    ``alpha_sum`` (< 1: a stationary variance exists when ``nu > 2``), so the last lag
    is clearly non-zero and the true order is identifiable.

    Returns:
        ``(returns [num_obs], theta)`` with ``theta = (alpha_0, alpha_1..alpha_q, nu)``.
    """
    if int(order) != order or order < 1:
        raise ValueError(f"order must be a positive integer, got {order!r}")
    if not (0 < alpha_sum < 1) or alpha0 <= 0 or nu <= 0:
        raise ValueError("need alpha0 > 0, 0 < alpha_sum < 1 and nu > 0")
    if num_obs < 2:
        raise ValueError(f"num_obs must be >= 2, got {num_obs}")
    rng = np.random.default_rng(seed)
    w = np.arange(order, 0, -1, dtype=np.float64)
    alpha = alpha_sum * w / w.sum()
    total = num_obs + burn_in + order
    z = rng.standard_t(nu, size=total)
    r = np.zeros(total)
    r2 = np.zeros(total)
    for t in range(order, total):
        s = alpha0 + alpha @ r2[t - order:t][::-1]
        r[t] = math.sqrt(s) * z[t]
        r2[t] = r[t] * r[t]
    return r[-num_obs:], np.concatenate([[alpha0], alpha, [nu]])


def validate_orders(orders: Sequence[int]) -> tuple:
    """Check a candidate order set: distinct positive integers, at least two."""
    try:
        items = list(orders)
    except TypeError as err:
        raise ValueError(f"orders must be a list of positive integers, got {orders!r}") from err
    out = []
    for q in items:
        if isinstance(q, bool) or not isinstance(q, (int, np.integer, float, np.floating, str)):
            raise ValueError(f"orders must be positive integers, got {q!r} in {orders!r}")
        try:
            value = float(q)
        except ValueError as err:
            raise ValueError(f"orders must be positive integers, got {q!r} in {orders!r}") from err
        if not value.is_integer() or value < 1:
            raise ValueError(f"orders must be positive integers, got {q!r} in {orders!r}")
        out.append(int(value))
    if len(out) < 2:
        raise ValueError(f"order selection needs at least two candidate orders, got {orders!r}")
    if len(set(out)) != len(out):
        raise ValueError(f"orders must be distinct, got {orders!r}")
    return tuple(sorted(out))


def lag_matrix(returns, max_order: int) -> np.ndarray:
    """Rows ``y_t = (r_t, r_{t-1}^2, .., r_{t-max_order}^2)`` for ``t = max_order .. T-1``."""
    r = np.asarray(returns, dtype=np.float64)
    n = r.shape[0] - max_order
    cols = [r[max_order:]] + [r[max_order - i:max_order - i + n] ** 2 for i in range(1, max_order + 1)]
    return np.stack(cols, axis=1)


def series_rows(returns) -> np.ndarray:
    """``[T, 2]`` rows ``(r_t, r_t^2)``: the ``series`` argument of :func:`arch_numpyro_model`, where the
    window of rows ``t .. t + max_order`` holds :func:`lag_matrix`'s row ``t`` (its squared lags and its
    return, 1 + max_order contiguous rows)."""
    r = np.asarray(returns, dtype=np.float64)
    return np.stack([r, r * r], axis=1)


def order_mask(order: int, max_order: int) -> np.ndarray:
    """0/1 mask of the entries of the padded position ``u`` that order ``order`` uses."""
    m = np.zeros(max_order + 2)
    m[: order + 1] = 1.0
    m[-1] = 1.0
    return m


def prepare(returns, orders: Sequence[int] = DEFAULT_ORDERS) -> ArchData:
    """Validate a return series and candidate orders and build :class:`ArchData`.

    Raises:
        ValueError: non-finite returns, bad orders, or a series too short for the
            largest order (``T - max(Q)`` must be at least 10 per parameter).
    """
    orders = validate_orders(orders)
    r = np.asarray(returns, dtype=np.float64)
    if r.ndim != 1:
        raise ValueError(f"returns must be a 1-D series, got shape {r.shape}")
    _check_finite(r, "returns")
    q_max = max(orders)
    need = q_max + _MIN_TERMS_PER_PARAMETER * (q_max + 2)
    if r.shape[0] < need:
        raise ValueError(
            f"the series has {r.shape[0]} returns; the largest order {q_max} needs at least {need} "
            f"({q_max} to condition on plus {_MIN_TERMS_PER_PARAMETER} per parameter): use a longer "
            "series or smaller orders"
        )
    if np.std(r) == 0:
        raise ValueError("returns are constant; an ARCH model needs a varying series")
    y = lag_matrix(r, q_max)
    masks = np.stack([order_mask(q, q_max) for q in orders])
    return ArchData(jnp.asarray(y, jnp.float32), orders, jnp.asarray(masks, jnp.float32),
                    jnp.asarray(series_rows(r), jnp.float32))


# ------------------------------------------------------------------------ densities


def inverse_softplus(x):
    """``x' = log(exp(x) - 1)``, the inverse of the softplus."""
    x = np.asarray(x, dtype=np.float64)
    return x + np.log(-np.expm1(-x))


def constrain(u, mask):
    """``(alpha_0, alpha [max Q], nu)`` from a padded unconstrained position (softplus, masked)."""
    x = jax.nn.softplus(u) * mask
    return x[0], x[1:-1], x[-1]


def student_t_logpdf(r, scale2, nu):
    """``log t_nu(r / sigma) - log sigma`` with ``sigma^2 = scale2`` (standard t, scale 1)."""
    return (gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * jnp.log(nu * jnp.pi)
            - 0.5 * jnp.log(scale2) - 0.5 * (nu + 1.0) * jnp.log1p(r * r / (nu * scale2)))


def log_likelihood_points(u, mask, y):
    """Per-datum ``log p(r_t | r_{t-q:t-1}, alpha, nu)`` for the rows ``y`` ``[m, 1 + max Q]``."""
    alpha0, alpha, nu = constrain(u, mask)
    s = alpha0 + y[:, 1:] @ alpha
    return student_t_logpdf(y[:, 0], s, nu)


def log_prior(u, mask):
    """Gamma(1, 1) priors on the active softplus-transformed entries, with the Jacobian."""
    return jnp.sum(mask * (-jax.nn.softplus(u) + jax.nn.log_sigmoid(u)))


# -------------------------------------------------------------- MAP and Laplace fits


class LaplaceFit(NamedTuple):
    """Laplace approximations ``N(mu_j, L_j L_j^T)`` of every order (padded, App. C.2)."""

    mu: np.ndarray  # [D, P] MAP of the unconstrained position (padding 0)
    chol: np.ndarray  # [D, P, P] Cholesky factor of the covariance (identity on padding)
    log_posterior: np.ndarray  # [D] unnormalised log posterior at the MAP
    log_evidence: np.ndarray  # [D] Laplace estimate of log p(r | q)
    max_log_likelihood: np.ndarray  # [D] log-likelihood at the MAP


def fit_laplace(data: ArchData, *, max_iter: int = 100) -> LaplaceFit:
    r"""MAP of each order in the softplus space and its Laplace approximation, all orders
    at once (:func:`subsample_mcmc.kernels.laplace.fit_laplace`: safeguarded full-data
    Newton, then ``Sigma = (-nabla^2 log p(u | r, q))^{-1}`` at the MAP ``u_hat``).

    The orders share one padded position; an inactive entry gets the term
    ``-u^2/2`` (a unit Gaussian, decoupled from the rest), so its MAP is 0, its Laplace
    factor the identity, and the Laplace evidence of order ``q`` with ``d`` active
    parameters is ``log p(r, u_hat | q) + d/2 log 2 pi + 1/2 log det Sigma_active``.
    One compilation, vmapped over the orders; each Newton step one full-data Hessian.
    """
    from subsample_mcmc.kernels.laplace import fit_laplace as newton_laplace

    y = data.y
    q_max = max(data.orders)
    p = q_max + 2
    masks = jnp.asarray(data.masks, jnp.float32)
    var = float(np.var(np.asarray(y[:, 0])))
    starts = np.zeros((len(data.orders), p))
    for j, q in enumerate(data.orders):
        starts[j, 0], starts[j, 1:q + 1], starts[j, -1] = (inverse_softplus(0.3 * var), inverse_softplus(0.5 / q),
                                                           inverse_softplus(6.0))

    def one(u0, mask):
        def log_post(u):
            return (log_prior(u, mask) + jnp.sum(log_likelihood_points(u, mask, y))
                    - 0.5 * jnp.sum((1.0 - mask) * u * u))

        la, _ = newton_laplace(log_post, u0, max_steps=max_iter, tol=1e-6)
        return la, jnp.sum(log_likelihood_points(la.mode, mask, y))

    la, mll = jax.jit(jax.vmap(one))(jnp.asarray(starts, jnp.float32), masks)
    active = np.asarray(masks) > 0
    mu = np.where(active, np.asarray(la.mode, np.float64), 0.0)
    chol = np.asarray(la.scale_tril, np.float64)
    d = active.sum(1)
    log_evidence = np.asarray(la.log_evidence, np.float64) - 0.5 * (p - d) * math.log(2 * math.pi)
    return LaplaceFit(mu, chol, np.asarray(la.log_density, np.float64), log_evidence, np.asarray(mll, np.float64))


# ------------------------------------------------------------------- NumPyro model


def arch_parameters(order: int):
    """The sample sites ``alpha0``, ``alpha`` (``[order]``) and ``nu`` of :func:`arch_numpyro_model`, all
    Gamma(1, 1) a priori."""
    import numpyro
    import numpyro.distributions as dist

    alpha0 = numpyro.sample("alpha0", dist.Gamma(1.0, 1.0))
    alpha = numpyro.sample("alpha", dist.Gamma(1.0, 1.0).expand([order]).to_event(1))
    nu = numpyro.sample("nu", dist.Gamma(1.0, 1.0))
    return alpha0, alpha, nu


def _series_windows(series, idx, width: int):
    """``[m, width, 2]``: rows ``idx_k .. idx_k + width - 1`` of ``series`` for each index (one gather of
    contiguous windows)."""
    dims = lax.GatherDimensionNumbers(offset_dims=(1, 2), collapsed_slice_dims=(), start_index_map=(0,))
    return lax.gather(series, jnp.asarray(idx, jnp.int32)[:, None], dims, (width, series.shape[1]),
                      mode=lax.GatherScatterMode.CLIP)


def arch_numpyro_model(y, order: int, subsample_size: Optional[int] = None, series=None):
    """The ARCH(``order``) model of one order as a NumPyro model over rows of :func:`lag_matrix`.

    ``y[:, 0]`` is ``r_t`` and ``y[:, 1:]`` the squared lags; only the first ``order``
    lags are used.  Sites: ``alpha0``, ``alpha`` (``[order]``), ``nu`` (all
    Gamma(1, 1)) and ``obs`` in the data plate ``"data"`` -- so it runs with NUTS, with
    HMCECS, or with this package's :class:`~subsample_mcmc.numpyro.RacingMH`.

    Without ``series`` the plate is a plain one (``numpyro.subsample(y, event_dim=1)``): HMCECS's subsample
    reads its rows of ``y``, the racing kernels pass the rows of their points (and ``ModelSelection`` gathers
    its control variate's exactly-read rows once per chain), and a full-data pass reads ``y`` as it is.

    ``series`` (optional, :attr:`ArchData.series` of the same returns, ``[N + max Q, 2]``): the likelihood at
    a subset of the data (the racing kernels' points, HMCECS's subsample) then reads each term's row of ``y``
    from the ``1 + max Q`` contiguous rows of ``series`` that hold it, out of an array of ``2 (N + max Q)``
    numbers instead of ``N (1 + max Q)`` (on the DJIA 300 KB against 4.7 MB: random reads stay in cache);
    the likelihood at every point (``N`` indices) reads ``y`` in order as without it.  The values are the
    same either way (up to float rounding); a ``series`` of other returns than ``y``'s would give another
    likelihood at subsets, which the racing kernels' start-up check of subsets against the full data
    reports.  With ``series`` the model indexes ``y`` with the plate's indices itself, so the kernels cannot
    gather the exactly-read rows once per chain.
    """
    import numpyro
    import numpyro.distributions as dist

    y = jnp.asarray(y)
    if series is not None:
        series = jnp.asarray(series)
        lags = series.shape[0] - y.shape[0] if series.ndim == 2 else -1
        if series.ndim != 2 or series.shape[1] != 2 or lags != y.shape[1] - 1:
            raise ValueError(f"series must be the [N + max Q, 2] = [{y.shape[0] + y.shape[1] - 1}, 2] rows (r_t, r_t^2) "
                             f"of the returns y was built from, got shape {tuple(series.shape)}: pass "
                             "prepare(returns, orders).series with its y")
    alpha0, alpha, nu = arch_parameters(order)
    with numpyro.plate("data", y.shape[0], subsample_size=subsample_size) as idx:
        if series is None or idx.shape[0] == y.shape[0]:
            # without series, a plain plate: the rows of the subsample (HMCECS), all of y otherwise; the racing
            # kernels pass the rows of their points themselves (and gather a control variate's exactly-read
            # rows once per chain), and a full-data pass reads y as it is, not through a gather
            rows = numpyro.subsample(y, event_dim=1) if series is None else y[idx]
            # one matrix-vector product over every column (r_t and the lags past this order weighted 0): a product
            # with rows[:, 1:order + 1] copies those columns first, once per order; on the DJIA an exact
            # product-space sweep takes 1.49 ms this way against 2.58 ms (benchmarks/arch_sweep_cost.py)
            s = alpha0 + rows @ jnp.zeros(y.shape[1], alpha.dtype).at[1:order + 1].set(alpha)
            r = rows[:, 0]
        else:
            # window rows 0 .. lags - 1 hold r^2 at lags `lags` .. 1 (column 1), row `lags` holds r_t (column 0)
            windows = _series_windows(series, idx, lags + 1)
            w = jnp.zeros((lags + 1, 2), alpha.dtype).at[lags - order:lags, 1].set(alpha[::-1])
            s = alpha0 + windows.reshape(windows.shape[0], -1) @ w.reshape(-1)
            r = windows[:, lags, 0]
        numpyro.sample("obs", dist.StudentT(nu, 0.0, jnp.sqrt(s)), obs=r)


def arch_models(orders: Sequence[int] = DEFAULT_ORDERS) -> dict:
    """``{"arch<q>": model}``: :func:`arch_numpyro_model` of each candidate order, the candidates of
    :class:`~subsample_mcmc.ModelSelection` (they share the rows of :func:`lag_matrix` as data). Run them
    with ``mcmc.run(key, data.y)`` (``data = prepare(returns, orders)``), as the job does: the kernels pass
    the rows of their points, and ``ModelSelection`` gathers the control variate's exactly-read rows once per
    chain; ``mcmc.run(key, data.y, series=data.series)`` is the same model, its subsets' rows read from
    windows of the series by the model itself (:func:`arch_numpyro_model`)."""
    import functools

    return {f"arch{q}": functools.partial(arch_numpyro_model, order=int(q)) for q in validate_orders(orders)}


def arch_control_variates(y, orders: Sequence[int] = DEFAULT_ORDERS, *, exact_fraction: float = 0.2) -> dict:
    r"""``{"arch<q>": LinearFeatureControlVariate}`` for :func:`arch_models` on the rows ``y`` of
    :func:`lag_matrix`: the model race's control variate of App. C.2 in the features
    ``z_t = (alpha_0 + alpha^T r^2_{t-q:t-1}, nu)``, linear in ``x_t = (1, r^2_{t-1}, .., r^2_{t-q})``
    (each order its own lags: the third-order moments cost O(N (q + 1)^3) at init),
    with ``log p(r_t | z_t) = log t_nu(r_t; 0, sigma^2 = z_{t,0})``.  ``exact_fraction=0.2``: the 20% of
    terms with the largest proxy residuals are summed exactly in every race, as App. C.2 reads its
    outliers (on the DJIA it read fewer terms per sweep in all than 0.05 or 0.1 did; the job's figures
    are in ``benchmarks/results/arch_order_selection_djia.md``).

    Pass it as ``ModelSelection(arch_models(orders), control_variate=arch_control_variates(y, orders))``.
    """
    from subsample_mcmc.numpyro import LinearFeatureControlVariate

    y = np.asarray(y, dtype=np.float64)
    orders = validate_orders(orders)
    q_max = y.shape[1] - 1
    if max(orders) > q_max:
        raise ValueError(f"the rows of y hold {q_max} lags; the orders {orders} need {max(orders)}")

    def features(q):
        def fn(values):
            row0 = jnp.concatenate([jnp.reshape(values["alpha0"], (1,)), jnp.reshape(values["alpha"], (q,))])
            row1 = jnp.zeros(q + 1, row0.dtype).at[0].set(values["nu"])
            return jnp.stack([row0, row1])
        return fn

    def log_lik(z, r):
        return student_t_logpdf(r, z[0], z[1])

    def covariates(q):
        return np.concatenate([np.ones((y.shape[0], 1)), y[:, 1:q + 1]], axis=1)

    return {f"arch{q}": LinearFeatureControlVariate(features(q), log_lik, covariates(q), y[:, 0],
                                                    exact_fraction=exact_fraction) for q in orders}
