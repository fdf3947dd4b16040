//! Stable-Rust smoke run of the fuzz targets: every file under `corpus/<target>/` (and, when
//! present, `artifacts/<target>/`) goes through the same check as the libFuzzer target, plus
//! a few thousand deterministic pseudo-random mutations of each.

use std::path::Path;

fn inputs(target: &str) -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for dir in ["corpus", "artifacts"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else { continue };
        for entry in entries.flatten() {
            if entry.path().is_file() {
                out.push(std::fs::read(entry.path()).unwrap());
            }
        }
    }
    out
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut data = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        let special = [b'\r', b'\n', 0, b'%', b',', b':', b' ', b'\t', 0x7f, 0xff, 0xc3];
        match rng.below(5) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(data.len() + 1);
                data.insert(i, special[rng.below(special.len())]);
            }
            2 if !data.is_empty() => {
                let i = rng.below(data.len());
                data.remove(i);
            }
            3 => {
                let i = rng.below(data.len() + 1);
                data.truncate(i);
            }
            _ => {
                let i = rng.below(data.len() + 1);
                data.insert(i, rng.next() as u8);
            }
        }
    }
    data
}

fn run(target: &str, check: fn(&[u8])) {
    let seeds = inputs(target);
    assert!(!seeds.is_empty(), "no corpus for {target}");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut cases = 0;
    for seed in &seeds {
        check(seed);
        cases += 1;
        for _ in 0..2000 {
            check(&mutate(&mut rng, seed));
            cases += 1;
        }
    }
    eprintln!("{target}: {} corpus files, {cases} cases", seeds.len());
}

#[test]
fn response_header() {
    run("response_header", ferrocorn_fuzz::check_response_header);
}

#[test]
fn ws_handshake() {
    run("ws_handshake", ferrocorn_fuzz::check_ws_handshake);
}

#[test]
fn ws_frames() {
    run("ws_frames", ferrocorn_fuzz::check_ws_frames);
}

#[test]
fn path_decode() {
    run("path_decode", ferrocorn_fuzz::check_path_decode);
}
