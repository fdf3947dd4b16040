#!/usr/bin/env bash
# Build the docs site the way CI does: a throwaway virtualenv under target/ with the pinned
# tools of docs/requirements.txt, then `mkdocs build --strict` (a broken link, a missing page
# or a warning fails the build) into target/site. The performance charts must match the
# benchmark data they are drawn from.
#
#   bash docs/build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
venv="$ROOT/target/venv-docs"
stamp="$venv/.requirements"
# Reuse the venv while the pins are unchanged: the install is most of the build's time.
if ! cmp -s docs/requirements.txt "$stamp" 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet -r docs/requirements.txt
    cp docs/requirements.txt "$stamp"
fi
python3 benchmarks/docs_charts.py --check
# Not --quiet: mkdocs counts strict mode's warnings only among the records it prints.
NO_MKDOCS_2_WARNING=1 "$venv/bin/mkdocs" build --strict --site-dir "$ROOT/target/site"
echo "docs built: target/site"
