//! The targets: each reads the fuzzer's bytes the way jucode reads that input from
//! outside, and checks what must hold of any input.

use std::path::Path;
use std::sync::OnceLock;

use bytes::Bytes;
use futures_util::{FutureExt, StreamExt};
use serde_json::Value;

use super::{Reads, chunks, scratch_file};
use crate::protocol::{Frame, parse_op};
use crate::transport::jsonrpc;

/// The runtime of the targets that need one (one per process: building a runtime per
/// input would cost more than the input).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime")
    })
}

/// The frames stdin's reader (`transport::stdio::read_frames`) makes of these reads.
fn stdin_frames(reads: &[&[u8]]) -> Vec<Frame> {
    let mut frames = Vec::new();
    crate::transport::stdio::read_frames(Reads::new(reads), |frame| {
        frames.push(frame);
        true
    });
    frames
}

/// `jucode serve`'s stdin: the frames do not depend on how the bytes were cut into
/// reads; every line either is an op or gets an error message that says what is wrong;
/// an op serializes back to a line that parses to the same op.
pub fn serve_ops(data: &[u8]) {
    let reads = chunks(data);
    let frames = stdin_frames(&reads);
    assert_eq!(
        frames,
        stdin_frames(&[&reads.concat()]),
        "frames depend on reads"
    );
    for frame in frames {
        let Frame::Line(line) = frame else { continue };
        match parse_op(&line) {
            Ok(op) => {
                assert!(jucode_daemon::is_object(&line), "an op from a non-object");
                let again = serde_json::to_vec(&op).expect("an op serializes");
                assert_eq!(parse_op(&again).as_ref(), Ok(&op), "an op round-trips");
            }
            Err(message) => assert!(
                message.starts_with("invalid ") || message.starts_with("unknown op: "),
                "{message}"
            ),
        }
    }
}

/// A Chat Completions reply stream: the same events however the body is cut into
/// chunks (SSE events and UTF-8 characters split across reads included); nothing after
/// an error or after `Finished`, which comes at most once.
pub fn chat_stream(data: &[u8]) {
    let reads = chunks(data);
    let cut = reply_events(&reads);
    assert_eq!(
        cut,
        reply_events(&[&reads.concat()]),
        "events depend on chunks"
    );
    readings_agree(&reads.concat());
    let ends = cut
        .iter()
        .position(|event| event.starts_with("Err(") || event.starts_with("Ok(Finished("));
    if let Some(end) = ends {
        assert_eq!(end + 1, cut.len(), "events after the end: {cut:?}");
    }
}

fn reply_events(reads: &[&[u8]]) -> Vec<String> {
    let stream = crate::providers::sse_reply(body_of(reads));
    stream
        .map(|event| mask_minted_ids(&format!("{event:?}")))
        .collect::<Vec<_>>()
        .now_or_never()
        .expect("a stream of ready chunks never waits")
}

/// The chunks of a body read in place and as JSON trees, in lockstep: the same events
/// from every chunk, up to the first chunk that is not valid JSON. There the readings
/// may part on purpose: the in-place one skips fields it does not use without checking
/// every escape in them (a lone surrogate in an `id`), so it still reads the text such a
/// chunk carries, where the tree reading must drop the whole chunk.
fn readings_agree(body: &[u8]) {
    use crate::providers::sse::{ChunkParser, is_done};
    use eventsource_stream::Eventsource;
    let payloads: Vec<String> = body_of(&[body, b"\n\n"])
        .eventsource()
        .filter_map(|event| futures_util::future::ready(event.ok().map(|event| event.data)))
        .collect::<Vec<_>>()
        .now_or_never()
        .expect("a stream of ready chunks never waits");
    let mut in_place = ChunkParser::new();
    let mut lenient = ChunkParser::lenient_only();
    let shown = |result: Result<Vec<crate::engine::ModelEvent>, crate::engine::ModelError>| {
        mask_minted_ids(&format!("{result:?}"))
    };
    for data in &payloads {
        if is_done(data) {
            assert_eq!(shown(in_place.finish(true)), shown(lenient.finish(true)));
            return;
        }
        if !data.trim().is_empty() && serde_json::from_str::<Value>(data.trim()).is_err() {
            return;
        }
        let (a, b) = (in_place.push(data), lenient.push(data));
        let failed = a.is_err();
        assert_eq!(shown(a), shown(b), "the readings of {data:?} differ");
        if failed {
            return;
        }
    }
    assert_eq!(shown(in_place.finish(false)), shown(lenient.finish(false)));
}

type Body = futures_util::stream::Iter<std::vec::IntoIter<Result<Bytes, std::io::Error>>>;

