# Shared by packaging/*.sh (sourced): the pinned build tools and interpreter discovery.

# Pinned tools (PyPI), installed into their own virtualenv so no system Python changes.
MATURIN_PIN="maturin==1.16.0"   # the version tests/run_all.sh and .ci/run install
ZIGLANG_PIN="ziglang==0.13.0.post1" # the linker that targets glibc 2.17 (see README.md)
AUDITWHEEL_PIN="auditwheel==6.8.2"

# The interpreters a release is built for, by name (PATH first, then pyenv's versions).
RELEASE_INTERPRETERS=${RELEASE_INTERPRETERS:-"python3.9 python3.10 python3.11 python3.12 python3.13 pypy3"}

# An interpreter by name: from PATH when it runs, else from pyenv's versions (a pyenv shim
# is on PATH for every version but runs only the selected one). Empty when not found.
find_interpreter() {
    local found
    found=$(command -v "$1" 2>/dev/null || true)
    if [ -n "$found" ] && "$found" -c pass 2>/dev/null; then
        # Resolve the shim: the real binary's path is what maturin and venv should see.
        "$found" -c 'import sys; print(sys.executable)'
        return
    fi
    for found in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/"$1"; do
        if [ -x "$found" ] && "$found" -c pass 2>/dev/null; then
            echo "$found"
            return
        fi
    done
}

# The tools virtualenv (maturin, ziglang, auditwheel at their pins), created once.
tools_venv() {
    local venv="$1"
    local frozen pin missing=""
    frozen=$("$venv/bin/python" -m pip freeze 2>/dev/null || true)
    for pin in "$MATURIN_PIN" "$ZIGLANG_PIN" "$AUDITWHEEL_PIN"; do
        grep -qxF "$pin" <<<"$frozen" || missing=1
    done
    if [ -n "$missing" ]; then
        python3 -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --upgrade pip
        "$venv/bin/python" -m pip install --quiet "$MATURIN_PIN" "$ZIGLANG_PIN" "$AUDITWHEEL_PIN"
    fi
}
