#!/usr/bin/env bash
# CI's packaging step (tests/run_all.sh calls it): the wheels of the CPython versions that
# get no full suite (3.9, 3.10, 3.12) built as a release is (zig, manylinux2014) and checked
# by auditwheel, each installed with no Rust toolchain on PATH and run through the smoke
# subset; the sdist built and installed from source; then a `portable` build (the POSIX
# fallbacks macOS and the BSDs take) through a large named subset of the black-box suite.
#
# The test-only builds use the `ci` cargo profile (thin LTO, 16 codegen units): they are
# behaviour checks, and the release profile's fat LTO would cost minutes per interpreter.
# packaging/build-wheels.sh builds the release artifacts with the release profile.
#
#   bash packaging/ci.sh
#   PACKAGING_STEPS="wheels portable" bash packaging/ci.sh   # a part only
#   PACKAGING_STEPS= bash tests/run_all.sh                   # none of it
#
# Off Linux (the macOS CI job) only the sdist is checked: the wheels here are manylinux ones,
# and there the default build already takes the fallbacks the portable run tests.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
. packaging/common.sh

if [ "$(uname -s)" = Linux ]; then
    STEPS=${PACKAGING_STEPS-"wheels sdist portable"}
else
    STEPS=${PACKAGING_STEPS-"sdist"}
fi
PROFILE=${PACKAGING_PROFILE:-ci}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
OUT=$TARGET_DIR/wheels-packaging
TOOLS=${TOOLS_VENV:-$TARGET_DIR/packaging-tools}
tools_venv "$TOOLS"
step_started=$SECONDS

if [[ " $STEPS " == *" wheels "* ]]; then
    echo "== packaging: wheels for CPython 3.9, 3.10, 3.12 and the sdist (profile $PROFILE)"
    OUT=$OUT PROFILE=$PROFILE RELEASE_INTERPRETERS="python3.9 python3.10 python3.12" \
        bash packaging/build-wheels.sh
elif [[ " $STEPS " == *" sdist "* ]]; then
    rm -rf "$OUT"
    "$TOOLS/bin/maturin" sdist --out "$OUT"
fi
wheels=0 sdist=0
[[ " $STEPS " == *" wheels "* ]] && wheels=1
[[ " $STEPS " == *" sdist "* ]] && sdist=1
if [ "$wheels$sdist" != 00 ]; then
    echo "== packaging: each wheel installed without Rust (smoke subset); the sdist from source"
    WHEELS=$wheels SMOKE="cp39 cp310 cp312" SDIST=$sdist SDIST_PROFILE=$PROFILE \
        bash packaging/verify-wheels.sh "$OUT"
fi
if [[ " $STEPS " == *" portable "* ]]; then
    bash packaging/portable-tests.sh
fi
echo "== packaging step took $((SECONDS - step_started)) s"
