//! The config reader: every key, and each kind of mistake reported where it is.

use super::*;

#[test]
fn full_example_parses() {
    let text = r#"
model = "mock/mock-1"
reasoning_effort = "medium"
approval_mode = "auto-edit"
[providers.mock]
kind = "openai"
base_url = "http://127.0.0.1:8080/v1"
api_key = "k"
context_window = 200000
max_output_tokens = 32000
reasoning_efforts = ["low", "medium", "high"]
input_price = 1.0
[providers.mock.models.big]
context_window = 1000000
output_price = 8.0
[providers.demo]
kind = "replay"
script = "replies.jsonl"
"#;
    let loaded = LoadedConfig::parse(Path::new("/p/config.toml"), text);
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let config = loaded.config;
    assert_eq!(config.model.as_deref(), Some("mock/mock-1"));
    assert_eq!(config.approval_mode, Some(ApprovalMode::AutoEdit));
    let mock = &config.providers["mock"];
    assert_eq!(mock.kind, ProviderKind::Openai);
    assert_eq!(mock.context_window, Some(200_000));
    let big = mock.model_settings("big");
    assert_eq!(big.context_window, Some(1_000_000));
    assert_eq!(big.input_price, Some(1.0), "inherited from the provider");
    assert_eq!(big.output_price, Some(8.0));
    assert_eq!(mock.model_settings("other").context_window, Some(200_000));
    assert_eq!(config.providers["demo"].kind, ProviderKind::Replay);
}

#[test]
fn agents_max_depth_is_read_and_checked() {
    let loaded = LoadedConfig::parse(Path::new("c.toml"), "[agents]\nmax_depth = 2\n");
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    assert_eq!(loaded.config.agents.max_depth, Some(2));
    let loaded = LoadedConfig::parse(Path::new("c.toml"), "[agents]\nmax_depth = -1\n");
    assert_eq!(loaded.problems.len(), 1, "{:?}", loaded.problems);
    assert!(loaded.problems[0].contains("line 2: agents.max_depth"));
    assert_eq!(loaded.config.agents.max_depth, None);
}

#[test]
fn broken_file_names_file_and_line() {
    let text = "model = \"a/b\"\n\napproval_mode = \"sometimes\"\n";
    let loaded = LoadedConfig::parse(Path::new("/p/config.toml"), text);
    assert_eq!(loaded.problems.len(), 1);
    let problem = &loaded.problems[0];
    assert!(
        problem.starts_with("config error in /p/config.toml line 3: "),
        "{problem}"
    );
    assert!(problem.contains("sometimes"), "{problem}");
    assert!(problem.ends_with("; using the default"), "{problem}");
    assert_eq!(loaded.config.approval_mode, None);
    assert_eq!(
        loaded.config.model.as_deref(),
        Some("a/b"),
        "a bad key does not reset the good ones"
    );
}

