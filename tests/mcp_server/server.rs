//! A small MCP server for jucode's end-to-end tests, on rmcp's server side over stdio.
//!
//! Built by `cargo test` as the example `mcp_test_server` (an example, so it is never
//! installed with jucode); `tests/common/mcp.rs` finds it. Its behaviour is chosen by
//! arguments, so one binary plays every server a test needs:
//!
//! - `--delay-ms N`: wait N ms before answering anything (a slow start);
//! - `--hang`: never answer (a hung server);
//! - `--fail-start`: write a reason to stderr and exit 2 before the handshake;
//! - `--elicit`: also offer the tool `ask` (read-only), which asks the user, through an
//!   `elicitation/create` form (a required `name`, a `color` enum defaulting to
//!   `green`, an integer `age` in 0..=150), and answers with what came back.
//!
//! Tools: `read_note` (`readOnlyHint`), `write_note` (writes `<name>.note` in its working
//! directory), `whoami` (read-only: its cwd and `$MCP_TEST_VALUE`), `picture` (text, an
//! image and structured content), `fail` (an error result), `sleep` (read-only, waits
//! `ms`), `crash` (exits 3), `add_tool` (adds the tool `extra` and says the list
//! changed). Prompt: `review` with `path` (required) and `focus`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientResult, ElicitRequest,
    ElicitRequestParams, GetPromptRequestParams, GetPromptResponse, GetPromptResult,
    Implementation, InitializeResult, ListPromptsResult, ListToolsResult, PaginatedRequestParams,
    Prompt, ServerCapabilities, ServerRequest, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// A 1×1 PNG.
const PIXEL: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

#[derive(Clone, Default)]
struct TestServer {
    extra: Arc<AtomicBool>,
    elicit: bool,
}

