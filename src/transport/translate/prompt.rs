//! ACP prompt content blocks into a serve-protocol `user_message`.
//!
//! Text blocks are the message. Images (base64) and embedded binary resources are
//! written to files under the profile's `attachments/` directory, since the engine
//! attaches local paths (and may run in the daemon, which reads the same disk); a
//! `resource_link` to a local file becomes an attached file; embedded text resources are
//! quoted into the message with their URI. Decoding and writing is blocking work: call
//! [`to_input`] off the async workers.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

use crate::protocol::UserInput;

/// One content block of a prompt, as clients send it. Unknown fields are ignored.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PromptBlock {
    Text {
        text: String,
    },
    Image {
        data: String,
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    Audio {},
    ResourceLink {
        uri: String,
        name: String,
    },
    Resource {
        resource: EmbeddedResource,
    },
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum EmbeddedResource {
    Text {
        uri: String,
        text: String,
    },
    Blob {
        uri: String,
        blob: String,
        #[serde(rename = "mimeType", default)]
        mime_type: Option<String>,
    },
}

/// The most decoded bytes one attachment may have (the engine refuses larger images).
const MAX_ATTACHMENT: usize = 20 * 1024 * 1024;

/// The slash command a prompt is, when it is one text block starting with `/`.
pub fn command_of(blocks: &[PromptBlock]) -> Option<String> {
    match blocks {
        [PromptBlock::Text { text }] if text.trim_start().starts_with('/') => {
            Some(text.trim().to_owned())
        }
        _ => None,
    }
}

/// The message for `blocks`; `Err` says what the client sent that cannot be used.
pub fn to_input(blocks: &[PromptBlock], attachments: &Path) -> Result<UserInput, String> {
    let mut input = UserInput::default();
    let mut parts: Vec<String> = Vec::new();
    for block in blocks {
        match block {
            PromptBlock::Text { text } => parts.push(text.clone()),
            PromptBlock::Image { data, mime_type } => {
                let path = save(attachments, data, Some(mime_type))?;
                input.images.push(path.display().to_string());
            }
            PromptBlock::Audio {} => {
                return Err(
                    "audio content is not supported (promptCapabilities.audio is false)".into(),
                );
            }
            PromptBlock::ResourceLink { uri, name } => match local_path(uri) {
                Some(path) => input.files.push(path.display().to_string()),
                None => parts.push(format!("[{name}]({uri})")),
            },
            PromptBlock::Resource {
                resource: EmbeddedResource::Text { uri, text },
            } => parts.push(format!("Contents of {uri}:\n```\n{text}\n```")),
            PromptBlock::Resource {
                resource:
                    EmbeddedResource::Blob {
                        blob, mime_type, ..
                    },
            } => {
                let path = save(attachments, blob, mime_type.as_deref())?;
                let is_image = mime_type
                    .as_deref()
                    .is_some_and(|m| m.starts_with("image/"));
                if is_image {
                    input.images.push(path.display().to_string());
                } else {
                    input.files.push(path.display().to_string());
                }
            }
        }
    }
    input.content = parts.join("\n");
    if input.content.trim().is_empty() && input.images.is_empty() && input.files.is_empty() {
        return Err("the prompt is empty".into());
    }
    Ok(input)
}

/// `file:///abs/path` (percent-decoded) as a path.
fn local_path(uri: &str) -> Option<PathBuf> {
    let rest = uri.strip_prefix("file://")?;
    let rest = rest.strip_prefix("localhost").unwrap_or(rest);
    if !rest.starts_with('/') {
        return None;
    }
    let mut bytes = Vec::with_capacity(rest.len());
    let raw = rest.as_bytes();
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%'
            && let Some(byte) = raw
                .get(i + 1..i + 3)
                .and_then(|hex| std::str::from_utf8(hex).ok())
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            bytes.push(byte);
            i += 3;
            continue;
        }
        bytes.push(raw[i]);
        i += 1;
    }
    String::from_utf8(bytes).ok().map(PathBuf::from)
}

fn save(dir: &Path, data: &str, mime: Option<&str>) -> Result<PathBuf, String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|err| format!("attachment data is not valid base64: {err}"))?;
    if bytes.len() > MAX_ATTACHMENT {
        return Err(format!(
            "an attachment of {} bytes is over the limit of {MAX_ATTACHMENT}",
            bytes.len()
        ));
    }
    let ext = match mime.unwrap_or("") {
        "image/png" => "png",
        "image/jpeg" => "jpg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        "application/pdf" => "pdf",
        _ => "bin",
    };
    crate::config::private::create_dir_all(dir)
        .map_err(|err| format!("cannot create {}: {err}", dir.display()))?;
    let path = dir.join(format!("{}.{ext}", uuid::Uuid::now_v7()));
    crate::config::private::file_options()
        .create_new(true)
        .write(true)
        .open(&path)
        .and_then(|mut file| std::io::Write::write_all(&mut file, &bytes))
        .map_err(|err| format!("cannot write {}: {err}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocks(json: serde_json::Value) -> Vec<PromptBlock> {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn text_links_and_resources() {
        let dir = tempfile::tempdir().unwrap();
        let input = to_input(
            &blocks(serde_json::json!([
                {"type": "text", "text": "look"},
                {"type": "resource_link", "uri": "file:///tmp/a%20b.txt", "name": "a b.txt"},
                {"type": "resource_link", "uri": "https://x.invalid/y", "name": "y"},
                {"type": "resource", "resource": {"uri": "file:///c.rs", "text": "fn c() {}"}},
                {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
            ])),
            dir.path(),
        )
        .unwrap();
        assert_eq!(
            input.content,
            "look\n[y](https://x.invalid/y)\nContents of file:///c.rs:\n```\nfn c() {}\n```"
        );
        assert_eq!(input.files, vec!["/tmp/a b.txt".to_owned()]);
        assert_eq!(input.images.len(), 1);
        assert!(input.images[0].ends_with(".png"));
        assert_eq!(
            std::fs::read(&input.images[0]).unwrap(),
            b"\x89PNG\r\n\x1a\n"
        );
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let bad =
            blocks(serde_json::json!([{"type": "image", "data": "%%%", "mimeType": "image/png"}]));
        assert!(to_input(&bad, dir.path()).unwrap_err().contains("base64"));
        assert!(to_input(&[], dir.path()).is_err());
        let slash = blocks(serde_json::json!([{"type": "text", "text": " /help "}]));
        assert_eq!(command_of(&slash).as_deref(), Some("/help"));
    }
}
