#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| jucode::fuzzing::messages_stream(data));
