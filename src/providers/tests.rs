//! Tests of the [`Catalog`]: naming, defaults, keys and model info.

use std::path::Path;

use pretty_assertions::assert_eq;

use super::*;
use crate::config::LoadedConfig;
use crate::engine::{ChatRequest, ModelError, Retry};

const CONFIG_PATH: &str = "/home/u/.jucode/config.toml";

fn catalog(toml: &str, env: &[(&str, &str)]) -> Catalog {
    let loaded = LoadedConfig::parse(Path::new(CONFIG_PATH), toml);
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let env = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Catalog::new(
        loaded.config,
        PathBuf::from("/home/u/.jucode"),
        PathBuf::from(CONFIG_PATH),
        Arc::new(env),
    )
}

fn empty_request() -> ChatRequest {
    ChatRequest::from_messages("m", "", Vec::new(), Vec::new())
}

async fn first_error(model: &ResolvedModel) -> ModelError {
    model.client.stream(&empty_request()).await.err().unwrap()
}

const ROUTER: &str = r#"
[providers.openrouter]
kind = "openai"
base_url = "https://openrouter.ai/api/v1"
api_key_env = "OPENROUTER_API_KEY"
context_window = 128000
input_price = 3.0
[providers.openrouter.models."anthropic/claude"]
context_window = 1000000
reasoning_efforts = ["low", "high"]
output_price = 15.0
[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:8000/v1"
[providers.local.models.qwen]
[providers.script]
kind = "replay"
script = "replies/a.jsonl"
"#;

#[test]
fn names_split_at_the_first_slash() {
    let catalog = catalog(ROUTER, &[("OPENROUTER_API_KEY", "k")]);
    let model = catalog
        .resolve("openrouter/anthropic/claude", None)
        .unwrap();
    assert_eq!(model.provider, "openrouter");
    assert_eq!(model.model, "anthropic/claude");
    assert_eq!(model.full_name(), "openrouter/anthropic/claude");
    assert_eq!(model.state, ModelState::Ready);

    let bare = catalog.resolve("qwen", Some("local")).unwrap();
    assert_eq!(bare.full_name(), "local/qwen");
    let err = catalog.resolve("qwen", None).err().unwrap();
    assert!(err.contains("\"qwen\""), "{err}");
    assert!(catalog.resolve("local/", None).is_err());
}

#[test]
fn unknown_provider_names_it_and_the_config() {
    let err = catalog("", &[]).resolve("x/y", None).err().unwrap();
    assert_eq!(
        err,
        format!(r#"unknown provider "x" in model "x/y": add [providers.x] to {CONFIG_PATH}"#)
    );
}

#[test]
fn model_info_defaults_and_overrides() {
    let catalog = catalog(ROUTER, &[]);
    let claude = catalog
        .resolve("openrouter/anthropic/claude", None)
        .unwrap();
    assert_eq!(
        claude.info,
        ModelInfo {
            context_window: 1_000_000,
            max_output_tokens: 32_000,
            reasoning_efforts: vec!["low".into(), "high".into()],
            input_price: Some(3.0),
            cached_input_price: None,
            cache_write_price: None,
            output_price: Some(15.0),
        }
    );
    let other = catalog.resolve("openrouter/other", None).unwrap().info;
    assert_eq!(other.context_window, 128_000);
    assert!(
        other.reasoning_efforts.is_empty(),
        "custom providers default to none"
    );
    let local = catalog.resolve("local/qwen", None).unwrap().info;
    assert_eq!((local.context_window, local.output_price), (200_000, None));
    let builtin = catalog.resolve("openai/gpt-5.5", None).unwrap().info;
    assert_eq!(builtin.reasoning_efforts, ["low", "medium", "high"]);
    let replay = catalog.resolve("script/x", None).unwrap().info;
    assert_eq!(replay.reasoning_efforts, ["low", "medium", "high"]);
}

#[test]
fn retry_policy_from_config() {
    let catalog = catalog(
        r#"
[providers.slow]
kind = "openai"
max_retries = 2
retry_base_delay_ms = 100
stream_idle_timeout_secs = 12.5
"#,
        &[],
    );
    let retry = catalog.resolve("slow/m", None).unwrap().retry;
    assert_eq!(
        retry,
        RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(100),
            idle_timeout: Duration::from_millis(12_500),
        }
    );
    assert_eq!(
        catalog.resolve("openai/x", None).unwrap().retry,
        RetryPolicy::default()
    );
}

#[test]
fn default_model_prefers_config_then_openai_key_then_demo() {
    let configured = catalog(
        &format!("model = \"local/qwen\"\n{ROUTER}"),
        &[("OPENAI_API_KEY", "k")],
    );
    let model = configured.default_model().unwrap();
    assert_eq!(
        (model.full_name(), model.notice),
        ("local/qwen".into(), None)
    );

    let broken = catalog("model = \"nope/m\"", &[]);
    assert!(
        broken
            .default_model()
            .err()
            .unwrap()
            .contains("unknown provider \"nope\"")
    );

    let keyed = catalog("", &[("OPENAI_API_KEY", "sk-1")])
        .default_model()
        .unwrap();
    assert_eq!(keyed.full_name(), "openai/gpt-5.5");
    assert_eq!(keyed.state, ModelState::Ready);
    assert_eq!(keyed.notice, None);

    let demo = catalog("", &[("OPENAI_API_KEY", "")])
        .default_model()
        .unwrap();
    assert_eq!(demo.full_name(), "replay/demo");
    assert_eq!(demo.state, ModelState::Ready);
    let notice = demo.notice.unwrap();
    for part in [
        "offline replay demo",
        "OPENAI_API_KEY",
        CONFIG_PATH,
        "docs/configuration.md",
    ] {
        assert!(notice.contains(part), "{part} missing from {notice}");
    }
}

#[tokio::test]
async fn missing_key_fails_at_once() {
    let catalog = catalog(ROUTER, &[]);
    let openai = catalog.resolve("openai/gpt-5.5", None).unwrap();
    assert_eq!(openai.state, ModelState::MissingApiKey);
    assert_eq!(
        first_error(&openai).await,
        ModelError::fatal(format!(
            "no API key for provider \"openai\": set OPENAI_API_KEY or api_key / api_key_env in [providers.openai] of {CONFIG_PATH}"
        ))
    );
    let router = catalog
        .resolve("openrouter/anthropic/claude", None)
        .unwrap();
    assert_eq!(router.state, ModelState::MissingApiKey);
    let err = first_error(&router).await;
    assert_eq!(err.retry, Retry::Never);
    assert!(
        err.message.contains("set OPENROUTER_API_KEY"),
        "{}",
        err.message
    );

    // A local server needs no key.
    assert_eq!(
        catalog.resolve("local/qwen", None).unwrap().state,
        ModelState::Ready
    );
}

#[test]
fn configured_key_and_overridden_builtin() {
    let catalog = catalog(
        r#"
[providers.openai]
kind = "openai"
base_url = "http://127.0.0.1:1/v1"
[providers.keyed]
kind = "openai"
api_key = "inline"
api_key_env = "UNSET_VAR"
"#,
        &[],
    );
    let openai = catalog.resolve("openai/m", None).unwrap();
    assert_eq!(
        openai.state,
        ModelState::Ready,
        "a configured openai provider is not the built-in"
    );
    assert!(openai.info.reasoning_efforts.is_empty());
    assert_eq!(
        catalog.resolve("keyed/m", None).unwrap().state,
        ModelState::Ready
    );
}

#[tokio::test]
async fn replay_script_is_relative_to_the_profile_and_read_lazily() {
    let catalog = catalog(ROUTER, &[]);
    let model = catalog.resolve("script/anything", None).unwrap();
    assert_eq!(model.state, ModelState::Ready, "resolving reads nothing");
    let err = first_error(&model).await;
    assert!(
        err.message.contains("/home/u/.jucode/replies/a.jsonl"),
        "{}",
        err.message
    );
}

#[test]
fn list_has_every_pickable_model_sorted() {
    let catalog = catalog(&format!("model = \"openrouter/x/y\"\n{ROUTER}"), &[]);
    let names: Vec<String> = catalog.list().into_iter().map(|(name, _)| name).collect();
    assert_eq!(
        names,
        [
            "local/qwen",
            "openrouter/anthropic/claude",
            "openrouter/x/y",
            "replay/demo"
        ]
    );
    let listed = catalog.list();
    assert_eq!(listed[1].1.context_window, 1_000_000);

    let keyed = super::Catalog::new(
        Config::default(),
        PathBuf::from("/p"),
        PathBuf::from("/p/config.toml"),
        Arc::new(HashMap::from([(
            "OPENAI_API_KEY".to_owned(),
            "k".to_owned(),
        )])),
    );
    let names: Vec<String> = keyed.list().into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["openai/gpt-5.5", "replay/demo"]);
}

