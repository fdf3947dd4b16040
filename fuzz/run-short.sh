#!/usr/bin/env bash
# Short fuzz run of every target: ~20 s each with cargo-fuzz (libFuzzer) when it works here,
# otherwise the stable-Rust smoke test that feeds the committed corpus (and deterministic
# mutations of it) through the same checks.
#   fuzz/run-short.sh [SECONDS]        FUZZ_SMOKE_ONLY=1 forces the smoke test.
# cargo-fuzz needs nightly compiler flags; on a stable toolchain RUSTC_BOOTSTRAP=1 enables them.
set -euo pipefail
cd "$(dirname "$0")"
SECONDS_PER_TARGET=${1:-20}
export PYO3_PYTHON=${PYO3_PYTHON:-$(command -v python3)}
TARGETS="response_header ws_handshake ws_frames path_decode"

smoke() {
    echo "fuzz: stable smoke run (corpus + deterministic mutations)"
    cargo test --release --test corpus_smoke -- --nocapture
}

if [ -z "${FUZZ_SMOKE_ONLY:-}" ] && cargo fuzz --version >/dev/null 2>&1 \
        && RUSTC_BOOTSTRAP=1 cargo fuzz build -O >/dev/null 2>&1; then
    for t in $TARGETS; do
        echo "fuzz: $t for ${SECONDS_PER_TARGET}s"
        # New corpus entries go to a scratch directory; the committed corpus is only read.
        scratch=$(mktemp -d)
        log="$scratch.log"
        status=0
        RUSTC_BOOTSTRAP=1 cargo fuzz run -O "$t" "$scratch" "corpus/$t" -- \
            -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 >"$log" 2>&1 || status=$?
        grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|==[0-9]+==|SUMMARY)|panicked" \
            "$log" || true
        rm -f "$log"
        rm -rf "$scratch"
        if [ "$status" -ne 0 ]; then
            echo "fuzz: $t FAILED (see fuzz/artifacts/$t)"
            exit 1
        fi
    done
    smoke
else
    echo "fuzz: cargo fuzz unavailable here"
    smoke
fi
