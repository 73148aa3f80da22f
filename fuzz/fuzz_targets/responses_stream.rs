#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| jucode::fuzzing::responses_stream(data));