#[test]
fn openai_base_url_comes_from_the_session_env() {
    let catalog = catalog("", &[("OPENAI_BASE_URL", "http://proxy:1/v1/")]);
    let provider = &catalog.providers["openai"];
    assert_eq!(
        provider.config.base_url.as_deref(),
        Some("http://proxy:1/v1/")
    );
    let catalog = super::Catalog::new(
        Config::default(),
        PathBuf::new(),
        PathBuf::new(),
        Arc::new(HashMap::new()),
    );
    assert_eq!(
        catalog.providers["openai"].config.base_url.as_deref(),
        Some(DEFAULT_OPENAI_BASE_URL)
    );
}

/// A catalog from a config that has problems, set up as a session does.
fn catalog_of_broken(toml: &str, env: &[(&str, &str)]) -> Catalog {
    let loaded = LoadedConfig::parse(Path::new(CONFIG_PATH), toml);
    assert!(!loaded.problems.is_empty(), "{toml} should have problems");
    let env = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    Catalog::new(
        loaded.config,
        PathBuf::from("/home/u/.jucode"),
        PathBuf::from(CONFIG_PATH),
        Arc::new(env),
    )
    .config_problems(true, loaded.unreadable, &loaded.broken_providers)
}

#[tokio::test]
async fn a_broken_provider_stays_selected_and_fails_every_request() {
    let catalog = catalog_of_broken(
        "model = \"local/qwen\"\n[providers.local]\nkind = \"openai\"\n\
         base_url = \"http://127.0.0.1:8000/v1\"\ncontext_window = \"big\"\n\
         [providers.openai]\nkind = \"gemini\"\n",
        &[("OPENAI_API_KEY", "sk-1")],
    );
    let local = catalog.default_model().unwrap();
    assert_eq!(
        (local.full_name(), local.notice.clone()),
        ("local/qwen".into(), None)
    );
    assert_eq!(
        first_error(&local).await,
        ModelError::fatal(format!(
            "provider \"local\" cannot be used until its table in {CONFIG_PATH} is fixed: \
             providers.local.context_window: invalid type: string \"big\", expected u64"
        ))
    );
    // A broken `[providers.openai]` is not silently replaced by the built-in one.
    let openai = catalog.resolve("openai/gpt-5.5", None).unwrap();
    let err = first_error(&openai).await;
    assert_eq!(err.retry, Retry::Never);
    assert!(
        err.message.contains("unknown variant `gemini`"),
        "{}",
        err.message
    );
}

