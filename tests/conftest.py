"""The suite's tiers, sizes and compilation cache.

Tiers (the folder a test lives in; ``-m unit|statistical|e2e`` selects one):

* ``tests/unit/``: API, shapes, refusals and their messages, exact equivalences, compile
  counts, small statistical checks;
* ``tests/statistical/``: the model zoo, the heavy-tail battery, error rates with binomial
  intervals, MCSE z-tests against references;
* ``tests/e2e/``: the notebooks, the docs build, the command-line jobs, subprocess runs
  (x64, forced host devices);
* ``tests/bandits/``: unit tests of the bandit algorithms, with their statistical tests
  marked ``statistical``.

Sizes: ``SUBSAMPLE_MCMC_TEST_SIZE=ci`` (the default, what ``make test`` runs) or ``full``
(``make test-full``).  A statistical test reads its size from :func:`sizes.size` and states
in its docstring what a wrong implementation scores at the CI size.  Tests marked
``full_only`` run only at the full size: the model zoo's entries beyond its CI part, and
integration runs (mostly XLA compilation: tens of seconds each) whose path a cheaper test
covers at the CI size; a comment above each names that test.  ``smoke`` marks the part of the suite that
``.ci/run`` also runs on the newest stack (``make test-newest``).
"""

import gc
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

# XLA's default CPU options. Its cheapest compilation (LLVM -O0 without the expensive passes, which
# the bandit tests use through their own fast_compile) is about a quarter cheaper, but it is not
# result-neutral across programs: a proposal computed in a program of its own and the same proposal
# inside the kernel's step round differently (fused multiply-adds), and the bit-for-bit test of
# RacingMH against a textbook MH chain fails under it.

# JAX's persistent compilation cache, shared by the pytest-xdist workers and the notebook
# kernels (they inherit the environment). Many tests compile the same program from fresh
# closures (a new kernel per test): a hit skips the compile. The directory lives in the
# checkout (ignored by git), so a clean clone starts cold and gains only within one run;
# .ci/run puts it outside the clone (in the user's cache directory).
# SUBSAMPLE_MCMC_TEST_JAX_CACHE="" turns it off; a path puts it there.
_CACHE = os.environ.get(
    "SUBSAMPLE_MCMC_TEST_JAX_CACHE",
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".jax_cache"),
)
if _CACHE:
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", _CACHE)
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import jax  # noqa: E402
import pytest  # noqa: E402
import sizes  # noqa: E402

TIERS = ("unit", "statistical", "e2e")


def pytest_configure(config):
    for tier, what in (("unit", "API, refusals, exact equivalences, small checks (tests/unit, tests/bandits)"),
                       ("statistical", "error rates and z-tests against references (tests/statistical)"),
                       ("e2e", "notebooks, docs, command-line jobs, subprocesses (tests/e2e)")):
        config.addinivalue_line("markers", f"{tier}: {what}")


def pytest_collection_modifyitems(config, items):
    """Mark each test with its tier (its folder, or ``statistical`` where a bandit test says
    so), and skip the ``full_only`` tests at the CI size."""
    skip_full = pytest.mark.skip(reason="full size only: SUBSAMPLE_MCMC_TEST_SIZE=full (make test-full)")
    for item in items:
        parts = item.path.parts
        tier = next((t for t in TIERS if t in parts), None)
        if tier is None and not any(m.name == "statistical" for m in item.iter_markers()):
            tier = "unit"
        if tier is not None:
            item.add_marker(getattr(pytest.mark, tier))
        if not sizes.FULL and item.get_closest_marker("full_only") is not None:
            item.add_marker(skip_full)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled executables after each test module.

    A pytest-xdist worker runs many modules in one process; each XLA CPU executable keeps
    its own memory mappings, and after a few thousand compilations a worker crashed inside
    XLA's compiler (SIGSEGV / SIGABRT in ``backend_compile``, late in the suite, never in
    isolation: the process's memory-mapping limit, ``vm.max_map_count`` = 65530 here).
    Modules share no compiled programs, so clearing between them costs no recompilation
    that matters."""
    yield
    jax.clear_caches()
    gc.collect()


def _memory_mappings() -> tuple[int, int] | None:
    """(mappings this process holds, the kernel's per-process limit), or None off Linux."""
    try:
        with open("/proc/self/maps", "rb") as f:
            held = sum(1 for _ in f)
        with open("/proc/sys/vm/max_map_count") as f:
            limit = int(f.read())
    except (OSError, ValueError):
        return None
    return held, limit


@pytest.fixture(autouse=True)
def _release_compiled_programs_near_the_mapping_limit(request):
    """Within a module, drop the compiled executables once a third of the limit is held.

    The per-module clearing above is not enough for a module with many parametrized cases
    (the model zoo compiles a kernel and a reference per case). Counting the process's
    mappings after each test costs well under a millisecond."""
    yield
    counts = _memory_mappings()
    if os.environ.get("SUBSAMPLE_MCMC_TEST_MAPS_LOG") and counts is not None:
        with open(os.environ["SUBSAMPLE_MCMC_TEST_MAPS_LOG"], "a") as f:
            f.write(f"{os.getpid()} {counts[0]} {counts[1]} {request.node.nodeid}\n")
    if counts is not None and counts[0] > counts[1] // 3:
        jax.clear_caches()
        gc.collect()
