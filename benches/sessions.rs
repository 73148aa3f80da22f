//! The sessions benchmark: what a long conversation costs. Loading a 10,000-entry session
//! and showing its transcript, a turn's cost at turn 1 and at turn 2,500, building a
//! model request over 10,000 entries, a late joiner attaching to a 10,000-entry session
//! while another client streams, and how soon a turn ends after the model's last byte.
//! Run with `cargo bench --bench sessions`; figures go to `docs/performance.md`.
//!
//! This is a measuring tool, not a test: it asserts nothing about timings.

#[path = "../tests/common/mock.rs"]
#[allow(dead_code)]
mod mock;
mod support;

use std::io::{BufRead, BufReader, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jucode::engine::Message;
use jucode::engine::conversation::store::{EntryBody, NoJournal, Prepared, SessionMeta, Store};
use jucode::protocol::UserMessageEvent;
use serde_json::{Value, json};
use support::{BIN, Home, Serve, percentile};

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Writes a session of `turns` user/assistant pairs (`2 * turns + 1` entries) straight
/// in the file format (`docs/sessions.md`); returns its id.
fn write_session(home: &Home, turns: usize) -> String {
    let id = "01a00000-0000-7000-8000-000000000001";
    let cwd = home.path().display().to_string();
    let key = cwd.replace('/', "-");
    let dir = home.path().join("sessions").join(key);
    std::fs::create_dir_all(&dir).unwrap();
    let mut file =
        std::io::BufWriter::new(std::fs::File::create(dir.join(format!("{id}.jsonl"))).unwrap());
    let line = |value: Value| format!("{value}\n");
    file.write_all(line(json!({"id":"e1","parent":null,"at":1,"tokens":0,"kind":"session","format":1,"session":id,"cwd":cwd,"model":"bench/m","created":1,"chat":false})).as_bytes()).unwrap();
    let mut parent = "e1".to_owned();
    for turn in 0..turns {
        let user = format!("e{}", 2 * turn + 2);
        let reply = format!("e{}", 2 * turn + 3);
        let text = format!(
            "question {turn}: how does the parser handle a nested expression like (a + (b * c))?"
        );
        file.write_all(line(json!({"id":user,"parent":parent,"at":2,"tokens":24,"kind":"user","content":text,"text":text})).as_bytes()).unwrap();
        let answer = format!(
            "answer {turn}: it recurses on each parenthesis, building one node per operator, then folds the nodes by precedence. See src/parse.rs line {turn}."
        );
        file.write_all(line(json!({"id":reply,"parent":user,"at":3,"tokens":40,"kind":"assistant","text":answer})).as_bytes()).unwrap();
        parent = reply;
    }
    file.flush().unwrap();
    id.to_owned()
}

fn load_and_show(home: &Home, id: &str) {
    let mut samples = Vec::new();
    for _ in 0..5 {
        let (mut serve, started) =
            Serve::start_with(home, &["serve", "--in-process", "--session", id]);
        serve.send(&json!({"op": "command", "input": "/transcript"}));
        serve.until("\"type\":\"transcript\"");
        samples.push(started.elapsed());
        serve.quit();
    }
    println!(
        "load a 10001-entry session and emit its transcript: p50 {}  max {}  (process start included, 5 runs)",
        ms(percentile(&mut samples.clone(), 0.5)),
        ms(*samples.iter().max().unwrap())
    );
}

fn turn_cost_growth() {
    let home = Home::new();
    let turns = 2500;
    let reply = json!({"text": "ok", "chunk": 8}).to_string();
    let script: String = (0..turns).map(|_| format!("{reply}\n")).collect();
    std::fs::write(home.path().join("short.jsonl"), script).unwrap();
    home.write_config(
        "model = \"bench/short\"\n[providers.bench]\nkind = \"replay\"\nscript = \"short.jsonl\"\n",
    );
    let (mut serve, _) = Serve::start(&home, true);
    serve.until("\"mcp_servers\"");
    let mut times = Vec::with_capacity(turns);
    for turn in 0..turns {
        let sent = Instant::now();
        serve.send(&json!({"op": "user_message", "content": format!("message number {turn}")}));
        serve.until("\"ready\"");
        times.push(sent.elapsed());
    }
    let mean = |slice: &[Duration]| slice.iter().sum::<Duration>() / slice.len() as u32;
    println!(
        "turn cost: turn 1 {}, turns 2-11 mean {}, turns {}-{} mean {}, turn {} {}",
        ms(times[0]),
        ms(mean(&times[1..11])),
        turns - 9,
        turns,
        ms(mean(&times[turns - 10..])),
        turns,
        ms(times[turns - 1])
    );
    serve.quit();
}

fn request_build() {
    let meta = SessionMeta {
        id: "s".into(),
        cwd: "/p".into(),
        model: "m/m".into(),
        created: 0,
        chat: false,
        engine: None,
    };
    let mut store = Store::new(meta, Arc::new(NoJournal));
    for turn in 0..5000 {
        let text = format!("question {turn} about the parser");
        store.append(Prepared::counted(
            EntryBody::User {
                message: Message::User {
                    text: text.clone(),
                    images: Vec::new(),
                },
                shown: UserMessageEvent {
                    content: text,
                    ..Default::default()
                },
                steered: false,
            },
            8,
        ));
        store.append(Prepared::counted(
            EntryBody::Assistant(Message::Assistant {
                text: format!("answer {turn}"),
                reasoning: String::new(),
                tool_calls: Vec::new(),
                provider_items: None,
            }),
            4,
        ));
    }
    let mut build = Vec::new();
    let mut show = Vec::new();
    for _ in 0..200 {
        let started = Instant::now();
        let request = store.request();
        build.push(started.elapsed());
        std::hint::black_box(request);
        let started = Instant::now();
        let items = store.transcript_items();
        show.push(started.elapsed());
        std::hint::black_box(items);
    }
    println!(
        "model request over {} entries: p50 {}  p95 {}  (reference counts, no copy); transcript items p50 {}",
        store.len(),
        ms(percentile(&mut build, 0.5)),
        ms(percentile(&mut build, 0.95)),
        ms(percentile(&mut show, 0.5))
    );
}

fn late_joiner() {
    let home = Home::new();
    let id = write_session(&home, 5000);
    let deltas = 100_000;
    home.long_replies(deltas, 1);
    // The saved conversation holds 320k tokens: a window that fits it, so the turn
    // streams instead of compacting first.
    let config = std::fs::read_to_string(home.path().join("config.toml")).unwrap();
    home.write_config(&format!("{config}context_window = 2000000\n"));
    let (mut streaming, _) = Serve::start_with(&home, &["serve", "--session", &id]);
    streaming.until("\"type\":\"status\"");
    streaming.send(&json!({"op": "user_message", "content": "stream"}));
    let mut gaps = Vec::with_capacity(deltas);
    let mut stamps = Vec::with_capacity(deltas);
    let mut last = Instant::now();
    let mut seen = 0;
    let mut attached_at = None;
    let (tx, rx) = std::sync::mpsc::channel::<Instant>();
    let home_path = home.path().to_owned();
    let id_clone = id.clone();
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let attacher = std::thread::spawn(move || {
        let home = HomeRef(home_path);
        wait.recv().unwrap();
        let (mut stream, mut reader) = home.raw();
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let started = Instant::now();
        writeln!(stream, "{}", json!({"op": "attach", "session": id_clone})).unwrap();
        let _ = tx.send(started);
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap() == 0 || line.contains("\"type\":\"status\"") {
                return started.elapsed();
            }
        }
    });
    loop {
        let line = streaming.read_line();
        if line.contains("\"assistant_delta\"") {
            let now = Instant::now();
            gaps.push(now - last);
            stamps.push(now);
            last = now;
            seen += 1;
            if seen == deltas / 5 {
                go.send(()).unwrap();
            }
        } else if line.contains("\"ready\"") {
            break;
        }
    }
    if let Ok(at) = rx.try_recv() {
        attached_at = Some(at);
    }
    let snapshot = attacher.join().unwrap();
    let max = gaps[1..].iter().max().copied().unwrap_or_default();
    // The longest gap while the late joiner attached (its first 50 ms), and elsewhere.
    let during = attached_at.map(|at| {
        gaps.iter()
            .zip(&stamps)
            .filter(|(_, stamp)| **stamp >= at && **stamp <= at + Duration::from_millis(50))
            .map(|(gap, _)| *gap)
            .max()
            .unwrap_or_default()
    });
    println!(
        "  longest gap while the joiner attached: {}",
        during.map_or("(not measured)".to_owned(), ms)
    );
    let mut sorted = gaps[1..].to_vec();
    println!(
        "late joiner on a 10001-entry session while {deltas} deltas stream: its snapshot in {}; the streaming client's longest gap between deltas {} (p99.9 {}){}",
        ms(snapshot),
        ms(max),
        ms(percentile(&mut sorted, 0.999)),
        if attached_at.is_some() {
            ""
        } else {
            " (attach raced the end)"
        }
    );
    streaming.quit();
}

