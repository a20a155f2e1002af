#!/usr/bin/env bash
# The reference implementation, CPersona 2.6.14, in a venv of its own (.venv-cpersona, or
# $CPERSONA_VENV), pinned by infra/cpersona-reference.txt. Tests that compare with CPersona
# (tests/system/test_acl.py) and the side-by-side benchmarks run it from there. Its own venv
# because its dependencies (click, starlette, uvicorn) are pinned differently from memstream's.
# Idempotent: does nothing when the venv already holds the pinned set.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV_DIR="${CPERSONA_VENV:-.venv-cpersona}"
PINS=infra/cpersona-reference.txt
STAMP="$VENV_DIR/.installed"
if [ -f "$STAMP" ] && cmp -s "$PINS" "$STAMP"; then
  exit 0
fi
"${PYTHON:-python3}" -m venv "$VENV_DIR"
"$VENV_DIR/bin/pip" install --quiet --upgrade pip==26.3
"$VENV_DIR/bin/pip" install --quiet -r "$PINS"
"$VENV_DIR/bin/python" -c "import cpersona.acl"
cp "$PINS" "$STAMP"
echo "install-cpersona: CPersona 2.6.14 in $VENV_DIR"