#[test]
fn after_a_broken_config_the_demo_notice_says_so() {
    let demo = catalog_of_broken("model = 5\n", &[])
        .default_model()
        .unwrap();
    assert_eq!(demo.full_name(), "replay/demo");
    let notice = demo.notice.unwrap();
    assert!(!notice.contains("No model is configured"), "{notice}");
    for part in [
        "could not be read",
        CONFIG_PATH,
        "offline replay demo until it is fixed",
    ] {
        assert!(notice.contains(part), "{part} missing from {notice}");
    }
}

#[tokio::test]
async fn a_base_url_without_http_scheme_is_a_startup_problem_and_unusable() {
    let toml = "model = \"local/qwen\"\n[providers.local]\nkind = \"openai\"\n\
                base_url = \"localhost:8000/v1\"\n[providers.ok]\nkind = \"openai\"\n\
                base_url = \"HTTPS://example.com/v1\"\n";
    let loaded = LoadedConfig::parse(Path::new(CONFIG_PATH), toml);
    assert_eq!(
        loaded.problems,
        [format!(
            "config error in {CONFIG_PATH} line 4: providers.local.base_url must start with \
             http:// or https:// (got \"localhost:8000/v1\"); provider \"local\" cannot be \
             used until this is fixed"
        )]
    );
    let local = catalog_of_broken(toml, &[]).default_model().unwrap();
    assert_eq!(local.full_name(), "local/qwen");
    assert_eq!(
        first_error(&local).await,
        ModelError::fatal(format!(
            "provider \"local\" cannot be used until its table in {CONFIG_PATH} is fixed: \
             providers.local.base_url must start with http:// or https:// (got \
             \"localhost:8000/v1\")"
        ))
    );

    let from_env = catalog("", &[("OPENAI_BASE_URL", "api.example.com/v1")]);
    let openai = from_env.resolve("openai/gpt-5.5", None).unwrap();
    assert_eq!(
        first_error(&openai).await,
        ModelError::fatal(
            "provider \"openai\" cannot be used: OPENAI_BASE_URL must start with http:// or \
             https:// (got \"api.example.com/v1\")"
        )
    );
}

