//! Fault injection (`docs/reliability.md`): full disks, writes failing with EIO,
//! read-only file systems, a profile directory removed while running, a slow disk, and
//! `kill -9` at random points. Each test makes the file systems it needs (tmpfs mounts,
//! a FUSE pass-through: these tests run as root); one that cannot mount says why on
//! stderr and returns.

#[path = "../common/mod.rs"]
mod common;

mod disk;
mod kills;
mod mounts;
#[cfg(target_os = "linux")]
mod passthrough;
