"""Maps DESIGN.md's top-level folders into the one import namespace ``memstream``.

The repository keeps ``streams/``, ``projections/`` and ``api/`` at its top level so the tree
reads like the architecture; installed, they are ``memstream.streams`` and so on, so nothing
installs a top-level package called ``api``.
"""

from setuptools import find_packages, setup

ROOTS = ("streams", "projections", "api")

setup(
    packages=[f"memstream.{name}" for name in find_packages(include=[f"{r}*" for r in ROOTS])],
    package_dir={f"memstream.{root}": root for root in ROOTS},
    package_data={f"memstream.{root}": ["**/*.json", "**/*.txt", "**/*.html"] for root in ROOTS},
)
