"""Sphinx configuration of the subsample_mcmc API reference.

Build it with ``python -m sphinx -W --keep-going -b html docs docs/_build/html``
(warnings are errors).  Standard extensions and the builtin ``alabaster`` theme only.
The pages document what each package's ``__all__`` exports (``automodule`` with
``:members:``), so a name added to or removed from ``__all__`` needs no edit here.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath("_ext"))

project = "subsample_mcmc"
author = "subsample_mcmc authors"
copyright = "subsample_mcmc authors"

try:
    from importlib.metadata import version as _version

    release = _version("subsample_mcmc")
except Exception:  # noqa: BLE001 -- not installed: build from the source tree
    sys.path.insert(0, os.path.abspath(".."))
    release = "0.1.0"
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "package_modules",  # docs/_ext/package_modules.py: one section per submodule in __all__
]

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
templates_path: list[str] = []

# Google-style ``Args:`` / ``Returns:`` / ``Example:`` sections.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_attr_annotations = True

autodoc_default_options = {
    "members": True,            # driven by the module's __all__ when it has one
    "member-order": "bysource",
    "show-inheritance": True,
    "undoc-members": True,      # every name in __all__, documented or not
    "no-value": True,           # constants (METHODS, POLICIES, ...) without their repr
}
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
autoclass_content = "class"     # the class docstring holds Args: (no NamedTuple "Create new instance")
# Optional heavy dependencies are imported for real (the docs extra installs the package);
# nothing is mocked, so a broken import fails the build instead of silently dropping a page.

nitpicky = False
suppress_warnings: list[str] = []

html_theme = "alabaster"
html_title = f"subsample_mcmc {release}"
html_theme_options = {
    "description": "Racing-subsampled discrete sampling and MH for large-N NumPyro posteriors",
    "fixed_sidebar": True,
}
html_static_path: list[str] = []


def _skip_class_data(app, what, name, obj, skip, options):
    """Leave out a class's data attributes (NamedTuple and dataclass fields).

    They are documented by the class's ``Attributes:`` section (or shown in its
    signature); ``:undoc-members:`` would otherwise describe every field a second time
    (a NamedTuple's "Alias for field number N" accessor, a dataclass's annotation),
    which Sphinx reports as a duplicate object description.  Methods and properties
    stay.
    """
    if what != "class":
        return None
    if callable(obj) or isinstance(obj, (property, classmethod, staticmethod)):
        return None
    return True


def setup(app):
    app.connect("autodoc-skip-member", _skip_class_data)
