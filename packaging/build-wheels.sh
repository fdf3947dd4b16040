#!/usr/bin/env bash
# The release artifacts in one command: a manylinux2014 (glibc 2.17) x86_64 wheel for each
# interpreter found here (CPython 3.9-3.13, PyPy 3.9) and the sdist, written to dist/, each
# wheel then checked by `auditwheel show`. Why zig links them: packaging/README.md.
#
#   bash packaging/build-wheels.sh                 # release profile (fat LTO), into dist/
#   OUT=/tmp/w PROFILE=ci RELEASE_INTERPRETERS="python3.12" bash packaging/build-wheels.sh
#
# Needs: cargo (rustup), python3 with venv. One cargo target directory serves every
# interpreter, so the dependencies are compiled once; only pyo3 and ferrocorn itself are
# rebuilt per interpreter (their build configuration differs).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
. packaging/common.sh

OUT=${OUT:-$ROOT/dist}
PROFILE=${PROFILE:-release}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
TOOLS=${TOOLS_VENV:-$TARGET_DIR/packaging-tools}
# Fail rather than skip a release interpreter that is not installed (set STRICT=0 to skip).
STRICT=${STRICT:-1}

tools_venv "$TOOLS"

interpreters=()
for name in $RELEASE_INTERPRETERS; do
    found=$(find_interpreter "$name")
    if [ -z "$found" ]; then
        if [ "$STRICT" = 1 ]; then
            echo "interpreter $name not found (PATH or pyenv's versions); STRICT=0 skips it" >&2
            exit 1
        fi
        echo "skipping $name: not found"
        continue
    fi
    interpreters+=(--interpreter "$found")
done
# maturin runs zig as `python3 -m ziglang`: the tools venv first on PATH provides it (set
# after the interpreters are found, or its python3.11 would stand for the system's).
export PATH="$TOOLS/bin:$PATH"

mkdir -p "$OUT"
# Only this build's artifacts in OUT: an older version's wheel would be checked and shipped.
rm -f "$OUT"/ferrocorn-*.whl "$OUT"/ferrocorn-*.tar.gz

echo "== wheels (profile $PROFILE, zig, manylinux2014): ${interpreters[*]}"
start=$SECONDS
maturin build --profile "$PROFILE" --zig --compatibility manylinux2014 \
    "${interpreters[@]}" --out "$OUT"
echo "== wheels built in $((SECONDS - start)) s"

echo "== sdist"
maturin sdist --out "$OUT"

echo "== auditwheel show"
bash packaging/check-wheels.sh "$OUT"/ferrocorn-*.whl
ls -l "$OUT"
