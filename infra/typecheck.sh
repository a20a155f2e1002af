#!/usr/bin/env bash
# mypy over the installed package names. The editable install maps memstream.api/.projections/
# .streams onto the top-level folders through an import hook that mypy cannot follow, so a plain
# `mypy streams projections api` would see every cross-package import as Any. Here the three
# folders are linked under a throwaway `memstream/` root and checked as the packages they are.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${VENV:-.venv}/bin"
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
mkdir "$root/memstream"
for pkg in streams projections api; do
  ln -s "$PWD/$pkg" "$root/memstream/$pkg"
done
MYPYPATH="$root" "$BIN/mypy" --config-file pyproject.toml --cache-dir "$root/.mypy_cache" \
  -p memstream.streams -p memstream.projections -p memstream.api "$@"
