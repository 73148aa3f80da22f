//! One MCP tool as the engine sees it: a [`Tool`] whose calls go to its server, and the
//! rendering of MCP results for the model.
//!
//! Gating: a tool annotated `readOnlyHint: true` is read-only (it runs in every mode,
//! plan mode included); any other tool may change anything, so it is gated as a shell
//! command that is not known to be read-only (`Effect::Exec`).

use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use serde_json::Value;

use super::client::{CallResult, RemoteTool, SharedConnection};
use crate::engine::{Assessment, Effect, ImageData, Tool, ToolContext, ToolOutput, ToolSpec};

/// The longest `summary` of an approval request (the arguments are cut).
const MAX_SUMMARY: usize = 600;

/// The largest image handed to the model (decoded bytes), as for attachments.
const MAX_IMAGE_BYTES: usize = 20 * 1024 * 1024;

pub struct McpTool {
    pub server: String,
    /// The name the model calls it by.
    pub exposed: String,
    pub remote: RemoteTool,
    pub connection: SharedConnection,
    /// The server's `timeout_ms`.
    pub timeout: Duration,
}

impl Tool for McpTool {
    fn spec(&self) -> ToolSpec {
        let description = if self.remote.description.is_empty() {
            format!(
                "Tool `{}` of MCP server `{}`.",
                self.remote.name, self.server
            )
        } else {
            self.remote.description.clone()
        };
        ToolSpec {
            name: self.exposed.clone(),
            description,
            parameters: self.remote.input_schema.clone(),
        }
    }

    fn assess(
        &self,
        args: &Value,
        _ctx: &ToolContext,
    ) -> BoxFuture<'static, Result<Assessment, ToolOutput>> {
        let effect = if self.remote.read_only {
            Effect::ReadOnly
        } else {
            Effect::Exec {
                danger: None,
                confinement: crate::engine::Confinement::Unconfined,
            }
        };
        let mut summary = format!("{} › {} {args}", self.server, self.remote.name);
        if summary.len() > MAX_SUMMARY {
            let mut cut = MAX_SUMMARY;
            while !summary.is_char_boundary(cut) {
                cut -= 1;
            }
            summary.truncate(cut);
            summary.push('…');
        }
        let assessment = Assessment {
            effect,
            summary,
            hunks: None,
        };
        async move { Ok(assessment) }.boxed()
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        let connection = self.connection.clone();
        let name = self.remote.name.clone();
        let server = self.server.clone();
        let timeout = self.timeout;
        async move {
            let Value::Object(arguments) = args else {
                return ToolOutput::error(format!("{name}: arguments must be a JSON object"));
            };
            let call = connection.call_tool(&name, arguments);
            tokio::select! {
                biased;
                () = ctx.cancel.cancelled() => ToolOutput::error(format!("{name}: cancelled")),
                reason = connection.closed() => ToolOutput::error(format!(
                    "MCP server {server} is not connected: {reason}"
                )),
                result = tokio::time::timeout(timeout, call) => match result {
                    Ok(Ok(result)) => render(result),
                    Ok(Err(err)) => ToolOutput::error(format!(
                        "MCP server {server} failed the call to {name}: {err}"
                    )),
                    Err(_) => ToolOutput::error(format!(
                        "MCP server {server} did not answer the call to {name} within {} ms (timeout_ms)",
                        timeout.as_millis()
                    )),
                },
            }
        }
        .boxed()
    }
}

