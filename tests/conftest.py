import gc
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

# JAX's default (asynchronous) dispatch, as users run it.  An earlier version ran
# computations inline to avoid a deadlock in the vectorized RacingMH init of the d = 50
# logistic zoo case; it did not: that deadlock came from the vmapped init program itself
# (inline or not, about two runs in three), and RacingMH now initialises vectorized chains
# one at a time (see RacingMH._init_states).

# JAX's persistent compilation cache, shared by the pytest-xdist workers and the notebook
# kernels (they inherit the environment). Most of the suite's time is XLA compilation, and
# many tests compile the same program from fresh closures (a new kernel per test): a hit
# skips the compile. The directory lives in the checkout (ignored by git), so a clean clone
# starts cold and gains only within one run; .ci/run puts it outside the clone (in the
# user's cache directory), where a CI machine that keeps it loads earlier runs' programs.
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
    (the model zoo compiles a kernel and a reference per case): a CI worker died in the
    zoo's d = 50 case ("node down: Not properly terminated", main at 45c1713). Counting
    the process's mappings after each test costs well under a millisecond."""
    yield
    counts = _memory_mappings()
    if os.environ.get("SUBSAMPLE_MCMC_TEST_MAPS_LOG") and counts is not None:
        with open(os.environ["SUBSAMPLE_MCMC_TEST_MAPS_LOG"], "a") as f:
            f.write(f"{os.getpid()} {counts[0]} {counts[1]} {request.node.nodeid}\n")
    if counts is not None and counts[0] > counts[1] // 3:
        jax.clear_caches()
        gc.collect()
