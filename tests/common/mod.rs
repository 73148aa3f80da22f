//! Shared test support: a mock model server and a driver for the real binary.
#![allow(dead_code)]

pub mod acp;
pub mod acp_schema;
pub mod daemon;
pub mod mcp;
pub mod mock;
pub mod oauth;
pub mod schema;
pub mod serve;
