//! Context size and cost.
//!
//! `context_usage.tokens` is counted with the o200k tokenizer over what the next request
//! will carry (system prompt, messages, tool schemas), so a front-end can show how full
//! the window is before the provider reports anything. Each entry of the conversation is
//! counted once (see `store`). The tokenizer's tables are static (built by `build.rs`);
//! only its pattern is compiled at run time, a few milliseconds on one core, which a
//! session starts on a thread of its own when it starts, so neither its first request
//! nor the end of its first turn waits for it.

use crate::engine::ports::model::{Message, ModelInfo, ToolSpec};
use crate::protocol::TurnUsage;

pub const TOKENIZER: &str = "o200k";

/// `context_usage.tokenizer` when the count starts from the provider's own usage of the
/// last request, with only what was added since counted by o200k.
pub const MEASURED: &str = "provider+o200k";

/// Per-message framing tokens (role, separators), as OpenAI documents for chat models.
const PER_MESSAGE: u64 = 3;
/// A typical image at high detail; providers bill images by tiles, not by bytes.
const PER_IMAGE: u64 = 765;

static WARM: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether [`warm_up`] has finished: counting now neither waits for the tokenizer to
/// load nor builds its matcher's caches.
pub fn is_warm() -> bool {
    WARM.load(std::sync::atomic::Ordering::Acquire)
}

/// Starts loading the tokenizer on a background thread, and runs it over a sample so
/// its matcher's caches (shared by every thread) are warm too: prose, code, JSON like
/// the tool schemas, and other scripts. Idempotent.
pub fn warm_up() {
    static STARTED: std::sync::Once = std::sync::Once::new();
    STARTED.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("tokenizer-load".into())
            .spawn(|| {
                lower_priority();
                let sample = "Warm up: fn main() { let x = 42; println!(\"{x}\"); }\n\
                              Ünïcödé, 漢字, emoji 🚀 and numbers 1234567.\n\
                              {\"type\": \"object\", \"properties\": {\"path\": {}}}\n";
                let tokenizer = super::o200k::tokenizer();
                tokenizer.count(sample);
                tokenizer.count(include_str!("../../prompts/coding.md"));
                WARM.store(true, std::sync::atomic::Ordering::Release);
            });
    });
}

/// Lets whatever else runs (a session's first request above all) go first: the warm-up
/// is for later counts, and on a machine with few cores it would compete with them.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority has no memory effects; on Linux, `who` 0 is the calling thread.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
}

fn count_text(text: &str) -> u64 {
    if text.is_empty() {
        return 0;
    }
    super::o200k::tokenizer().count(text) as u64
}

/// The share of the window a conversation may fill before it is compacted: 80 %, which
/// leaves room for the reply and the compaction summary itself.
pub fn context_limit(context_window: u64) -> u64 {
    context_window / 5 * 4
}

/// Tokens of a piece of streamed text (a delta), without framing: for progress.
pub fn count_delta(text: &str) -> u64 {
    count_text(text)
}

/// At least as many as [`count_message`], without the tokenizer: every token is at least
/// one byte.
pub fn bound_message(message: &Message) -> u64 {
    PER_MESSAGE
        + match message {
            Message::User { text, images } => text.len() as u64 + PER_IMAGE * images.len() as u64,
            Message::Assistant {
                text, tool_calls, ..
            } => {
                text.len() as u64
                    + tool_calls
                        .iter()
                        .map(|call| (call.name.len() + call.arguments.len()) as u64)
                        .sum::<u64>()
            }
            Message::Tool { output, .. } => output.len() as u64,
        }
}

/// Tokens one message adds to a request, its framing included.
pub fn count_message(message: &Message) -> u64 {
    PER_MESSAGE
        + match message {
            Message::User { text, images } => count_text(text) + PER_IMAGE * images.len() as u64,
            Message::Assistant {
                text, tool_calls, ..
            } => {
                count_text(text)
                    + tool_calls
                        .iter()
                        .map(|call| count_text(&call.name) + count_text(&call.arguments))
                        .sum::<u64>()
            }
            Message::Tool { output, .. } => count_text(output),
        }
}

/// Tokens every request carries besides its messages: the system prompt and the tool
/// schemas.
pub fn count_base(system: &str, tools: &[ToolSpec]) -> u64 {
    let mut total = PER_MESSAGE + count_text(system);
    for tool in tools {
        total += count_text(&tool.name)
            + count_text(&tool.description)
            + count_text(&tool.parameters.to_string());
    }
    total
}

/// Tokens the next request would carry.
pub fn count_context(system: &str, messages: &[Message], tools: &[ToolSpec]) -> u64 {
    count_base(system, tools) + messages.iter().map(count_message).sum::<u64>()
}

/// USD cost of one turn's usage at the model's prices (0 for what is unpriced). Input
/// read from the cache and input written to it are billed at their own prices when set,
/// else at the input price.
pub fn cost(usage: &TurnUsage, info: &ModelInfo) -> f64 {
    let per_token = |price: Option<f64>| price.unwrap_or(0.0) / 1_000_000.0;
    let cached = usage.cached_input_tokens.min(usage.input_tokens);
    let written = usage
        .cache_write_input_tokens
        .min(usage.input_tokens - cached);
    let uncached = usage.input_tokens - cached - written;
    uncached as f64 * per_token(info.input_price)
        + cached as f64 * per_token(info.cached_input_price.or(info.input_price))
        + written as f64 * per_token(info.cache_write_price.or(info.input_price))
        + usage.output_tokens as f64 * per_token(info.output_price)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ModelInfo {
        ModelInfo {
            context_window: 1000,
            max_output_tokens: 100,
            reasoning_efforts: vec![],
            input_price: Some(2.0),
            cached_input_price: Some(0.5),
            cache_write_price: Some(2.5),
            output_price: Some(10.0),
        }
    }

    #[test]
    fn counts_with_o200k() {
        assert_eq!(count_text("hello world"), 2);
        let messages = vec![Message::User {
            text: "hello world".into(),
            images: vec![],
        }];
        assert_eq!(count_context("", &messages, &[]), PER_MESSAGE * 2 + 2);
    }

    #[test]
    fn cost_uses_cached_price() {
        let usage = TurnUsage {
            input_tokens: 1_000_000,
            cached_input_tokens: 400_000,
            cache_write_input_tokens: 0,
            output_tokens: 100_000,
            reasoning_tokens: 0,
        };
        let cost = cost(&usage, &info());
        assert!((cost - (1.2 + 0.2 + 1.0)).abs() < 1e-9, "{cost}");
        let unpriced = ModelInfo {
            input_price: None,
            cached_input_price: None,
            cache_write_price: None,
            output_price: None,
            ..info()
        };
        assert_eq!(super::cost(&usage, &unpriced), 0.0);
        // Cache writes at their price: 1M input = 400k read + 100k written + 500k plain.
        let written = TurnUsage {
            cache_write_input_tokens: 100_000,
            ..usage
        };
        let cost = super::cost(&written, &info());
        assert!((cost - (1.0 + 0.2 + 0.25 + 1.0)).abs() < 1e-9, "{cost}");
        let no_write_price = ModelInfo {
            cache_write_price: None,
            ..info()
        };
        let cost = super::cost(&written, &no_write_price);
        assert!((cost - (1.2 + 0.2 + 1.0)).abs() < 1e-9, "{cost}");
    }
}
