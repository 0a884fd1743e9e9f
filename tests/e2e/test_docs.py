"""The API reference builds without warnings, and every docstring example runs.

* :func:`test_api_reference_builds` builds ``docs/`` (Sphinx, HTML) with warnings as
  errors into a temporary directory, in a fresh interpreter, and fails listing the
  warnings.  Skipped when Sphinx is not installed (``pip install -e '.[docs]'``).
* :func:`test_docstring_examples` runs the ``>>>`` examples of one module of the
  installed package with the standard library's :mod:`doctest`
  (``ELLIPSIS | NORMALIZE_WHITESPACE``), one test per module.  Modules are found on
  disk without importing them: ``subsample_mcmc`` and its subpackages, plus
  ``subsample_mcmc.models`` (the repository's ``models/`` folder, which setuptools maps
  to that name; an editable install keeps it outside ``subsample_mcmc/``).  A module
  whose source holds no ``>>>`` has no test.  A module that needs a missing optional
  dependency (an extra such as ``models`` or ``bandits``) is skipped, naming it.
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import io
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
# Packages walked for docstring examples.  subsample_mcmc.models is listed as well
# because an editable install keeps it outside subsample_mcmc/ (setuptools package-dir).
ROOT_PACKAGES = ("subsample_mcmc", "subsample_mcmc.models")
OPTIONFLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _walk(package: str) -> dict[str, str]:
    """``{module name: source file}`` of ``package`` and everything below it.

    Uses the import system's specs only: the modules themselves are not imported.
    """
    spec = importlib.util.find_spec(package)
    if spec is None:
        return {}
    found = {package: spec.origin}
    for info in pkgutil.iter_modules(spec.submodule_search_locations or []):
        name = f"{package}.{info.name}"
        if info.ispkg:
            found.update(_walk(name))
        else:
            sub = importlib.util.find_spec(name)
            found[name] = sub.origin if sub is not None else None
    return found


def _modules_with_examples() -> list[str]:
    modules: dict[str, str] = {}
    for package in ROOT_PACKAGES:
        modules.update(_walk(package))
    names = []
    for name, origin in sorted(modules.items()):
        if origin and origin.endswith(".py") and ">>>" in Path(origin).read_text(encoding="utf-8"):
            names.append(name)
    return names


MODULES_WITH_EXAMPLES = _modules_with_examples()


def test_docstring_examples_are_found():
    # A walk that silently found nothing would make the per-module test vacuous.
    assert "subsample_mcmc.racing.schedule" in MODULES_WITH_EXAMPLES, MODULES_WITH_EXAMPLES
    assert all(not name.startswith("models.") for name in MODULES_WITH_EXAMPLES)


def _import_or_skip(name: str):
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if missing and missing.split(".")[0] != "subsample_mcmc":
            pytest.skip(f"{name} needs {missing!r}, which is not installed (an optional extra)")
        raise


@pytest.mark.parametrize("module_name", MODULES_WITH_EXAMPLES)
def test_docstring_examples(module_name):
    module = _import_or_skip(module_name)
    tests = [t for t in doctest.DocTestFinder(exclude_empty=True).find(module, module_name) if t.examples]
    assert tests, f"{module_name} has '>>>' in its source but doctest found no example in its docstrings"
    runner = doctest.DocTestRunner(optionflags=OPTIONFLAGS)
    report = io.StringIO()
    for test in sorted(tests, key=lambda t: t.name):
        runner.run(test, out=report.write)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, (
        f"{result.failed} of {result.attempted} docstring examples failed in {module_name}:\n"
        + report.getvalue())


def test_api_reference_builds(tmp_path):
    pytest.importorskip("sphinx", reason="sphinx is not installed (pip install -e '.[docs]')")
    cmd = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-E", "-q", "-b", "html",
           "-d", str(tmp_path / "doctrees"), str(DOCS), str(tmp_path / "html")]
    # A fresh interpreter run from tmp_path: the installed package is documented (not
    # whatever the working directory happens to shadow), and autodoc imports it anew.
    proc = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    lines = (proc.stdout + proc.stderr).splitlines()
    flagged = re.compile(r"\b(WARNING|ERROR|CRITICAL|SEVERE)\b")
    warnings = [line for line in lines if flagged.search(line)]
    other = "\n".join(line for line in lines if not flagged.search(line)).strip()
    assert proc.returncode == 0, (
        f"`{' '.join(cmd)}` failed (exit {proc.returncode}) with {len(warnings)} warnings:\n"
        + "\n".join(warnings) + (f"\n\nOther output (tracebacks):\n{other[-20000:]}" if other else ""))
    assert (tmp_path / "html" / "index.html").is_file()
