//! The `info` messages that say why a turn's reply ended early. They are part of the
//! protocol rather than free text: translators of the serve protocol (`jucode acp`, the
//! WebSocket server) read them as the turn's stop reason (`max_tokens`, `refusal`), so
//! the engine emits exactly these strings and nothing else matches on wording.

/// The reply stopped at the model's output token limit (`finish_reason: length`).
pub const REPLY_CUT_OFF: &str = "the reply was cut off: the model reached its output token limit";

/// The provider stopped the reply with its content filter (`finish_reason:
/// content_filter`): the model refused.
pub const REPLY_REFUSED: &str = "the reply was stopped by the provider's content filter";
