//! What a session asks of the client that serves its files and commands
//! (`client_capabilities`, `client_request`, `client_response`): typed requests and
//! answers, so the tools and the engine carry values, not method names and JSON.
//!
//! On the wire a `client_request` names the request with `method` and `params`. Those are
//! the Agent Client Protocol's (`fs/read_text_file`, `terminal/create` ...), deliberately:
//! an editor behind `jucode acp` answers them as they are. This file is the only place
//! that knows them; `jucode acp` passes them through and nothing else builds them.

use serde::{Deserialize, Serialize};

/// A request to the client that serves the session's files and commands.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "method", content = "params")]
pub enum ClientCall {
    /// Answered with [`TextFile`].
    #[serde(rename = "fs/read_text_file")]
    ReadTextFile { path: String },
    /// Answered with anything (nothing is read from it).
    #[serde(rename = "fs/write_text_file")]
    WriteTextFile { path: String, content: String },
    /// Runs `command` with `args` in a terminal of the client; answered with
    /// [`CreatedTerminal`].
    #[serde(rename = "terminal/create")]
    CreateTerminal {
        command: String,
        args: Vec<String>,
        cwd: String,
        #[serde(rename = "outputByteLimit")]
        output_byte_limit: u64,
    },
    /// Answered with [`TerminalExit`] once the command has ended.
    #[serde(rename = "terminal/wait_for_exit")]
    WaitForTerminalExit {
        #[serde(rename = "terminalId")]
        terminal_id: String,
    },
    #[serde(rename = "terminal/kill")]
    KillTerminal {
        #[serde(rename = "terminalId")]
        terminal_id: String,
    },
    /// Answered with [`TerminalOutput`].
    #[serde(rename = "terminal/output")]
    TerminalOutput {
        #[serde(rename = "terminalId")]
        terminal_id: String,
    },
    #[serde(rename = "terminal/release")]
    ReleaseTerminal {
        #[serde(rename = "terminalId")]
        terminal_id: String,
    },
}

impl ClientCall {
    /// `client_request.method` and `.params`.
    pub fn method_and_params(&self) -> (String, serde_json::Value) {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        let method = value
            .get("method")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let params = value
            .get_mut("params")
            .map(serde_json::Value::take)
            .unwrap_or_default();
        (method, params)
    }

    /// The method's name, for messages ("the client did not answer ...").
    pub fn method(&self) -> String {
        self.method_and_params().0
    }
}

/// The answer to [`ClientCall::ReadTextFile`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TextFile {
    pub content: String,
}

/// The answer to [`ClientCall::CreateTerminal`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CreatedTerminal {
    #[serde(rename = "terminalId")]
    pub terminal_id: String,
}

/// The answer to [`ClientCall::WaitForTerminalExit`]: an exit code, or the signal that
/// ended the command.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TerminalExit {
    #[serde(rename = "exitCode", default)]
    pub exit_code: Option<i64>,
    #[serde(default)]
    pub signal: Option<String>,
}

/// The answer to [`ClientCall::TerminalOutput`].
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TerminalOutput {
    pub output: String,
}

/// Reads `answer` (a `client_response.result`) as `T`, or says what is wrong with it.
pub fn answer_as<T: serde::de::DeserializeOwned>(
    answer: serde_json::Value,
    what: &str,
) -> Result<T, String> {
    serde_json::from_value(answer).map_err(|err| format!("the client's answer {what}: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_are_the_wire_s_method_and_params() {
        let call = ClientCall::CreateTerminal {
            command: "bash".into(),
            args: vec!["-c".into(), "make".into()],
            cwd: "/p".into(),
            output_byte_limit: 32,
        };
        assert_eq!(
            call.method_and_params(),
            (
                "terminal/create".to_owned(),
                json!({"command": "bash", "args": ["-c", "make"], "cwd": "/p", "outputByteLimit": 32})
            )
        );
        let wait = ClientCall::WaitForTerminalExit {
            terminal_id: "t1".into(),
        };
        assert_eq!(
            wait.method_and_params(),
            (
                "terminal/wait_for_exit".to_owned(),
                json!({"terminalId": "t1"})
            )
        );
        let exit: TerminalExit =
            answer_as(json!({"exitCode": null, "signal": "SIGKILL"}), "").unwrap();
        assert_eq!(exit.signal.as_deref(), Some("SIGKILL"));
        assert!(answer_as::<TextFile>(json!({"text": "x"}), "has no content").is_err());
    }
}
