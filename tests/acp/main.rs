//! End-to-end tests of `jucode acp`, driven over stdio like an editor: by hand here, and
//! with the official TypeScript SDK (`sdk.rs`).

#[path = "../common/mod.rs"]
mod common;

mod basics;
mod delegation;
mod mcp;
mod permissions;
mod sdk;
mod sessions;