#[test]
fn truncate_counts_characters() {
    assert_eq!(truncate("héllo", 3), "hél…");
    assert_eq!(truncate("abc", 3), "abc");
}

#[tokio::test]
async fn built_in_anthropic_provider() {
    let keyed = catalog("", &[("ANTHROPIC_API_KEY", "sk-ant")])
        .default_model()
        .unwrap();
    assert_eq!(keyed.full_name(), "anthropic/claude-sonnet-4-5");
    assert_eq!(keyed.state, ModelState::Ready);
    assert_eq!(keyed.info.context_window, 200_000);
    assert_eq!(keyed.info.max_output_tokens, 64_000);
    assert_eq!(keyed.info.input_price, Some(3.0));
    assert_eq!(keyed.info.cached_input_price, Some(0.3));
    assert_eq!(keyed.info.cache_write_price, Some(3.75));
    // Sonnet 4.5 thinks within a budget; 4.6 adaptively, with `max` too; 3.5 Haiku not.
    assert_eq!(keyed.info.reasoning_efforts, ["low", "medium", "high"]);
    let adaptive = catalog("", &[])
        .resolve("anthropic/claude-opus-4-6", None)
        .unwrap();
    assert_eq!(
        adaptive.info.reasoning_efforts,
        ["low", "medium", "high", "max"]
    );
    assert_eq!(adaptive.info.input_price, Some(5.0));
    let plain = catalog("", &[])
        .resolve("anthropic/claude-3-5-haiku-latest", None)
        .unwrap();
    assert!(plain.info.reasoning_efforts.is_empty());
    // A table of the config says how a model it knows takes efforts, and what they cost.
    let told = catalog(
        "[providers.claude]\nkind = \"anthropic\"\napi_key = \"k\"\ncache = \"1h\"\n\
         [providers.claude.models.house-model]\nthinking = \"adaptive\"\n\
         cache_write_price = 9.0\n",
        &[],
    );
    let house = told.resolve("claude/house-model", None).unwrap();
    assert_eq!(
        house.info.reasoning_efforts,
        ["low", "medium", "high", "max"]
    );
    assert_eq!(house.info.cache_write_price, Some(9.0));
    let hour = told.resolve("claude/claude-sonnet-4-5", None).unwrap();
    assert_eq!(hour.info.cache_write_price, Some(6.0));

    // OpenAI stays first when both keys are set.
    let both = catalog("", &[("ANTHROPIC_API_KEY", "a"), ("OPENAI_API_KEY", "o")])
        .default_model()
        .unwrap();
    assert_eq!(both.provider, "openai");

    let unkeyed = catalog("", &[])
        .resolve("anthropic/claude-opus-4-5", None)
        .unwrap();
    assert_eq!(unkeyed.state, ModelState::MissingApiKey);
    assert_eq!(unkeyed.info.output_price, Some(25.0));
    assert_eq!(
        first_error(&unkeyed).await,
        ModelError::fatal(format!(
            "no API key for provider \"anthropic\": set ANTHROPIC_API_KEY or api_key / api_key_env in [providers.anthropic] of {CONFIG_PATH}"
        ))
    );

    let bad_url = catalog(
        "",
        &[("ANTHROPIC_API_KEY", "k"), ("ANTHROPIC_BASE_URL", "api.x")],
    )
    .resolve("anthropic/claude-sonnet-4-5", None)
    .unwrap();
    assert_eq!(bad_url.state, ModelState::InvalidConfig);

    // Config overrides the table; a custom provider of the kind works the same.
    let custom = catalog(
        "[providers.claude]\nkind = \"anthropic\"\nbase_url = \"http://127.0.0.1:9\"\n\
         api_key = \"k\"\ncache = \"off\"\n[providers.claude.models.claude-sonnet-4-5]\n\
         max_output_tokens = 1000\n",
        &[],
    )
    .resolve("claude/claude-sonnet-4-5", None)
    .unwrap();
    assert_eq!(custom.state, ModelState::Ready);
    assert_eq!(custom.info.max_output_tokens, 1000);
    assert_eq!(custom.info.input_price, Some(3.0));
}