/// A `tools/call` result as the model reads it: text blocks as they are, images
/// attached (and named in the text), other blocks described, structured content as
/// JSON unless a text block already carries exactly it.
pub fn render(result: CallResult) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    let mut images = Vec::new();
    let mut texts_as_json = Vec::new();
    for block in &result.content {
        let kind = block["type"].as_str().unwrap_or_default();
        match kind {
            "text" => {
                let text = block["text"].as_str().unwrap_or_default();
                if let Ok(json) = serde_json::from_str::<Value>(text) {
                    texts_as_json.push(json);
                }
                parts.push(text.to_owned());
            }
            "image" => {
                let mime = block["mimeType"].as_str().unwrap_or_default();
                let data = block["data"].as_str().unwrap_or_default();
                let bytes = decoded_len(data);
                match known_image(mime) {
                    Some(mime) if bytes <= MAX_IMAGE_BYTES && !data.is_empty() => {
                        images.push(ImageData {
                            mime,
                            base64: data.into(),
                        });
                        parts.push(format!("[image {mime}, {} attached]", size(bytes)));
                    }
                    _ => parts.push(format!(
                        "[image {mime}, {} not shown: only PNG, JPEG, GIF and WebP up to 20 MiB are]",
                        size(bytes)
                    )),
                }
            }
            "audio" => {
                let mime = block["mimeType"].as_str().unwrap_or_default();
                let bytes = decoded_len(block["data"].as_str().unwrap_or_default());
                parts.push(format!("[audio {mime}, {} not shown]", size(bytes)));
            }
            "resource" => {
                let resource = &block["resource"];
                let uri = resource["uri"].as_str().unwrap_or_default();
                match resource["text"].as_str() {
                    Some(text) => parts.push(format!("[resource {uri}]\n{text}")),
                    None => {
                        let mime = resource["mimeType"].as_str().unwrap_or("binary");
                        let bytes = decoded_len(resource["blob"].as_str().unwrap_or_default());
                        parts.push(format!(
                            "[resource {uri}: {mime}, {} not shown]",
                            size(bytes)
                        ));
                    }
                }
            }
            "resource_link" => {
                let uri = block["uri"].as_str().unwrap_or_default();
                let name = block["name"].as_str().unwrap_or_default();
                parts.push(format!("[resource link {uri} ({name})]"));
            }
            _ => parts.push(block.to_string()),
        }
    }
    if let Some(structured) = result.structured
        && !structured.is_null()
        && !texts_as_json.contains(&structured)
    {
        parts.push(format!("structured content: {structured}"));
    }
    let mut output = parts.join("\n");
    if output.is_empty() {
        output = "(no output)".to_owned();
    }
    ToolOutput {
        output,
        is_error: result.is_error,
        images,
    }
}

/// The size of base64 `data` once decoded.
fn decoded_len(data: &str) -> usize {
    let padding = data.bytes().rev().take_while(|&byte| byte == b'=').count();
    (data.len() / 4 * 3).saturating_sub(padding)
}

fn known_image(mime: &str) -> Option<&'static str> {
    ["image/png", "image/jpeg", "image/gif", "image/webp"]
        .into_iter()
        .find(|known| known.eq_ignore_ascii_case(mime))
}

fn size(bytes: usize) -> String {
    if bytes < 1024 {
        format!("{bytes} B")
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn results_are_rendered_faithfully() {
        let out = render(CallResult {
            content: vec![
                json!({"type": "text", "text": "hello"}),
                json!({"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}),
                json!({"type": "image", "mimeType": "image/tiff", "data": "AAAA"}),
                json!({"type": "audio", "mimeType": "audio/wav", "data": "AAAA"}),
                json!({"type": "resource", "resource": {"uri": "file:///a.txt", "text": "A"}}),
                json!({"type": "resource_link", "uri": "file:///b", "name": "b"}),
            ],
            structured: Some(json!({"sum": 3})),
            is_error: false,
        });
        assert_eq!(
            out.output,
            "hello\n[image image/png, 8 B attached]\n\
             [image image/tiff, 3 B not shown: only PNG, JPEG, GIF and WebP up to 20 MiB are]\n\
             [audio audio/wav, 3 B not shown]\n[resource file:///a.txt]\nA\n\
             [resource link file:///b (b)]\nstructured content: {\"sum\":3}"
        );
        assert_eq!(out.images.len(), 1);
        assert_eq!(out.images[0].mime, "image/png");
        assert!(!out.is_error);
    }

    #[test]
    fn structured_content_already_in_text_is_not_repeated_and_errors_stay_errors() {
        let out = render(CallResult {
            content: vec![json!({"type": "text", "text": "{\"sum\": 3}"})],
            structured: Some(json!({"sum": 3})),
            is_error: true,
        });
        assert_eq!(out.output, "{\"sum\": 3}");
        assert!(out.is_error);
        let empty = render(CallResult {
            content: vec![],
            structured: None,
            is_error: false,
        });
        assert_eq!(empty.output, "(no output)");
    }
}
