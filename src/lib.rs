//! jucode: a coding-agent engine built to be embedded.
//!
//! Front-ends drive sessions through serve protocol v2 (newline-delimited JSON); see
//! `docs/ARCHITECTURE.md` for the bird's-eye view.
//!
//! # Layout
//! Bottom up; a module only ever imports the ones listed before it.
//! - [`protocol`]: wire types of serve protocol v2 and the line codec. Knows no engine.
//! - [`config`]: the profile directory and `config.toml`.
//! - [`engine`]: one session's state machine and turn loop. Defines the [`engine::ModelClient`]
//!   and [`engine::Tool`] traits it needs and never names a concrete provider or tool.
//! - [`providers`], [`tools`]: implementations of those traits.
//! - [`host`]: wires an engine session from a profile (config, catalog, tools).
//! - [`transport`]: moves lines between a byte stream and a session.

pub mod config;
pub mod engine;
pub mod host;
pub mod protocol;
pub mod providers;
pub mod tools;
pub mod transport;
