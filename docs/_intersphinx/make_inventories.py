"""Write the small intersphinx inventories this documentation links through.

The documentation is built where only package registries can be reached, so Sphinx
cannot download the inventories (``objects.inv``) of scikit-learn, PyTorch and skorch.
This script writes local inventories holding just the objects our pages and docstrings
name, each with the address of its page in the project's published documentation, so
that ``sphinx-build -n`` resolves them and the built pages link to the real thing.
``docs/conf.py`` reads only these files, so the build never waits on the network and
gives the same result everywhere.

Add an entry here when a page names a new object of one of these projects (the build
with ``-n -W`` in ``tests/test_cli_examples.py`` fails until you do), then run::

    python docs/_intersphinx/make_inventories.py
"""

from __future__ import annotations

import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

# project -> (name shown in the header, version, {object: (role, page relative to the root)})
INVENTORIES = {
    "sklearn": ("scikit-learn", "stable", {
        "sklearn.base.BaseEstimator": ("py:class", "modules/generated/{}.html#$"),
        "sklearn.base.TransformerMixin": ("py:class", "modules/generated/{}.html#$"),
        "sklearn.base.ClassNamePrefixFeaturesOutMixin": ("py:class",
                                                         "modules/generated/{}.html#$"),
        "sklearn.base.clone": ("py:function", "modules/generated/{}.html#$"),
        "sklearn.model_selection.GridSearchCV": ("py:class", "modules/generated/{}.html#$"),
        "sklearn.utils.estimator_checks.check_estimator": ("py:function",
                                                          "modules/generated/{}.html#$"),
        "sklearn.metrics.make_scorer": ("py:function", "modules/generated/{}.html#$"),
        "sklearn.datasets.load_digits": ("py:function", "modules/generated/{}.html#$"),
    }),
    "torch": ("PyTorch", "stable", {
        "torch.nn.Module": ("py:class", "generated/{}.html#$"),
        "torch.utils.data.Dataset": ("py:class", "data.html#$"),
    }),
    "skorch": ("skorch", "stable", {
        "skorch.callbacks.EarlyStopping": ("py:class", "callbacks.html#$"),
        "skorch.callbacks.Checkpoint": ("py:class", "callbacks.html#$"),
        "skorch.callbacks.LRScheduler": ("py:class", "callbacks.html#$"),
    }),
}


def inventory_bytes(project: str, version: str, objects: dict[str, tuple[str, str]]) -> bytes:
    """One inventory in Sphinx's version-2 format: a plain header, then zlib'd lines
    ``name domain:role priority uri display-name`` (``$`` in the uri stands for the name,
    ``-`` for a display name equal to it)."""
    header = (f"# Sphinx inventory version 2\n# Project: {project}\n# Version: {version}\n"
              "# The remainder of this file is compressed using zlib.\n")
    lines = "".join(f"{name} {role} 1 {page.format(name)} -\n"
                    for name, (role, page) in sorted(objects.items()))
    return header.encode() + zlib.compress(lines.encode())


def main() -> None:
    for key, (project, version, objects) in INVENTORIES.items():
        (HERE / f"{key}.inv").write_bytes(inventory_bytes(project, version, objects))


if __name__ == "__main__":
    main()