fn tool(value: Value) -> Tool {
    serde_json::from_value(value).expect("a valid tool")
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

fn text_result(text: impl Into<String>, is_error: bool) -> CallToolResult {
    serde_json::from_value(json!({
        "content": [{"type": "text", "text": text.into()}],
        "isError": is_error,
    }))
    .expect("a valid result")
}

impl TestServer {
    fn tools(&self) -> Vec<Tool> {
        let name = json!({"name": {"type": "string"}});
        let mut tools = vec![
            tool(json!({"name": "read_note", "description": "Read a note",
                "inputSchema": object(name.clone(), &["name"]),
                "annotations": {"readOnlyHint": true}})),
            tool(json!({"name": "write_note", "description": "Write a note",
                "inputSchema": object(json!({"name": {"type": "string"}, "text": {"type": "string"}}), &["name", "text"])})),
            tool(
                json!({"name": "whoami", "description": "Where the server runs",
                "inputSchema": object(json!({}), &[]), "annotations": {"readOnlyHint": true}}),
            ),
            tool(json!({"name": "picture", "description": "A picture",
                "inputSchema": object(json!({}), &[]), "annotations": {"readOnlyHint": true}})),
            tool(json!({"name": "fail", "description": "Always fails",
                "inputSchema": object(json!({}), &[]), "annotations": {"readOnlyHint": true}})),
            tool(json!({"name": "sleep", "description": "Waits",
                "inputSchema": object(json!({"ms": {"type": "integer"}}), &["ms"]),
                "annotations": {"readOnlyHint": true}})),
            tool(json!({"name": "crash", "description": "Exits",
                "inputSchema": object(json!({}), &[]), "annotations": {"readOnlyHint": true}})),
            tool(json!({"name": "add_tool", "description": "Adds a tool",
                "inputSchema": object(json!({}), &[]), "annotations": {"readOnlyHint": true}})),
        ];
        if self.elicit {
            tools.push(tool(json!({"name": "ask", "description": "Asks the user",
                "inputSchema": object(json!({}), &[]), "annotations": {"readOnlyHint": true}})));
        }
        if self.extra.load(Ordering::SeqCst) {
            tools.push(tool(json!({"name": "extra", "description": "Added later",
                "inputSchema": object(json!({}), &[]), "annotations": {"readOnlyHint": true}})));
        }
        tools
    }

    async fn call(
        &self,
        name: &str,
        args: &serde_json::Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let arg = |key: &str| args.get(key).and_then(Value::as_str).unwrap_or_default();
        let cwd = std::env::current_dir().unwrap_or_default();
        match name {
            "read_note" => {
                let path = cwd.join(format!("{}.note", arg("name")));
                let text =
                    std::fs::read_to_string(path).unwrap_or_else(|_| "(no such note)".into());
                text_result(format!("note {}: {text}", arg("name")), false)
            }
            "write_note" => {
                match std::fs::write(cwd.join(format!("{}.note", arg("name"))), arg("text")) {
                    Ok(()) => text_result(format!("wrote {}", arg("name")), false),
                    Err(err) => text_result(format!("cannot write: {err}"), true),
                }
            }
            "whoami" => {
                let value = std::env::var("MCP_TEST_VALUE").unwrap_or_default();
                text_result(
                    format!(
                        "cwd={} value={value} pid={}",
                        cwd.display(),
                        std::process::id()
                    ),
                    false,
                )
            }
            "picture" => serde_json::from_value(json!({
                "content": [
                    {"type": "text", "text": "a red pixel"},
                    {"type": "image", "data": PIXEL, "mimeType": "image/png"},
                ],
                "structuredContent": {"width": 1, "height": 1},
            }))
            .expect("a valid result"),
            "fail" => text_result("it failed on purpose", true),
            "sleep" => {
                let ms = args.get("ms").and_then(Value::as_u64).unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                text_result("slept", false)
            }
            "crash" => {
                eprintln!("crashing on purpose");
                std::process::exit(3);
            }
            "add_tool" => {
                self.extra.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                text_result("added extra", false)
            }
            "extra" => text_result("extra ran", false),
            "ask" if self.elicit => ask(context).await,
            other => text_result(format!("no tool {other}"), true),
        }
    }
}

async fn ask(context: &RequestContext<RoleServer>) -> CallToolResult {
    let params: ElicitRequestParams = match serde_json::from_value(json!({
        "mode": "form",
        "message": "Who are you?",
        "requestedSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "color": {"type": "string", "enum": ["red", "green"], "default": "green"},
                "age": {"type": "integer", "minimum": 0, "maximum": 150},
            },
            "required": ["name", "color"],
        },
    })) {
        Ok(params) => params,
        Err(err) => return text_result(format!("bad elicitation params: {err}"), true),
    };
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    match context.peer.send_request(request).await {
        Ok(ClientResult::ElicitResult(result)) => {
            let result = serde_json::to_value(&result).unwrap_or_default();
            text_result(
                format!(
                    "action={} content={}",
                    result["action"].as_str().unwrap_or("?"),
                    result["content"]
                ),
                false,
            )
        }
        Ok(other) => text_result(format!("unexpected answer: {other:?}"), true),
        Err(err) => text_result(format!("elicitation failed: {err}"), true),
    }
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> InitializeResult {
        let capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_prompts()
            .build();
        InitializeResult::new(capabilities)
            .with_server_info(Implementation::new("jucode-test-server", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.clone().unwrap_or_default();
        Ok(self.call(&request.name, &args, &context).await.into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let prompt: Prompt = serde_json::from_value(json!({
            "name": "review",
            "description": "Review a file",
            "arguments": [
                {"name": "path", "description": "The file", "required": true},
                {"name": "focus", "description": "What to look at"},
            ],
        }))
        .expect("a valid prompt");
        Ok(ListPromptsResult::with_all_items(vec![prompt]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name != "review" {
            return Err(ErrorData::invalid_params("no such prompt", None));
        }
        let args = request.arguments.unwrap_or_default();
        let arg = |key: &str| args.get(key).and_then(Value::as_str).map(str::to_owned);
        let mut text = format!("Please review {}", arg("path").unwrap_or_default());
        if let Some(focus) = arg("focus") {
            text.push_str(&format!(", focusing on {focus}"));
        }
        let result: GetPromptResult = serde_json::from_value(json!({
            "description": "A review",
            "messages": [{"role": "user", "content": {"type": "text", "text": text}}],
        }))
        .expect("a valid prompt result");
        Ok(result.into())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|arg| arg == "--fail-start") {
        eprintln!("cannot start: the test asked me to fail");
        std::process::exit(2);
    }
    if args.iter().any(|arg| arg == "--hang") {
        // Reads and never answers, as a wedged server would; it ends only when its
        // stdin does, so a test whose jucode was killed leaves no server behind.
        let mut sink = tokio::io::sink();
        let _ = tokio::io::copy(&mut tokio::io::stdin(), &mut sink).await;
        return;
    }
    if let Some(ms) = args
        .iter()
        .position(|arg| arg == "--delay-ms")
        .and_then(|at| args.get(at + 1))
        .and_then(|ms| ms.parse().ok())
    {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let server = TestServer {
        elicit: args.iter().any(|arg| arg == "--elicit"),
        ..TestServer::default()
    };
    match server.serve(rmcp::transport::stdio()).await {
        Ok(running) => {
            let _ = running.waiting().await;
        }
        Err(err) => {
            eprintln!("handshake failed: {err}");
            std::process::exit(1);
        }
    }
}
