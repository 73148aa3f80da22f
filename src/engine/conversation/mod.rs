//! The conversation: the store of entries and its views, what they cost in tokens,
//! compacting it, and the system prompts the model reads before it.

pub(super) mod compaction;
pub(super) mod o200k;
pub mod prompt;
pub mod store;
pub mod tokens;
