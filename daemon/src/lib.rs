//! The jucode multi-session host. Filled in by the daemon work; see `docs/ARCHITECTURE.md`.
