"""``.. package-modules:: package.name``: one section per submodule the package exports.

Reads the package's ``__all__`` and, for every entry that is a submodule, emits a
section titled with the module's name holding ``.. automodule:: package.name.sub``
(with the project's ``autodoc_default_options``, so ``:members:`` follows that module's
own ``__all__``).  Adding or removing a submodule from ``__all__`` therefore needs no
edit to the ``.rst`` pages.  Options:

``:exclude: a, b``   submodule names to leave out.
"""

from __future__ import annotations

import importlib
import types

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

logger = logging.getLogger(__name__)


def exported_submodules(package_name: str) -> list[str]:
    """Full names of the submodules listed in ``package_name.__all__``, in its order."""
    package = importlib.import_module(package_name)
    names = []
    for name in getattr(package, "__all__", ()):
        value = getattr(package, name, None)
        if isinstance(value, types.ModuleType) and value.__name__.startswith(package_name + "."):
            names.append(value.__name__)
    return names


class PackageModules(SphinxDirective):
    required_arguments = 1
    has_content = False
    option_spec = {"exclude": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        package_name = self.arguments[0].strip()
        exclude = {s.strip() for s in self.options.get("exclude", "").split(",") if s.strip()}
        try:
            submodules = exported_submodules(package_name)
        except Exception as err:  # noqa: BLE001 -- report it as a (build-failing) warning
            logger.warning("package-modules: cannot import %s: %s: %s", package_name,
                           type(err).__name__, err, location=self.get_location())
            return []
        self.env.note_dependency(importlib.import_module(package_name).__file__)
        lines: list[str] = []
        for full in submodules:
            short = full.rsplit(".", 1)[1]
            if short in exclude:
                continue
            title = f"``{short}``"
            lines += [title, "-" * len(title), "", f".. automodule:: {full}", ""]
        container = nodes.section()
        container.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source=f"<package-modules {package_name}>"),
                                 container)
        return container.children


def setup(app):
    app.add_directive("package-modules", PackageModules)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
