"""Execute every notebook under ``notebooks/`` headless, at its small (CI) size.

Contract for notebooks (see ``notebooks/racing_synthetic.ipynb`` for an example):

* with the environment variable ``SUBSAMPLE_MCMC_NOTEBOOK_SIZE=small`` a notebook
  must run a reduced, fast version of its experiment live (aim for well under 90 s);
* it must not need a display: use matplotlib's Agg backend (figures can be
  embedded with the benchmarks' ``experiments.plots.show``).

How a notebook is run here:

* kernel: a temporary kernelspec whose ``argv`` starts with ``sys.executable``, i.e.
  exactly the Python running pytest (the project's ``.venv`` under ``make test``),
  whatever ``python3`` kernelspecs exist on the machine;
* environment: the test process's, plus ``SUBSAMPLE_MCMC_NOTEBOOK_SIZE=small``
  (the kernel inherits it);
* working directory: the ``notebooks/`` directory (as when the notebook is opened in
  Jupyter), so paths in notebooks are relative to ``notebooks/``;
* at most ``CELL_TIMEOUT`` seconds per cell; the notebook file is not modified.

A failing cell fails the test with the cell's number, source and traceback.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
from nbclient.exceptions import CellExecutionError, CellTimeoutError  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = REPO / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT = 600  # seconds per cell: generous for a loaded 2-core CI machine
KERNEL_NAME = "subsample-mcmc-test-python"


@pytest.fixture
def kernel_name(tmp_path, monkeypatch):
    """A kernelspec that launches ``sys.executable`` (found through ``JUPYTER_PATH``)."""
    spec_dir = tmp_path / "jupyter" / "kernels" / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": f"test kernel ({sys.executable})",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    from jupyter_client.kernelspec import KernelSpecManager

    found = KernelSpecManager().get_kernel_spec(KERNEL_NAME)
    assert found.argv[0] == sys.executable, found.argv
    return KERNEL_NAME


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _failing_cell(nb) -> str:
    """``"cell <i>"`` for the first code cell with an error output, else ``"a cell"``."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and any(
            out.get("output_type") == "error" for out in cell.get("outputs", [])
        ):
            return f"cell {i}"
    return "a cell"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes(path, kernel_name, monkeypatch):
    monkeypatch.setenv("SUBSAMPLE_MCMC_NOTEBOOK_SIZE", "small")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        kernel_name=kernel_name,
        timeout=CELL_TIMEOUT,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
        allow_errors=False,
    )
    t0 = time.perf_counter()
    failure = None
    try:
        client.execute()
    except (CellExecutionError, CellTimeoutError) as err:
        failure = f"{path.name}: {_failing_cell(nb)} failed.\n{_ANSI.sub('', str(err))}"
    if failure is not None:
        pytest.fail(failure, pytrace=False)
    print(f"{path.name}: executed in {time.perf_counter() - t0:.1f} s")
