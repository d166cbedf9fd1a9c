"""Where tasks/, backends/ and arch_docs/ live, and how they import as xlang.tasks / xlang.backends.

A wheel installs those folders inside the package (xlang/tasks, ...); a source checkout, an editable
install and the GPU machine (which runs straight from a copy of the repository) keep them beside it.
Either way they import under the `xlang.` prefix, so an install exposes no top-level `tasks` package.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
RESOURCE_FOLDERS = ("tasks", "backends", "arch_docs")


def root() -> Path:
    """The folder that holds tasks/, backends/ and arch_docs/."""
    return PACKAGE_DIR if (PACKAGE_DIR / "tasks").is_dir() else PACKAGE_DIR.parent


def folder(name: str) -> Path:
    assert name in RESOURCE_FOLDERS, name
    return root() / name


def _link(name: str) -> None:
    full = f"xlang.{name}"
    if full in sys.modules:
        return
    path = folder(name)
    spec = importlib.util.spec_from_file_location(
        full, path / "__init__.py", submodule_search_locations=[str(path)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[full] = module
    spec.loader.exec_module(module)


def forget_editable_checkout() -> None:
    """In a child of ours, stop an editable install of xlang serving what the package found first leaves out.

    Its finder (setuptools' __editable__ module, run from a .pth at start-up) maps xlang's submodules, xlang.tasks
    among them, to the checkout whenever the xlang on sys.path lacks them: a candidate's child, whose xlang is the
    runner package, would import the agent and the experts from there wherever it can see the checkout. A child
    needs no such finder (its PYTHONPATH names its xlang); other packages' editable finders stay."""
    for finder in list(sys.meta_path):
        module = sys.modules.get(getattr(finder, "__module__", "") or "")
        if "xlang" in (getattr(module, "MAPPING", None) or {}):
            sys.meta_path.remove(finder)


def import_module(dotted: str):
    """Import e.g. 'tasks.gemm' as xlang.tasks.gemm, from wherever the folders are. A name whose first part is
    no part of xlang is a language plugin's own module (its static build, registered under `xlang.backends`):
    imported by that name, from the site folders a child sees."""
    top = dotted.split(".", 1)[0]
    if top in RESOURCE_FOLDERS and root() != PACKAGE_DIR:
        _link(top)
    elif top not in RESOURCE_FOLDERS and importlib.util.find_spec(f"xlang.{top}") is None:
        return importlib.import_module(dotted)
    return importlib.import_module(f"xlang.{dotted}")
