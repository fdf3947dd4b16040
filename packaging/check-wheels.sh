#!/usr/bin/env bash
# Each wheel given must be manylinux_2_17 (manylinux2014) or older by `auditwheel show`,
# need no shared library outside the policy, and need no C library function without a symbol
# version (which auditwheel cannot see: packaging/unversioned_symbols.py). Exits 1 naming
# the first wheel that fails.
#
#   bash packaging/check-wheels.sh dist/*.whl
set -euo pipefail
cd "$(dirname "$0")/.."
. packaging/common.sh
TOOLS=${TOOLS_VENV:-${CARGO_TARGET_DIR:-$(pwd)/target}/packaging-tools}
tools_venv "$TOOLS"

# The newest glibc a wheel may need: manylinux2014's.
MAX_GLIBC_MINOR=17
[ "$#" -gt 0 ] || { echo "usage: $0 WHEEL..." >&2; exit 2; }
for wheel in "$@"; do
    report=$("$TOOLS/bin/auditwheel" show "$wheel")
    # auditwheel wraps its lines: join them before matching.
    flat=$(tr '\n' ' ' <<<"$report" | tr -s ' ')
    tag=$(grep -oE 'consistent with the following platform tag: "[a-z0-9_]+"' <<<"$flat" \
        | head -1 | grep -oE '"[a-z0-9_]+"' | tr -d '"' || true)
    minor=$(grep -oE '^manylinux_2_[0-9]+' <<<"$tag" | grep -oE '[0-9]+$' || true)
    echo "$(basename "$wheel"): $tag"
    if [ -z "$minor" ]; then
        echo "$report" >&2
        echo "FAIL: $(basename "$wheel") is not consistent with any manylinux tag" >&2
        exit 1
    fi
    if [ "$minor" -gt "$MAX_GLIBC_MINOR" ]; then
        echo "$report" >&2
        echo "FAIL: $(basename "$wheel") needs $tag, newer than manylinux_2_$MAX_GLIBC_MINOR" >&2
        exit 1
    fi
    # Libraries outside the policy's whitelist are listed after this sentence.
    if grep -q "external shared libraries" <<<"$flat" \
            && ! grep -q "requires no external shared libraries" <<<"$flat"; then
        echo "$report" >&2
        echo "FAIL: $(basename "$wheel") links a shared library outside the manylinux policy" >&2
        exit 1
    fi
done
"$TOOLS/bin/python" packaging/unversioned_symbols.py "$@"
echo "== all $# wheels are manylinux_2_$MAX_GLIBC_MINOR or older with no outside libraries, no unversioned symbols"