struct HomeRef(std::path::PathBuf);

impl HomeRef {
    fn raw(
        &self,
    ) -> (
        std::os::unix::net::UnixStream,
        BufReader<std::os::unix::net::UnixStream>,
    ) {
        let stream =
            std::os::unix::net::UnixStream::connect(self.0.join("daemon.sock")).expect("connect");
        let reader = BufReader::with_capacity(1 << 20, stream.try_clone().unwrap());
        (stream, reader)
    }
}

/// From the mock model's last byte to `status: ready` on the client, for a fresh
/// session's first turn, its second, one after 12 s idle, and the first turn of a
/// session whose first message comes 1 s after it started.
fn turn_end(in_process: bool) {
    let home = Home::new();
    let model = mock::MockModel::start();
    home.write_config(&format!(
        "model = \"mock/m\"\n[providers.mock]\nkind = \"openai\"\nbase_url = \"{}\"\n",
        model.base_url()
    ));
    if !in_process {
        let _ = home.command(&["daemon", "start"]).output();
    }
    let (mut serve, _) = Serve::start(&home, in_process);
    serve.until("\"mcp_servers\"");
    let mut after = Vec::new();
    for (turn, idle) in [(0, 0), (1, 0), (2, 12)] {
        if idle > 0 {
            std::thread::sleep(Duration::from_secs(idle));
        }
        model.push(mock::text_reply(&["The answer is 42."]));
        serve.send(&json!({"op": "user_message", "content": format!("question {turn}")}));
        serve.until("\"ready\"");
        let ready = Instant::now();
        let end = model.reply_ends()[turn];
        after.push(ready.saturating_duration_since(end));
    }
    println!(
        "model's last byte → status ready ({}): first turn {}, second {}, after 12 s idle {}",
        if in_process {
            "in process"
        } else {
            "through the daemon"
        },
        ms(after[0]),
        ms(after[1]),
        ms(after[2])
    );
    serve.quit();
    // A user types for a while before the first message: the session's start-up work
    // (its tokenizer's pattern, compiled in the background) is done by then.
    let (mut serve, _) = Serve::start(&home, in_process);
    serve.until("\"mcp_servers\"");
    std::thread::sleep(Duration::from_secs(1));
    let turns_before = model.reply_ends().len();
    model.push(mock::text_reply(&["The answer is 42."]));
    serve.send(&json!({"op": "user_message", "content": "a question typed in a second"}));
    serve.until("\"ready\"");
    let ready = Instant::now();
    let end = model.reply_ends()[turns_before];
    println!(
        "  a new session's first turn, its message sent 1 s after start: {}",
        ms(ready.saturating_duration_since(end))
    );
    serve.quit();
}

