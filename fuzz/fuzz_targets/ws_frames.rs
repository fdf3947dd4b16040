#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ferrocorn_fuzz::check_ws_frames(data);
});
