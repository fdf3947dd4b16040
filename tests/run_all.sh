#!/usr/bin/env bash
# The whole test suite, from a fresh checkout: the style gate and Rust unit tests, then the
# black-box pytest suite against a release wheel under CPython 3.11 (asyncio loop) and 3.13
# (uvloop) and under PyPy (each in its own virtualenv).
#
#   bash tests/run_all.sh            # CPython 3.11 (python3), CPython 3.13 and PyPy
#   INTERPRETERS=python3 bash tests/run_all.sh
#
# Needs: cargo, python3 (with pip), python3.13 (PATH or pyenv), pypy3 (+ pypy3-dev), openssl
# (test certificates) and optionally h2load (nghttp2-client) — .ci/run installs the Debian
# ones.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
INTERPRETERS=${INTERPRETERS:-"python3 python3.13 pypy3"}

# An interpreter by name: from PATH when it runs, else from pyenv's versions (a pyenv shim
# is on PATH for every version but runs only the selected one).
interpreter() {
    local found
    found=$(command -v "$1" 2>/dev/null || true)
    if [ -n "$found" ] && "$found" -c pass 2>/dev/null; then
        echo "$found"
        return
    fi
    for found in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/"$1"; do
        if [ -x "$found" ] && "$found" -c pass 2>/dev/null; then
            echo "$found"
            return
        fi
    done
    echo "interpreter $1 not found (on PATH or under pyenv's versions)" >&2
    return 1
}
# Two workers, each file on one of them (module-scoped servers are started once), and the
# slowest tests named at the end so that the next sleep-bound test is easy to find.
PYTEST_ARGS=${PYTEST_ARGS:-"-q -ra -n 2 --dist loadfile --durations=25"}

echo "== style gate: cargo fmt, clippy on the CPython and PyPy builds"
cargo fmt --check
PYO3_PYTHON=$(command -v python3) cargo clippy --quiet --all-targets -- -D warnings
if [[ " $INTERPRETERS " == *" pypy3 "* ]]; then
    # Its own target directory: the PyPy build's pyo3 config differs, and sharing one would
    # rebuild everything on each switch.
    PYO3_PYTHON=$(command -v pypy3) CARGO_TARGET_DIR="$ROOT/target/pypy-clippy" \
        cargo clippy --quiet --all-targets -- -D warnings
fi

bash docs/build.sh  # the docs site: mkdocs build --strict into target/site

echo "== cargo test (unit tests, and the layer rules of ARCHITECTURE.md: src/layers.rs)"
PYO3_PYTHON=$(command -v python3) cargo test --quiet

echo "== fuzz (short run; the stable smoke test when cargo-fuzz cannot be used)"
if ! cargo fuzz --version >/dev/null 2>&1 && [ -z "${FUZZ_SMOKE_ONLY:-}" ]; then
    cargo install cargo-fuzz --locked --version 0.13.2 --quiet \
        || echo "cargo-fuzz could not be installed: smoke test only"
fi
bash fuzz/run-short.sh "${FUZZ_SECONDS:-10}"

# The test wheels are built as packaging/ci.sh builds its own (zig, manylinux2014: the
# dependencies are compiled once for all of them) with the tools at their pins.
. packaging/common.sh
TOOLS="$ROOT/target/packaging-tools"
tools_venv "$TOOLS"
rm -rf "$ROOT/target/wheels-test"

first_interp=${INTERPRETERS%% *}
for interp in $INTERPRETERS; do
    echo "== $interp: build the wheel"
    python=$(interpreter "$interp")
    # The ci profile (Cargo.toml: thin LTO, 16 codegen units) builds in about a third of
    # the fat-LTO release profile's time; the suite asserts behaviour and memory bounds, never
    # speed, and benchmarks/ measures the release profile.
    # maturin runs zig as `python3 -m ziglang`: the tools venv, first on PATH, provides it.
    PATH="$TOOLS/bin:$PATH" maturin build --profile ci --zig --compatibility manylinux2014 \
        --interpreter "$python" --out "$ROOT/target/wheels-test/$interp" --quiet
    venv="$ROOT/target/venv-test-$interp"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet -r tests/requirements.txt
    # The framework matrix: PyPy 3.9 gets the subset that installs there (see the file).
    if [ "$("$venv/bin/python" -c 'import platform; print(platform.python_implementation())')" = PyPy ]; then
        "$venv/bin/python" -m pip install --quiet -r tests/requirements-frameworks-pypy.txt
    else
        "$venv/bin/python" -m pip install --quiet -r tests/requirements-frameworks.txt
    fi
    "$venv/bin/python" -m pip install --quiet "$ROOT"/target/wheels-test/"$interp"/*.whl
    if [ "$interp" = python3 ]; then
        echo "== $interp: lint and stub check"
        bash tests/lint.sh "$venv"
    fi
    echo "== $interp: pytest"
    # Both event loops over the run: CPython 3.11 on asyncio, the others on ferrocorn's own
    # choice (uvloop on CPython 3.13, where tests/requirements.txt installs it; asyncio on
    # PyPy). tests/test_task_semantics.py runs on both loops everywhere uvloop installs.
    if [ "$interp" = python3 ]; then export FERROCORN_TEST_LOOP=asyncio; else unset FERROCORN_TEST_LOOP; fi
    # Run from the repo root so `tests.apps.*` import; `ferrocorn` comes from the wheel.
    # kosoku (the Autobahn runner) needs Python >= 3.10: the PyPy run borrows CPython's.
    export FERROCORN_KOSOKU="${FERROCORN_KOSOKU:-$ROOT/target/venv-test-python3/bin/kosoku}"
    # Autobahn's permessage-deflate sections (12, 13: minutes each, Rust codec) run once.
    if [ "$interp" = "$first_interp" ]; then unset FERROCORN_AUTOBAHN_COMPRESSION
    else export FERROCORN_AUTOBAHN_COMPRESSION=0; fi
    # The outer timeout is a last guard: a hung suite fails here, in CI's budget, not CI.
    (cd "$ROOT" && timeout -k 30 "${PYTEST_TIMEOUT:-2400}" "$venv/bin/python" -m pytest $PYTEST_ARGS tests)
done
# The suite's own wheels (3.11, 3.13, PyPy) installed as a user would: a fresh virtualenv,
# no cargo or rustc on PATH, `ferrocorn --version` and one request.
rm -rf "$ROOT/target/wheels-verify" && mkdir -p "$ROOT/target/wheels-verify"
cp "$ROOT"/target/wheels-test/*/*.whl "$ROOT/target/wheels-verify/"
WHEELS=1 SMOKE= SDIST=0 bash packaging/verify-wheels.sh "$ROOT/target/wheels-verify"
bash packaging/ci.sh  # wheels for 3.9/3.10/3.12 + smoke, the sdist, the portable build
echo "== all tests passed"
