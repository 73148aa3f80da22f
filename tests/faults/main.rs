//! Fault injection (`docs/reliability.md`): full disks, read-only file systems, a profile
//! directory removed while running, a slow disk, and `kill -9` at random points. Each
//! test makes the file systems it needs (tmpfs mounts: these tests run as root); one
//! that cannot mount says why on stderr and returns.

#[path = "../common/mod.rs"]
mod common;

mod disk;
mod kills;
mod mounts;
