//! The text of the `info` that says why a turn's reply ended early
//! ([`super::Event::reply_stopped`]). What it means is its `stop_reason`, which the
//! translators of the serve protocol read; the words are for people.

/// The reply stopped at the model's output token limit (`finish_reason: length`).
pub const REPLY_CUT_OFF: &str = "the reply was cut off: the model reached its output token limit";

/// The provider stopped the reply with its content filter (`finish_reason:
/// content_filter`): the model refused.
pub const REPLY_REFUSED: &str = "the reply was stopped by the provider's content filter";