#[test]
fn every_problem_is_reported_in_file_order_and_good_keys_are_kept() {
    let text = r#"model = "local/qwen"
approval_mode = 3
modle = "typo"
[daemon]
max_client_lines = "many"
max_client_bytes = 4096
[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:8000/v1"
context_window = "big"
api_kye = "k"
[providers.local.models.qwen]
output_price = "free"
[providers.nokind]
base_url = "http://127.0.0.1:9000/v1"
[providers.fine]
kind = "replay"
script = "a.jsonl"
"#;
    let loaded = LoadedConfig::parse(Path::new("/p/config.toml"), text);
    let wanted = [
        (
            "line 2: approval_mode: wanted string or table",
            "; using the default",
        ),
        ("line 3: unknown field `modle`", "; ignored"),
        (
            "line 5: daemon.max_client_lines: invalid type",
            "; using the default",
        ),
        (
            "line 10: providers.local.context_window: invalid type",
            "; provider \"local\" cannot be used until this is fixed",
        ),
        (
            "line 11: providers.local: unknown field `api_kye`",
            "; provider \"local\" cannot be used until this is fixed",
        ),
        (
            "line 13: providers.local.models.qwen.output_price: invalid type",
            "; provider \"local\" cannot be used until this is fixed",
        ),
        (
            "line 14: providers.nokind: missing field `kind`",
            "; provider \"nokind\" cannot be used until this is fixed",
        ),
    ];
    assert_eq!(
        loaded.problems.len(),
        wanted.len(),
        "{:#?}",
        loaded.problems
    );
    for (problem, (start, end)) in loaded.problems.iter().zip(wanted) {
        let start = format!("config error in /p/config.toml {start}");
        assert!(
            problem.starts_with(&start) && problem.ends_with(end),
            "{problem:?} should start with {start:?} and end with {end:?}"
        );
    }
    let config = &loaded.config;
    assert_eq!(config.model.as_deref(), Some("local/qwen"));
    assert_eq!(config.approval_mode, None);
    assert_eq!(config.daemon.max_client_lines, None);
    assert_eq!(config.daemon.max_client_bytes, Some(4096));
    let local = &config.providers["local"];
    assert_eq!(local.base_url.as_deref(), Some("http://127.0.0.1:8000/v1"));
    assert_eq!(local.context_window, None);
    assert!(local.models.contains_key("qwen"));
    assert!(!config.providers.contains_key("nokind"));
    assert_eq!(config.providers["fine"].kind, ProviderKind::Replay);
}

#[test]
fn broken_providers_are_listed_with_their_first_problem() {
    let text = "[providers.local]\nkind = \"openai\"\nbase_url = 8000\nheaders = 1\n\
                    [providers.openai]\nkind = \"gemini\"\n[providers.ok]\nkind = \"openai\"\n";
    let loaded = LoadedConfig::parse(Path::new("c.toml"), text);
    assert_eq!(loaded.problems.len(), 3, "{:#?}", loaded.problems);
    assert_eq!(
        loaded.broken_providers,
        BTreeMap::from([
            (
                "local".to_owned(),
                "providers.local.base_url: invalid type: integer `8000`, expected a string \
                     (and 1 more)"
                    .to_owned()
            ),
            (
                "openai".to_owned(),
                "providers.openai: unknown variant `gemini`, expected one of `openai`, `anthropic`, `openai-responses`, `replay`"
                    .to_owned()
            ),
        ])
    );
    assert!(loaded.config.providers.contains_key("ok"));
}

#[test]
fn syntax_error_and_unknown_key() {
    let loaded = LoadedConfig::parse(Path::new("c.toml"), "model = \n");
    assert!(
        loaded.problems[0].contains("line 1"),
        "{:?}",
        loaded.problems
    );
    assert_eq!(loaded.problems.len(), 1);
    assert!(loaded.problems[0].ends_with("; using defaults"));
    let loaded = LoadedConfig::parse(Path::new("c.toml"), "a = 1\nmodle = \"x\"\n");
    assert_eq!(loaded.problems.len(), 2, "{:?}", loaded.problems);
    assert!(
        loaded.problems[0].starts_with("config error in c.toml line 1: unknown field `a`"),
        "{:?}",
        loaded.problems
    );
    assert!(
        loaded.problems[1].starts_with("config error in c.toml line 2: unknown field `modle`"),
        "{:?}",
        loaded.problems
    );
    // Broken TOML: nothing can be trusted, not even the keys before the error; only the
    // model's name is kept, to say which model cannot be used.
    let loaded = LoadedConfig::parse(Path::new("c.toml"), "model = \"a/b\"\n[x\n");
    assert_eq!(loaded.problems.len(), 1, "{:?}", loaded.problems);
    assert!(
        loaded.problems[0].contains("line 2"),
        "{:?}",
        loaded.problems
    );
    assert!(loaded.unreadable);
    assert_eq!(loaded.config.model.as_deref(), Some("a/b"));
}

#[test]
fn base_url_needs_an_http_scheme() {
    for good in [
        "http://127.0.0.1:8000/v1",
        "https://api.openai.com/v1",
        "HTTPS://x",
    ] {
        assert!(is_http_url(good), "{good}");
    }
    for bad in [
        "localhost:8000/v1",
        "",
        "http:/x",
        " https://x",
        "ftp://x",
        "é",
    ] {
        assert!(!is_http_url(bad), "{bad}");
    }
    // Only where it is used: a replay provider has no server.
    let text = "[providers.r]\nkind = \"replay\"\nbase_url = \"nowhere\"\n";
    let loaded = LoadedConfig::parse(Path::new("c.toml"), text);
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
}

#[test]
fn missing_file_is_defaults_without_problems() {
    let loaded = LoadedConfig::load(Path::new("/definitely/not/here/config.toml"));
    assert!(loaded.problems.is_empty());
    assert!(loaded.config.model.is_none());
}

#[test]
fn approval_modes_round_trip() {
    for mode in ApprovalMode::ALL {
        assert_eq!(ApprovalMode::parse(mode.as_str()), Some(mode));
    }
    assert_eq!(ApprovalMode::parse("yolo"), None);
}

#[test]
fn a_file_that_is_not_toml_still_names_its_model() {
    let text = "# mine\nmodel = \"local/qwen\" # the fast one\napproval_mode = auto\n[providers.local]\nmodel = \"other\"\n";
    let loaded = LoadedConfig::parse(Path::new("/p/config.toml"), text);
    assert!(loaded.unreadable);
    assert_eq!(loaded.problems.len(), 1, "{:?}", loaded.problems);
    assert_eq!(loaded.config.model.as_deref(), Some("local/qwen"));

    let nothing = LoadedConfig::parse(
        Path::new("/p/config.toml"),
        "[providers.local\nmodel = 'x'\n",
    );
    assert!(nothing.unreadable);
    assert_eq!(
        nothing.config.model, None,
        "a model under a table is not the session's"
    );
    assert_eq!(salvage_model("model='a/b'"), Some("a/b".to_owned()));
    assert_eq!(salvage_model("models = \"a/b\""), None);
    assert_eq!(salvage_model("model = \"\""), None);

    let fine = LoadedConfig::parse(Path::new("/p/config.toml"), "model = \"a/b\"\n");
    assert!(!fine.unreadable);
}
