#!/usr/bin/env bash
# Each wheel in DIR, installed as a user would: into a fresh virtualenv of its own
# interpreter, with no cargo or rustc on PATH (a wheel must need no compiler), then
# `ferrocorn --version` (which must agree with ferrocorn.__version__, the wheel's metadata
# and Cargo.toml) and one HTTP request to examples.hello:app. With SMOKE="cp39 cp310 ...",
# the wheels of those tags also run the named smoke subset of the black-box suite
# (packaging/smoke-tests.txt). With SDIST=1, the sdist in DIR builds and installs (cargo
# present) into a fresh python3 virtualenv and serves the same request.
#
#   bash packaging/verify-wheels.sh dist
#   SMOKE="cp39 cp310 cp312" SDIST=1 bash packaging/verify-wheels.sh dist
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
. packaging/common.sh

DIR=${1:?usage: $0 DIR}
DIR=$(cd "$DIR" && pwd)
SMOKE=${SMOKE:-}
SDIST=${SDIST:-0}
WHEELS=${WHEELS:-1}  # 0: the sdist only
WORK=${VERIFY_DIR:-${CARGO_TARGET_DIR:-$ROOT/target}/verify}
expected=$(sed -n 's/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -1)

# PATH without any directory that holds cargo or rustc.
no_rust_path() {
    local out="" dir
    local IFS=:
    for dir in $PATH; do
        if [ -e "$dir/cargo" ] || [ -e "$dir/rustc" ]; then continue; fi
        out="${out:+$out:}$dir"
    done
    echo "$out"
}
NO_RUST_PATH=$(no_rust_path)

# The interpreter a wheel's tag names: cp39 -> python3.9, pp39 -> pypy3.
interpreter_for() {
    local tag="$1"
    case "$tag" in
        cp3*) find_interpreter "python3.${tag#cp3}" ;;
        pp3*) find_interpreter pypy3 ;;
    esac
}

# `ferrocorn --version`, the three versions agreeing, and one request to examples.hello.
check_install() {
    local venv="$1" label="$2"
    local out
    out=$("$venv/bin/ferrocorn" --version)
    echo "$label: $out"
    "$venv/bin/python" - "$expected" "$out" <<'PY'
import sys
from importlib import metadata

import ferrocorn

expected, shown = sys.argv[1], sys.argv[2]
found = {"Cargo.toml": expected, "ferrocorn.__version__": ferrocorn.__version__,
         "wheel metadata": metadata.version("ferrocorn")}
if len(set(found.values())) != 1 or f"ferrocorn {expected} " not in shown + " ":
    sys.exit(f"versions disagree: {found}, --version says {shown!r}")
PY
    "$venv/bin/python" packaging/hello_request.py "$venv/bin/ferrocorn"
    echo "$label: GET / from examples.hello:app answered 200"
}

mkdir -p "$WORK"
shopt -s nullglob
wheels=()
if [ "$WHEELS" = 1 ]; then
    wheels=("$DIR"/ferrocorn-*.whl)
    [ "${#wheels[@]}" -gt 0 ] || { echo "no ferrocorn wheels in $DIR" >&2; exit 1; }
fi
for wheel in "${wheels[@]}"; do
    name=$(basename "$wheel")
    tag=$(cut -d- -f3 <<<"$name")
    python=$(interpreter_for "$tag")
    [ -n "$python" ] || { echo "no interpreter here for $name" >&2; exit 1; }
    venv="$WORK/venv-$tag"
    rm -rf "$venv"
    start=$SECONDS
    # No compiler reachable: pip may only unpack wheels (--only-binary for the deps too).
    PATH="$NO_RUST_PATH" "$python" -m venv "$venv"
    if PATH="$NO_RUST_PATH" command -v cargo >/dev/null || PATH="$NO_RUST_PATH" command -v rustc >/dev/null; then
        echo "cargo/rustc still on PATH" >&2; exit 1
    fi
    PATH="$NO_RUST_PATH" "$venv/bin/python" -m pip install --quiet --only-binary :all: "$wheel"
    PATH="$NO_RUST_PATH" check_install "$venv" "$name"
    if [[ " $SMOKE " == *" $tag "* ]]; then
        echo "== $name: smoke subset (packaging/smoke-tests.txt)"
        "$venv/bin/python" -m pip install --quiet -r tests/requirements.txt
        mapfile -t smoke < <(grep -vE '^\s*(#|$)' packaging/smoke-tests.txt)
        # One pytest run per line: a file and an optional -k expression, in shell quoting
        # (the file is this repository's own).
        for line in "${smoke[@]}"; do
            eval "args=($line)"
            (cd "$ROOT" && timeout -k 10 300 "$venv/bin/python" -m pytest -q -p no:cacheprovider "${args[@]}")
        done
    fi
    echo "== $name verified in $((SECONDS - start)) s"
done

if [ "$SDIST" = 1 ]; then
    sdists=("$DIR"/ferrocorn-*.tar.gz)
    [ "${#sdists[@]}" = 1 ] || { echo "want one sdist in $DIR, found ${#sdists[@]}" >&2; exit 1; }
    start=$SECONDS
    venv="$WORK/venv-sdist"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    # The source build a user without a wheel gets (maturin's PEP 517 backend, cargo on PATH).
    # SDIST_PROFILE picks a cheaper cargo profile for CI (maturin passes it on).
    if [ -n "${SDIST_PROFILE:-}" ]; then export MATURIN_PEP517_ARGS="--profile $SDIST_PROFILE"; fi
    "$venv/bin/python" -m pip install --quiet "${sdists[0]}"
    check_install "$venv" "$(basename "${sdists[0]}")"
    echo "== sdist built, installed and verified in $((SECONDS - start)) s"
fi
echo "== all verified"
