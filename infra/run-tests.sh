#!/usr/bin/env bash
# The test suite as CI runs it: lint, start the local Kafka broker, run pytest, stop the broker.
# Long modes: MEMSTREAM_LONG_TESTS=1 raises trial counts (crash, property and fuzz tests).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${VENV:-.venv}/bin"

"$BIN/ruff" check .
# mypy over the package names, so types are checked across streams/, projections/ and api/.
VENV="${VENV:-.venv}" bash infra/typecheck.sh
# The dependency rules (pyproject.toml [tool.importlinter]): layers, and no import cycles.
"$BIN/lint-imports" --no-cache
# Docs, README and docstrings name only paths that exist.
"$BIN/python" infra/check_paths.py

# Headless Chromium for the audit page's browser test (skips without it unless
# MEMSTREAM_REQUIRE_BROWSER is set).
bash infra/install-chromium.sh
export MEMSTREAM_REQUIRE_BROWSER="${MEMSTREAM_REQUIRE_BROWSER:-1}"
# The framework adapters' tests fail instead of skipping when an extra is missing (`make setup`
# installs .[test,langgraph,openai-agents]).
export MEMSTREAM_REQUIRE_EXTRAS="${MEMSTREAM_REQUIRE_EXTRAS:-1}"

# CPersona 2.6.14, the reference, in its own venv: the compatibility tests run it and fail instead
# of skipping when it is missing.
bash infra/install-cpersona.sh
export MEMSTREAM_CPERSONA_PYTHON="${MEMSTREAM_CPERSONA_PYTHON:-$PWD/${CPERSONA_VENV:-.venv-cpersona}/bin/python}"
export MEMSTREAM_REQUIRE_REFERENCE="${MEMSTREAM_REQUIRE_REFERENCE:-1}"

# The tests' broker. Not MEMSTREAM_KAFKA_BOOTSTRAP: that one switches `memstream serve` to
# Kafka mode, and the embedded-mode tests start `memstream serve` too.
export MEMSTREAM_TEST_KAFKA_BOOTSTRAP="${MEMSTREAM_TEST_KAFKA_BOOTSTRAP:-127.0.0.1:9092}"
export MEMSTREAM_REQUIRE_KAFKA=1
trap 'bash infra/kafka-local.sh stop --purge || true' EXIT
bash infra/kafka-local.sh start

# -rs names every skipped test and why; --durations lists the slowest, so a CI log shows where its time went.
"$BIN/python" -m pytest -q -p no:cacheprovider -rs --durations=30 "$@"
