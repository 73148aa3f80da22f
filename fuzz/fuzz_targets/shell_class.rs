#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    // The bytes as a command line (no panic), and as the choices of a line built from
    // pieces whose effect is known (a line that writes is never read-only).
    let _ = jucode::fuzzing::shell_class(data);
    let _ = jucode::fuzzing::shell_differential(data);
});
