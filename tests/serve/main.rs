//! End-to-end tests of `jucode serve --in-process`, driven over stdio like a front-end.

#[path = "../common/mod.rs"]
mod common;

mod agents;
mod agents_gating;
mod agents_trace;
mod approvals;
mod attachments;
mod basics;
mod goals;
mod headless;
mod links;
mod mcp;
mod mcp_elicit;
mod mcp_everything;
mod mcp_oauth;
mod mcp_ops;
mod native;
mod plans;
mod project;
mod queue;
mod recovery;
mod sandbox;
mod schema;
mod sessions;
mod shell;
mod turns;
mod web;
