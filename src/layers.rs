//! The layer rules of ARCHITECTURE.md, checked against the source: a `use` that breaks one
//! fails `cargo test`.

use std::path::{Path, PathBuf};

/// (layer directory or file under src/, what it must not name).
const RULES: &[(&str, &[&str])] = &[
    // The protocol rules: plain Rust, below everything.
    (
        "http",
        &[
            "pyo3",
            "crate::bridge",
            "crate::server",
            "crate::asgi",
            "crate::core",
        ],
    ),
    (
        "ws",
        &[
            "pyo3",
            "crate::bridge",
            "crate::server",
            "crate::asgi",
            "crate::core",
        ],
    ),
    (
        "tls",
        &[
            "pyo3",
            "crate::bridge",
            "crate::server",
            "crate::asgi",
            "crate::core",
        ],
    ),
    (
        "proxy_protocol",
        &[
            "pyo3",
            "crate::bridge",
            "crate::server",
            "crate::asgi",
            "crate::core",
        ],
    ),
    (
        "access_log",
        &[
            "pyo3",
            "crate::bridge",
            "crate::server",
            "crate::asgi",
            "crate::core",
        ],
    ),
    (
        "config.rs",
        &[
            "pyo3",
            "crate::bridge",
            "crate::server",
            "crate::asgi",
            "crate::core",
        ],
    ),
    // The hand-off both threads share.
    ("bridge", &["crate::server", "crate::asgi", "crate::core"]),
    // tokio threads: never Python, never the loop side.
    ("server", &["pyo3", "crate::asgi", "crate::core"]),
    // The loop thread: never the tokio side's internals.
    ("asgi", &["crate::server", "crate::core"]),
    // The response rules stay plain Rust, testable without Python.
    ("asgi/response.rs", &["pyo3"]),
    ("asgi/ws_send.rs", &["pyo3"]),
    ("asgi/pypy/packing.rs", &["pyo3"]),
];

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(path)
            .expect("a readable source directory")
            .map(|e| e.expect("a directory entry").path())
            .collect();
        entries.sort();
        for entry in entries {
            rust_files(&entry, out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// The lines of `source` outside comments that name `forbidden` as a path.
fn offending_lines(source: &str, forbidden: &str) -> Vec<(usize, String)> {
    source
        .lines()
        .enumerate()
        .filter(|(_, line)| {
            let code = line.split("//").next().unwrap_or("");
            code.match_indices(forbidden).any(|(at, _)| {
                let after = code[at + forbidden.len()..].chars().next();
                // `pyo3` as a path (`pyo3::`, `use pyo3;`), not `pyo3_build_config`.
                !matches!(after, Some(c) if c.is_alphanumeric() || c == '_')
            })
        })
        .map(|(n, line)| (n + 1, line.trim().to_owned()))
        .collect()
}

#[test]
fn every_layer_imports_only_the_layers_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut broken = Vec::new();
    for (layer, forbidden) in RULES {
        let mut files = Vec::new();
        rust_files(&src.join(layer), &mut files);
        assert!(!files.is_empty(), "no sources found for layer {layer}");
        for file in files {
            let source = std::fs::read_to_string(&file).expect("a readable source file");
            for name in *forbidden {
                for (line, text) in offending_lines(&source, name) {
                    broken.push(format!("{}:{line}: {text}", file.display()));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "layer rules broken:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_check_sees_an_import_and_ignores_comments() {
    let source = "use pyo3::prelude::*;\n// pyo3 in a comment\nlet x = pyo3_like;\n";
    assert_eq!(
        offending_lines(source, "pyo3"),
        [(1, "use pyo3::prelude::*;".to_owned())]
    );
    assert!(offending_lines("use crate::asgi::x;", "crate::asgi").len() == 1);
}
