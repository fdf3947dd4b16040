#!/usr/bin/env bash
# The `portable` cargo feature on Linux: the build takes the POSIX fallbacks that macOS and
# the BSDs use (Cargo.toml says which), so running the black-box suite against it here is
# how CI knows those paths work without a Mac. Lints the feature's code, builds a CPython
# wheel with it, checks the extension says so, and runs the named subset in
# packaging/portable-tests.txt.
#
#   bash packaging/portable-tests.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
. packaging/common.sh

PROFILE=${PACKAGING_PROFILE:-ci}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
TOOLS=${TOOLS_VENV:-$TARGET_DIR/packaging-tools}
OUT=$TARGET_DIR/wheels-portable
venv=$TARGET_DIR/venv-portable
python=$(find_interpreter "${PORTABLE_PYTHON:-python3}")
tools_venv "$TOOLS"
start=$SECONDS

echo "== portable: clippy (the fallback code paths)"
PYO3_PYTHON="$python" cargo clippy --quiet --features portable --all-targets -- -D warnings

echo "== portable: wheel (profile $PROFILE, --features portable)"
rm -rf "$OUT"
# Linked by zig for glibc 2.17 like packaging/ci.sh's wheels, so this build reuses their
# compiled dependencies (same target directory, profile and C compiler) instead of
# compiling them again. maturin runs zig as `python3 -m ziglang` (the tools venv's).
PATH="$TOOLS/bin:$PATH" "$TOOLS/bin/maturin" build --quiet --profile "$PROFILE" --zig \
    --compatibility manylinux2014 --features portable --interpreter "$python" --out "$OUT"
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -r tests/requirements.txt \
    -r tests/requirements-frameworks.txt "$OUT"/*.whl
# The wheel really is the portable build (else the run below would test the Linux paths).
"$venv/bin/python" -c 'from ferrocorn._ferrocorn import LINUX_FAST_PATHS as L; assert not L'

echo "== portable: black-box subset (packaging/portable-tests.txt)"
mapfile -t tests < <(grep -vE '^\s*(#|$)' packaging/portable-tests.txt)
# asyncio: the loop macOS users without uvloop get; uvloop is covered by the main run.
FERROCORN_TEST_LOOP=asyncio timeout -k 30 1800 "$venv/bin/python" -m pytest -q -p no:cacheprovider \
    --durations=5 "${tests[@]}"
echo "== portable: done in $((SECONDS - start)) s"
