"""Maps DESIGN.md's top-level folders into the one import namespace ``memstream``.

The repository keeps ``streams/``, ``projections/`` and ``api/`` at its top level so the tree
reads like the architecture; installed, they are ``memstream.streams`` and so on, so nothing
installs a top-level package called ``api``.
"""

from setuptools import find_namespace_packages, setup

ROOTS = ("streams", "projections", "api")

setup(
    # Namespace discovery, so data folders (e.g. the embedder's vocabulary) ship as packages.
    packages=[
        f"memstream.{name}"
        for name in find_namespace_packages(include=[f"{r}*" for r in ROOTS], exclude=["*__pycache__*"])
    ],
    package_dir={f"memstream.{root}": root for root in ROOTS},
    package_data={"": ["*.txt", "*.json", "*.html"]},
)
