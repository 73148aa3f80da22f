//! Drives `jucode acp` the way an editor does: JSON-RPC messages one a line on stdin,
//! messages read line by line from stdout, in a private `JUCODE_HOME`. Messages not
//! waited for yet are kept, in order, for the next wait.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;

use serde_json::{Value, json};

use super::serve::{EVENT_TIMEOUT, Home};

pub struct Acp {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    backlog: VecDeque<Value>,
    next_id: i64,
    /// The method of each request sent, by id, to check the answers' shapes.
    methods: std::collections::HashMap<i64, String>,
    /// Every message read, for failure messages.
    pub seen: Vec<Value>,
}

impl Acp {
    /// `jucode acp` through the daemon of `home` (`in_process`: `--in-process`).
    pub fn start(home: &Home, in_process: bool) -> Acp {
        let args: &[&str] = if in_process { &["--in-process"] } else { &[] };
        Self::start_with(home, args, &[])
    }

    /// `jucode acp ARGS` in `home`, with more environment.
    pub fn start_with(home: &Home, args: &[&str], env: &[(&str, &str)]) -> Acp {
        let mut command = Command::new(env!("CARGO_BIN_EXE_jucode"));
        command.arg("acp").args(args);
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home.path())
            .env("JUCODE_HOME", home.path())
            .env("RUST_LOG", "warn")
            .current_dir(home.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("start jucode acp");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Acp {
            stdin: child.stdin.take(),
            child,
            lines,
            backlog: VecDeque::new(),
            next_id: 100,
            methods: std::collections::HashMap::new(),
            seen: Vec::new(),
        }
    }

    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).expect("write");
        stdin.write_all(b"\n").expect("write newline");
        stdin.flush().expect("flush");
    }

    pub fn send(&mut self, message: Value) {
        self.send_raw(&message.to_string());
    }

    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Sends a request; returns its id.
    pub fn request(&mut self, method: &str, params: Value) -> i64 {
        self.next_id += 1;
        let id = self.next_id;
        self.methods.insert(id, method.to_owned());
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Answers a request the agent made.
    pub fn respond(&mut self, id: &Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result}));
    }

    /// The next line exactly as the agent wrote it.
    pub fn next_raw(&mut self) -> String {
        let line = self
            .lines
            .recv_timeout(EVENT_TIMEOUT)
            .unwrap_or_else(|err| panic!("no line within {EVENT_TIMEOUT:?} ({err})"));
        if let Ok(message) = serde_json::from_str::<Value>(&line) {
            self.seen.push(message);
        }
        line
    }

    fn read(&mut self) -> Value {
        match self.lines.recv_timeout(EVENT_TIMEOUT) {
            Ok(line) => {
                let message: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|err| panic!("stdout carried a non-JSON line {line:?}: {err}"));
                assert_eq!(message["jsonrpc"], "2.0", "{message}");
                let method = message["id"]
                    .as_i64()
                    .and_then(|id| self.methods.get(&id))
                    .map(String::as_str);
                super::acp_schema::assert_message(&message, method);
                self.seen.push(message.clone());
                message
            }
            Err(err) => panic!(
                "no message within {EVENT_TIMEOUT:?} ({err}); seen:\n{}",
                self.seen
                    .iter()
                    .map(Value::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        }
    }

    /// The first message (kept or new) for which `pred` holds; the others stay kept.
    pub fn until(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(index) = self.backlog.iter().position(&pred) {
            return self.backlog.remove(index).expect("index in range");
        }
        loop {
            let message = self.read();
            if pred(&message) {
                return message;
            }
            self.backlog.push_back(message);
        }
    }

    /// Every kept message, and those that come until `pred` holds (inclusive).
    pub fn collect_until(&mut self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut out: Vec<Value> = Vec::new();
        while let Some(message) = self.backlog.pop_front() {
            let stop = pred(&message);
            out.push(message);
            if stop {
                return out;
            }
        }
        loop {
            let message = self.read();
            let stop = pred(&message);
            out.push(message);
            if stop {
                return out;
            }
        }
    }

    pub fn response(&mut self, id: i64) -> Value {
        self.until(|m| m["id"] == id && m.get("method").is_none())
    }

    /// The result of a request, failing the test on an error.
    pub fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        let response = self.response(id);
        assert!(response.get("error").is_none(), "{method}: {response}");
        response["result"].clone()
    }

    /// The error of a request, failing the test on a result.
    pub fn call_err(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        let response = self.response(id);
        assert!(response.get("result").is_none(), "{method}: {response}");
        response["error"].clone()
    }

    pub fn initialize(&mut self, capabilities: Value) -> Value {
        self.call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": capabilities, "clientInfo": {"name": "test", "version": "1"}}),
        )
    }

    /// `session/new` in `cwd`; returns the session id.
    pub fn new_session(&mut self, cwd: &std::path::Path) -> String {
        let result = self.call("session/new", json!({"cwd": cwd, "mcpServers": []}));
        result["sessionId"].as_str().expect("sessionId").to_owned()
    }

    /// The next request the agent makes with `method`.
    pub fn agent_request(&mut self, method: &str) -> Value {
        self.until(|m| m["method"] == method && m.get("id").is_some())
    }

    /// Ends the process (stdin closed) and waits for it.
    pub fn finish(mut self) -> std::process::ExitStatus {
        use wait_timeout::ChildExt;
        self.close_stdin();
        self.child
            .wait_timeout(EVENT_TIMEOUT)
            .expect("wait")
            .expect("jucode acp exits when stdin ends")
    }
}

impl Drop for Acp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `session/update` notifications among `messages`, as their `update`s.
pub fn updates(messages: &[Value]) -> Vec<Value> {
    messages
        .iter()
        .filter(|m| m["method"] == "session/update")
        .map(|m| m["params"]["update"].clone())
        .collect()
}

/// The `sessionUpdate` kinds of `updates`.
pub fn kinds(updates: &[Value]) -> Vec<String> {
    updates
        .iter()
        .map(|u| u["sessionUpdate"].as_str().unwrap_or("").to_owned())
        .collect()
}
