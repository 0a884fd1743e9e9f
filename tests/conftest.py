import gc
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")

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
