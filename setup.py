"""Maps DESIGN.md's top-level folders into the one import namespace ``memstream``.

The repository keeps ``streams/``, ``projections/`` and ``api/`` at its top level so the tree
reads like the architecture; installed, they are ``memstream.streams`` and so on, so nothing
installs a top-level package called ``api``.

The typed Python client lives in ``api/client/`` (a face-side room of api/, under its import
rules) but is installed as ``memstream.client``, the name its users write; it is left out of
``memstream.api.*`` so that it has one identity (docs/client.md).
"""

from setuptools import find_namespace_packages, setup

ROOTS = ("streams", "projections", "api")
# Installed name -> folder, for packages that live inside a root under another name.
RENAMED = {"memstream.client": "api/client", "memstream.integrations": "api/integrations"}
SKIP = ["*__pycache__*"]
# ... and so are left out of memstream.api.*, to have one identity each.
RENAMED_AWAY = [f"{folder.replace('/', '.')}{tail}" for folder in RENAMED.values() for tail in ("", ".*")]

packages = [
    f"memstream.{name}"
    for name in find_namespace_packages(include=[f"{r}*" for r in ROOTS], exclude=[*SKIP, *RENAMED_AWAY])
]
for installed, folder in RENAMED.items():
    packages.append(installed)
    packages += [f"{installed}.{name}" for name in find_namespace_packages(where=folder, exclude=SKIP)]

setup(
    # Namespace discovery, so data folders (e.g. the embedder's vocabulary) ship as packages.
    packages=packages,
    package_dir={**{f"memstream.{root}": root for root in ROOTS}, **RENAMED},
    package_data={"": ["*.txt", "*.json", "*.html", "*.js", "*.css", "*.svg"]},
)