/// 10,000 saved sessions in 20 projects: listing them in process (the first time, which
/// builds the cache, and again), with `jucode sessions`, and with the daemon's
/// `sessions` op.
fn many_saved() {
    let home = Home::new();
    let count = 10_000;
    for n in 0..count {
        let cwd = format!("/work/project-{}", n % 20);
        let dir = home.path().join("sessions").join(cwd.replace('/', "-"));
        std::fs::create_dir_all(&dir).unwrap();
        let id = format!("01a00000-0000-7000-8000-{n:012}");
        let text = format!(
            "{}\n{}\n",
            json!({"id":"e1","parent":null,"at":1,"tokens":0,"kind":"session","format":1,"session":id,"cwd":cwd,"model":"bench/m","created":n,"chat":false}),
            json!({"id":"e2","parent":"e1","at":2,"tokens":5,"kind":"user","content":format!("fix issue {n} in the parser"),"text":format!("fix issue {n} in the parser")})
        );
        std::fs::write(dir.join(format!("{id}.jsonl")), text).unwrap();
    }
    let index = home.path().join("sessions/index.json");
    let started = Instant::now();
    let listed = jucode::sessions::list(home.path(), None).unwrap();
    let cold = started.elapsed();
    assert_eq!(listed.len(), count);
    let mut warm = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        std::hint::black_box(jucode::sessions::list(home.path(), None).unwrap());
        warm.push(started.elapsed());
    }
    let mut cli = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let output = home.command(&["sessions"]).output().unwrap();
        cli.push(started.elapsed());
        assert!(output.status.success());
    }
    let mut uncached = Vec::new();
    for _ in 0..3 {
        std::fs::remove_file(&index).unwrap();
        let started = Instant::now();
        std::hint::black_box(jucode::sessions::list(home.path(), None).unwrap());
        uncached.push(started.elapsed());
    }
    let started = home.command(&["daemon", "start"]).output().unwrap();
    assert!(started.status.success(), "{started:?}");
    let (mut stream, mut reader) = HomeRef(home.path().to_owned()).raw();
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let mut op = Vec::new();
    for _ in 0..10 {
        let started = Instant::now();
        writeln!(stream, "{}", json!({"op": "sessions"})).unwrap();
        loop {
            line.clear();
            reader.read_line(&mut line).unwrap();
            if line.contains("\"type\":\"sessions\"") {
                break;
            }
        }
        op.push(started.elapsed());
    }
    println!(
        "{count} saved sessions: list in process p50 {} (without the cache {}; the first, building it, {}); `jucode sessions` p50 {} (process start included); daemon `sessions` op p50 {} ({} KiB answer)",
        ms(percentile(&mut warm, 0.5)),
        ms(percentile(&mut uncached, 0.5)),
        ms(cold),
        ms(percentile(&mut cli, 0.5)),
        ms(percentile(&mut op, 0.5)),
        line.len() / 1024
    );
    let _ = home.command(&["daemon", "stop"]).output();
}

fn main() {
    println!("jucode sessions benchmark ({BIN})");
    // `cargo bench --bench sessions -- <word>` runs the measures whose name has it.
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let run = |name: &str| only.is_empty() || only.iter().any(|word| name.contains(word.as_str()));
    if run("request") {
        request_build();
    }
    if run("load") {
        let home = Home::new();
        let id = write_session(&home, 5000);
        load_and_show(&home, &id);
    }
    if run("turn_end") {
        turn_end(true);
        turn_end(false);
    }
    if run("late_joiner") {
        late_joiner();
    }
    if run("turn_cost") {
        turn_cost_growth();
    }
    if run("many_saved") {
        many_saved();
    }
}
