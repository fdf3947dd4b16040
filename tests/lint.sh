#!/usr/bin/env bash
# Lint and stub check: ruff (lint rules and formatting) over python/ tests/ benchmarks/ examples/,
# then mypy's stubtest of python/ferrocorn/_ferrocorn.pyi against the INSTALLED extension.
#
#   bash tests/lint.sh [VENV]
#
# VENV: a virtualenv with the ferrocorn wheel installed (run_all.sh's target/venv-test-python3,
# say); it is created if missing, but stubtest then fails until the wheel is installed into it.
# Without VENV, `python` on PATH is used as it is. tests/requirements-lint.txt (pinned ruff and
# mypy) is installed into whichever it is.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ $# -ge 1 ]; then
    [ -x "$1/bin/python" ] || python3 -m venv "$1"
    PY="$(cd "$1" && pwd)/bin/python"
else
    PY=python
fi
"$PY" -m pip install --quiet -r tests/requirements-lint.txt

echo "== ruff check"
"$PY" -m ruff check python tests benchmarks examples packaging
echo "== ruff format --check"
"$PY" -m ruff format --check python tests benchmarks examples packaging

echo "== stubtest ferrocorn._ferrocorn"
# The stub is the source tree's, the runtime module the installed wheel's. The stub is checked
# alone (beside an empty package stub): through MYPYPATH=python mypy would type-check the whole
# package's Python first, which is not what this gates on. It runs in an empty directory, so
# that `import ferrocorn` (stubtest imports the runtime module) finds the installed package.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/stubs/ferrocorn" "$work/cwd"
: > "$work/stubs/ferrocorn/__init__.pyi"
cp python/ferrocorn/_ferrocorn.pyi "$work/stubs/ferrocorn/"
allowlist="$(pwd)/tests/stubtest-allowlist.txt"
(cd "$work/cwd" && MYPYPATH="$work/stubs" "$PY" -m mypy.stubtest --allowlist "$allowlist" \
    ferrocorn._ferrocorn)
echo "== lint passed"
