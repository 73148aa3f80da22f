//! Turning a submitted [`UserInput`] into what the model reads and what clients see.
//!
//! Images are read, sniffed and base64-encoded here (on the blocking pool: they can be
//! large). An image that cannot be attached is skipped with a notice rather than
//! failing the message, so a stale path never costs the user their text. Files are not
//! read at all: the model is told where they are and opens them with its own tools.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;

use crate::engine::conversation::store::{EntryBody, Prepared};
use crate::engine::ports::model::{ImageData, Message};
use crate::protocol::{UserInput, UserMessageEvent};

/// Images above this size are refused: providers reject them and they bloat every
/// later request of the session.
const MAX_IMAGE_BYTES: u64 = 20 * 1024 * 1024;

pub struct PreparedInput {
    /// The store entry, its tokens counted (on the blocking pool, with the images).
    pub entry: Prepared,
    pub shown: UserMessageEvent,
    /// One `info` line per image that could not be attached.
    pub notices: Vec<String>,
}

/// `steered`: the message joins a running turn instead of starting one.
pub async fn prepare(input: UserInput, cwd: PathBuf, steered: bool) -> PreparedInput {
    // Only images are read from disk: a message without any needs no thread of the
    // blocking pool (whose first one a new session would wait to be created).
    if input.images.is_empty() {
        return prepare_blocking(input, &cwd, steered);
    }
    let task = tokio::task::spawn_blocking(move || prepare_blocking(input, &cwd, steered));
    match task.await {
        Ok(prepared) => prepared,
        Err(err) => {
            let shown = UserMessageEvent::default();
            PreparedInput {
                entry: Prepared::counted(
                    EntryBody::User {
                        message: Message::User {
                            text: String::new(),
                            images: Vec::new(),
                        },
                        shown: shown.clone(),
                        steered,
                    },
                    0,
                ),
                shown,
                notices: vec![format!("internal error while reading attachments: {err}")],
            }
        }
    }
}

fn prepare_blocking(input: UserInput, cwd: &Path, steered: bool) -> PreparedInput {
    let mut notices = Vec::new();
    let mut images = Vec::new();
    let mut attached_paths = Vec::new();
    for path in &input.images {
        match load_image(&cwd.join(path)) {
            Ok(image) => {
                images.push(image);
                attached_paths.push(path.clone());
            }
            Err(reason) => notices.push(format!("image {path} was not attached: {reason}")),
        }
    }
    let text = model_text(&input.content, &input.files, cwd);
    let shown = UserMessageEvent {
        content: input.content,
        images: attached_paths,
        files: input.files,
    };
    PreparedInput {
        entry: Prepared::new(EntryBody::User {
            message: Message::User { text, images },
            shown: shown.clone(),
            steered,
        }),
        shown,
        notices,
    }
}

/// The text the model reads: the user's words, then one line per attached file.
fn model_text(content: &str, files: &[String], cwd: &Path) -> String {
    let mut text = content.to_owned();
    for file in files {
        let path = cwd.join(file);
        let name = path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| file.clone());
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&format!(
            "[Attached file \"{name}\" is saved at: {}]",
            path.display()
        ));
    }
    text
}

fn load_image(path: &Path) -> Result<ImageData, String> {
    let meta = std::fs::metadata(path).map_err(|err| describe_io(&err))?;
    if !meta.is_file() {
        return Err("not a regular file".to_owned());
    }
    if meta.len() > MAX_IMAGE_BYTES {
        return Err(format!(
            "{} bytes is over the {} MiB limit",
            meta.len(),
            MAX_IMAGE_BYTES / (1024 * 1024)
        ));
    }
    let bytes = std::fs::read(path).map_err(|err| describe_io(&err))?;
    let mime = sniff_image(&bytes).ok_or("not a PNG, JPEG, GIF or WebP image")?;
    Ok(ImageData {
        mime,
        base64: Arc::from(base64::engine::general_purpose::STANDARD.encode(&bytes)),
    })
}

fn describe_io(err: &std::io::Error) -> String {
    match err.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_owned(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
        _ => err.to_string(),
    }
}

/// Decides the type from the content, not the name: a `.png` that is really a JPEG must
/// still be sent with the right MIME type or providers reject it.
fn sniff_image(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_lines_follow_the_text() {
        let text = model_text(
            "look",
            &["/tmp/a b.log".into(), "rel/x.csv".into()],
            Path::new("/w"),
        );
        assert_eq!(
            text,
            "look\n[Attached file \"a b.log\" is saved at: /tmp/a b.log]\n[Attached file \"x.csv\" is saved at: /w/rel/x.csv]"
        );
    }

    #[test]
    fn images_are_sniffed_and_bad_ones_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let png = dir.path().join("shot.png");
        std::fs::write(&png, b"\x89PNG\r\n\x1a\nrest").unwrap();
        let fake = dir.path().join("fake.png");
        std::fs::write(&fake, b"hello").unwrap();
        let input = UserInput {
            content: "see".into(),
            images: vec![
                png.display().to_string(),
                fake.display().to_string(),
                "/nope.png".into(),
            ],
            files: vec![],
        };
        let prepared = prepare_blocking(input, dir.path(), false);
        let EntryBody::User {
            message: Message::User { text, images },
            ..
        } = prepared.entry.body()
        else {
            panic!("expected a user message");
        };
        assert_eq!(text, "see");
        assert_eq!(images.len(), 1);
        assert_eq!(images[0].mime, "image/png");
        assert_eq!(prepared.shown.images, vec![png.display().to_string()]);
        assert_eq!(prepared.notices.len(), 2);
        assert!(
            prepared.notices[0].contains("not a PNG"),
            "{:?}",
            prepared.notices
        );
        assert!(
            prepared.notices[1].ends_with("no such file"),
            "{:?}",
            prepared.notices
        );
    }
}
