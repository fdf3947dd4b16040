//! Exposes PyO3's interpreter cfgs (`PyPy`, `Py_3_10`, ...) to our code: the task body
//! steps coroutines through `PyIter_Send`, which exists only on CPython 3.10+.

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
