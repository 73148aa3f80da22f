#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| jucode_daemon::fuzzing::frames_and_routes(data));
