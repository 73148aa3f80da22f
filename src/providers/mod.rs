//! Model providers: implementations of [`crate::engine::ModelClient`].