fn body_of(reads: &[&[u8]]) -> Body {
    let body: Vec<Result<Bytes, std::io::Error>> = reads
        .iter()
        .map(|read| Ok(Bytes::copy_from_slice(read)))
        .collect();
    futures_util::stream::iter(body)
}

/// An Anthropic Messages body: as for [`chat_stream`], and every provider item is a JSON
/// object with a `type` (what is resent must be a block the API can read).
pub fn messages_stream(data: &[u8]) {
    native_stream(data, |body| crate::providers::messages_reply(body));
}

/// An OpenAI Responses body: as for [`messages_stream`].
pub fn responses_stream(data: &[u8]) {
    native_stream(data, |body| crate::providers::responses_reply(body));
}

fn native_stream(data: &[u8], reply: fn(Body) -> crate::engine::ModelStream) {
    use crate::engine::ModelEvent;
    let events = |reads: &[&[u8]]| -> Vec<Result<ModelEvent, crate::engine::ModelError>> {
        reply(body_of(reads))
            .collect::<Vec<_>>()
            .now_or_never()
            .expect("a stream of ready chunks never waits")
    };
    let reads = chunks(data);
    let cut = events(&reads);
    assert_eq!(cut, events(&[&reads.concat()]), "events depend on chunks");
    let end = cut
        .iter()
        .position(|event| matches!(event, Err(_) | Ok(ModelEvent::Finished(_))));
    if let Some(end) = end {
        assert_eq!(end + 1, cut.len(), "events after the end: {cut:?}");
    }
    for event in &cut {
        if let Ok(ModelEvent::ProviderItem { json, .. }) = event {
            let item: Value = serde_json::from_str(json).expect("an item is JSON");
            assert!(item.get("type").is_some_and(Value::is_string), "{json}");
        }
    }
}