#[test]
fn built_in_openai_speaks_responses_and_openai_tables_chat_completions() {
    let catalog = catalog(
        "[providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         [providers.resp]\nkind = \"openai-responses\"\nbase_url = \"http://127.0.0.1:9/v1\"\n",
        &[("OPENAI_API_KEY", "k")],
    );
    assert_eq!(
        catalog.providers["openai"].config.kind,
        ProviderKind::OpenaiResponses
    );
    assert_eq!(catalog.providers["local"].config.kind, ProviderKind::Openai);
    assert_eq!(
        catalog.providers["resp"].config.kind,
        ProviderKind::OpenaiResponses
    );
    let builtin = catalog.default_model().unwrap();
    assert_eq!(builtin.full_name(), "openai/gpt-5.5");
    assert_eq!(builtin.state, ModelState::Ready);
    assert_eq!(builtin.info.reasoning_efforts, ["low", "medium", "high"]);
    let custom = catalog.resolve("resp/gpt-5", None).unwrap();
    assert_eq!(custom.state, ModelState::Ready);
}

/// A loopback HTTP server that answers one request with `body`, one chunk of chunked
/// transfer encoding per SSE event (each written and flushed on its own, as a server
/// sends them as they come). Returns the base URL and the request it received.
pub(crate) async fn serve_events(body: &str) -> (String, tokio::task::JoinHandle<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let events: Vec<String> = body.split_inclusive("\n\n").map(str::to_owned).collect();
    let server = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        socket.set_nodelay(true).unwrap();
        let mut received = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = socket.read(&mut buf).await.unwrap();
            assert!(n > 0, "client closed before sending the whole request");
            received.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&received);
            if let Some(head_end) = text.find("\r\n\r\n") {
                let length = text[..head_end]
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if received.len() >= head_end + 4 + length {
                    break;
                }
            }
        }
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                    transfer-encoding: chunked\r\n\r\n";
        socket.write_all(head.as_bytes()).await.unwrap();
        for event in events {
            let chunk = format!("{:x}\r\n{event}\r\n", event.len());
            socket.write_all(chunk.as_bytes()).await.unwrap();
            socket.flush().await.unwrap();
        }
        socket.write_all(b"0\r\n\r\n").await.unwrap();
        socket.shutdown().await.unwrap();
        String::from_utf8(received).unwrap()
    });
    (base, server)
}

#[test]
fn gpt_5_families_come_with_their_limits_and_prices() {
    let keyed = catalog("", &[("OPENAI_API_KEY", "k")]);
    let info = |name: &str| keyed.resolve(name, None).unwrap().info;
    let gpt5 = info("openai/gpt-5-2025-08-07");
    assert_eq!(gpt5.context_window, 272_000);
    assert_eq!(gpt5.max_output_tokens, 128_000);
    assert_eq!(gpt5.input_price, Some(1.25));
    assert_eq!(gpt5.cached_input_price, Some(0.125));
    assert_eq!(gpt5.output_price, Some(10.0));
    assert_eq!(info("openai/gpt-5-mini").input_price, Some(0.25));
    assert_eq!(info("openai/gpt-5.1-codex-mini").output_price, Some(2.0));
    assert_eq!(info("openai/gpt-5.2").input_price, Some(1.75));
    // A family the table does not know is not taken for one it knows.
    let unknown = info("openai/gpt-5.5");
    assert_eq!(unknown.input_price, None);
    assert_eq!(unknown.context_window, DEFAULT_CONTEXT_WINDOW);
    // Config wins.
    let told = catalog(
        "[providers.gpt]\nkind = \"openai-responses\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         [providers.gpt.models.gpt-5]\ninput_price = 2.0\n",
        &[],
    );
    let own = told.resolve("gpt/gpt-5", None).unwrap().info;
    assert_eq!(own.input_price, Some(2.0));
    assert_eq!(own.output_price, Some(10.0));
}
