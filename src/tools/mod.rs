//! Tools: implementations of [`crate::engine::Tool`].