/// A call the server sent without an id gets a fresh random one (`call_` and 24 hex
/// digits, unique within a session), so two runs over the same bytes differ there and
/// only there.
fn mask_minted_ids(event: &str) -> String {
    const PREFIX: &str = "id: \"call_";
    const DIGITS: usize = 24;
    let mut out = String::with_capacity(event.len());
    let mut rest = event;
    while let Some(at) = rest.find(PREFIX) {
        let (head, tail) = rest.split_at(at + PREFIX.len());
        out.push_str(head);
        let minted = tail.len() > DIGITS
            && tail.as_bytes()[DIGITS] == b'"'
            && tail[..DIGITS].bytes().all(|b| b.is_ascii_hexdigit());
        if minted {
            out.push_str("<minted>");
            rest = &tail[DIGITS..];
        } else {
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// `jucode acp`'s stdin through the real connection (its sessions in a daemon that is
/// not there): every message it writes is one JSON-RPC 2.0 line, and every error it
/// answers says what was wrong.
pub fn acp_messages(data: &[u8]) {
    let frames = stdin_frames(&chunks(data));
    let socket = scratch_file("no-daemon.sock");
    let written = runtime().block_on(async move {
        let (out, mut lines) = tokio::sync::mpsc::channel(64);
        let collect = tokio::spawn(async move {
            let mut all = Vec::new();
            while let Some(line) = lines.recv().await {
                all.push(line);
            }
            all
        });
        crate::transport::acp::serve_frames(frames, out, socket).await;
        collect.await.expect("the collector")
    });
    for line in written {
        check_jsonrpc_line(&line);
    }
}

/// One message jucode wrote: a JSON-RPC 2.0 object on one line; an error has a code
/// and a message.
fn check_jsonrpc_line(line: &[u8]) {
    assert_eq!(line.last(), Some(&b'\n'), "a message ends its line");
    assert!(
        !line[..line.len() - 1].contains(&b'\n'),
        "one line per message"
    );
    let value: Value = serde_json::from_slice(line).expect("jucode writes JSON");
    assert_eq!(value["jsonrpc"], "2.0", "{value}");
    if let Some(error) = value.get("error") {
        assert!(error["code"].is_i64(), "{value}");
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{value}"
        );
    }
}

/// A message read by either server: never a panic; what cannot be read gets an error
/// response to send, a JSON-RPC 2.0 line.
fn jsonrpc_message(text: &[u8]) {
    match jsonrpc::parse(text) {
        Err(answer) => check_jsonrpc_line(&answer),
        Ok(jsonrpc::Message::Request { method, .. })
        | Ok(jsonrpc::Message::Notification { method, .. }) => {
            assert!(!method.is_empty() || text.windows(2).any(|w| w == b"\"\""));
        }
        Ok(jsonrpc::Message::Response { .. }) => {}
    }
}

/// A WebSocket client's bytes: the request head (read in any cuts), the upgrade answer
/// for its key, then frames decoded with the server's limits; each text message is read
/// as JSON-RPC.
pub fn websocket(data: &[u8]) {
    use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};
    let reads = chunks(data);
    runtime().block_on(async {
        let mut stream = Reads::new(&reads);
        let Ok(request) = crate::transport::websocket::read_request(&mut stream).await else {
            return;
        };
        let _ = (
            request.is_upgrade(),
            request.subprotocols(),
            request.header("host"),
        );
        if let Some(key) = request.header("sec-websocket-key") {
            let answer = crate::transport::websocket::upgrade_response(key, Some("jucode"));
            assert!(answer.ends_with("\r\n\r\n"), "{answer:?}");
            assert_eq!(answer.matches("\r\n").count(), 6, "{answer:?}");
        }
        let limit = crate::transport::websocket::MAX_MESSAGE_BYTES;
        let config = WebSocketConfig::default()
            .max_message_size(Some(limit))
            .max_frame_size(Some(limit));
        let mut ws = tokio_tungstenite::WebSocketStream::from_partially_read(
            stream,
            request.rest,
            Role::Server,
            Some(config),
        )
        .await;
        while let Some(Ok(message)) = ws.next().await {
            if let tokio_tungstenite::tungstenite::Message::Text(text) = message {
                jsonrpc_message(text.as_bytes());
            }
        }
    });
}

/// A session file: any bytes load or give a clear error; what loads continues as a
/// store whose views can be built; the lines written for what loaded read back the same.
pub fn session_file(data: &[u8]) {
    use crate::engine::conversation::store::{NoJournal, Store};
    let path = scratch_file("session.jsonl");
    std::fs::write(&path, data).expect("write the scratch session file");
    let loaded = match crate::sessions::read(&path) {
        Ok(loaded) => loaded,
        Err(message) => return assert!(!message.is_empty()),
    };
    for warning in &loaded.warnings {
        assert!(warning.contains(&*path.to_string_lossy()), "{warning}");
    }
    let lines: Vec<u8> = loaded
        .entries
        .iter()
        .flat_map(crate::sessions::encode)
        .collect();
    std::fs::write(&path, &lines).expect("write the scratch session file");
    let again = crate::sessions::read(&path).expect("what was written reads");
    assert!(again.warnings.is_empty(), "{:?}", again.warnings);
    let relines: Vec<u8> = again
        .entries
        .iter()
        .flat_map(crate::sessions::encode)
        .collect();
    assert_eq!(lines, relines, "the lines written read back the same");
    match Store::load(loaded.entries, std::sync::Arc::new(NoJournal)) {
        Ok((store, _)) => {
            let _ = store.transcript_items();
            let _ = store.tree_nodes();
            let _ = store.checkpoint_items();
            let _ = store.first_user_message();
            let _ = store.request();
        }
        Err(message) => assert!(!message.is_empty()),
    }
}

/// `config.toml`: any text loads (problems are messages naming the file); writing an MCP
/// server into a file that loads without problems gives a file that loads without
/// problems, with that server as written and every other server as it was.
pub fn config(data: &[u8]) {
    use crate::config::{LoadedConfig, McpServerConfig, mcp};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = scratch_file("config.toml");
    let loaded = LoadedConfig::parse(&path, text);
    for problem in &loaded.problems {
        assert!(problem.contains(&*path.to_string_lossy()), "{problem}");
    }
    if !loaded.problems.is_empty() {
        return;
    }
    std::fs::write(&path, text).expect("write the scratch config");
    let server = McpServerConfig {
        command: Some("server".into()),
        args: vec!["--flag".into(), "a \"quoted\" arg".into()],
        ..McpServerConfig::default()
    };
    if mcp::persist_set(&path, "fuzzed", &server).is_err() {
        return;
    }
    let after = LoadedConfig::load(&path);
    assert!(after.problems.is_empty(), "{:?}", after.problems);
    assert_eq!(after.config.mcp_servers.get("fuzzed"), Some(&server));
    for (name, before) in &loaded.config.mcp_servers {
        if name != "fuzzed" {
            assert_eq!(after.config.mcp_servers.get(name), Some(before), "{name}");
        }
    }
}

/// The edit hunks shown for approval: applying all of them gives the new text, none the
/// old; any subset gives what a plain patch of the hunks *as displayed* gives (the
/// reference), so what a user approves is what is written; ids select the same hunks;
/// the diff stat counts the displayed lines.
pub fn edit_hunks(data: &[u8]) {
    use crate::tools::diff::{LineDiff, apply_hunks};
    let (selection, rest) = data.split_first().unwrap_or((&0, &[]));
    let text = String::from_utf8_lossy(rest);
    let (old, new) = text.split_once('\u{0}').unwrap_or((&text, ""));
    let diff = LineDiff::new(old, new);
    let count = diff.hunk_count();
    let all: Vec<usize> = (0..count).collect();
    assert_eq!(diff.apply(&all), new, "all hunks give the new text");
    assert_eq!(diff.apply(&[]), old, "no hunk gives the old text");
    let hunks = diff.hunks(0, "f");
    assert_eq!(hunks.len(), count);
    let chosen: Vec<usize> = all
        .iter()
        .copied()
        .filter(|n| selection >> (n % 8) & 1 == 1)
        .collect();
    let applied = diff.apply(&chosen);
    let ids: Vec<String> = chosen.iter().map(|&n| hunks[n].id.clone()).collect();
    assert_eq!(apply_hunks(old, new, &ids).as_deref(), Ok(applied.as_str()));
    let reference = patch(old, &hunks, &chosen);
    // A display cannot show carriage returns (a line may end `\r\r\n`), so the two
    // are compared without them; the bytes themselves are checked above.
    assert_eq!(
        applied.replace('\r', ""),
        reference.replace('\r', ""),
        "hunks {chosen:?} of {hunks:#?}"
    );
    let stat = diff.stat();
    let lines = hunks.iter().flat_map(|hunk| &hunk.lines);
    let added = lines.clone().filter(|line| line.starts_with('+')).count();
    let removed = lines.filter(|line| line.starts_with('-')).count();
    assert_eq!((stat.added, stat.removed), (added, removed));
}

/// A plain unified-diff patch of the `chosen` hunks, from their headers and lines as
/// displayed, checking every context and removed line against `old` (new lines end in
/// `\n` unless marked; the caller compares modulo CRLF, which a display cannot show).
fn patch(old: &str, hunks: &[crate::engine::Hunk], chosen: &[usize]) -> String {
    let old_lines: Vec<&str> = old.split_inclusive('\n').collect();
    // A line's end as the display drops it: `\n` or `\r\n`; a last line without a
    // newline keeps a carriage return it ends with.
    let strip = |line: &str| -> String {
        match line.strip_suffix('\n') {
            Some(text) => text.strip_suffix('\r').unwrap_or(text).to_owned(),
            None => line.to_owned(),
        }
    };
    let mut out = String::new();
    let mut at = 0;
    for (n, hunk) in hunks.iter().enumerate() {
        let start = hunk_old_start(&hunk.header);
        assert!(start >= at, "hunks overlap: {hunks:#?}");
        out.extend(old_lines[at..start].iter().copied());
        at = start;
        let mut lines = hunk.lines.iter().peekable();
        while let Some(line) = lines.next() {
            let no_newline = lines.peek().is_some_and(|next| next.starts_with('\\'));
            let (prefix, text) = line.split_at(1);
            match prefix {
                " " | "-" => {
                    let old_line = old_lines.get(at).expect("a hunk line past the end");
                    assert_eq!(
                        strip(old_line),
                        text,
                        "hunk {n} does not match the old text"
                    );
                    if prefix == " " || !chosen.contains(&n) {
                        out.push_str(old_line);
                    }
                    at += 1;
                }
                "+" if chosen.contains(&n) => {
                    out.push_str(text);
                    if !no_newline {
                        out.push('\n');
                    }
                }
                "+" | "\\" => {}
                other => panic!("a hunk line starts with {other:?}"),
            }
        }
    }
    out.extend(old_lines[at..].iter().copied());
    out
}

/// The first old line (0-based) of a header `@@ -a,b +c,d @@` (`a` is the line before an
/// empty range).
fn hunk_old_start(header: &str) -> usize {
    let old = header
        .strip_prefix("@@ -")
        .and_then(|rest| rest.split(' ').next())
        .expect("a unified-diff header");
    let (start, len) = old.split_once(',').unwrap_or((old, "1"));
    let start: usize = start.parse().expect("a line number");
    let len: usize = len.parse().expect("a line count");
    if len == 0 { start } else { start - 1 }
}

/// The shell classifier on any command line: never a panic. Gives the command and
/// whether it was called read-only (run without asking), for the differential check of
/// `fuzz/`, which has an independent shell parser.
pub fn shell_class(data: &[u8]) -> Option<(&str, bool)> {
    let command = std::str::from_utf8(data).ok()?;
    let class = crate::tools::classify_with_home(
        command,
        Path::new(SHELL_CWD),
        Some(Path::new(SHELL_HOME)),
    );
    Some((command, class == crate::tools::ShellClass::ReadOnly))
}

/// The working directory and home the shell target classifies in.
pub const SHELL_CWD: &str = "/work/project";
pub const SHELL_HOME: &str = "/home/user";
