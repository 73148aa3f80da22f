//! Remote MCP servers that need a sign-in (OAuth 2.1, the MCP authorization flow),
//! against the loopback authorization server and protected MCP endpoint of
//! `tests/common/oauth.rs`: discovery, registration, the browser's redirect, calls
//! with the token, refresh, revocation, a wrong `state`, sign-out, the token file's
//! permissions, and no token in anything a client reads.

use std::os::unix::fs::PermissionsExt;

use serde_json::{Value, json};

use crate::common::daemon::DaemonGuard;
use crate::common::mock::{MockModel, text_reply, tool_reply};
use crate::common::oauth::{Protected, browse, query_of};
use crate::common::serve::{Home, Serve};

fn home_with(model: &MockModel, auth: &Protected) -> Home {
    let home = Home::new();
    home.mock_config(&model.base_url(), "");
    home.append_config(&format!(
        "[mcp_servers.tracker]\nurl = \"{}\"\ntimeout_ms = 20000\n",
        auth.mcp_url()
    ));
    home
}

/// `mcp_login`, then what the user's browser does: the authorization server signs
/// them in and redirects to jucode's loopback listener. Returns the sign-in address.
fn sign_in(serve: &mut Serve) -> String {
    serve.send(json!({"op": "mcp_login", "name": "tracker"}));
    let login = serve.until("mcp_login");
    let address = login.last().unwrap()["url"].as_str().unwrap().to_owned();
    let (status, location) = browse(&address);
    assert_eq!(status, 302, "the authorization server redirects");
    let callback = location.expect("a redirect");
    assert!(callback.starts_with("http://127.0.0.1:"), "{callback}");
    let (status, _) = browse(&callback);
    assert_eq!(status, 200, "jucode's listener took the redirect");
    address
}

fn no_token_in(lines: &[Value], auth: &Protected) {
    for line in lines {
        let text = line.to_string();
        for token in auth.issued() {
            assert!(!text.contains(&token), "a token in {text}");
        }
    }
}

fn tokens_dir(home: &Home) -> std::path::PathBuf {
    home.path().join("mcp-auth")
}

#[test]
fn a_server_that_needs_a_sign_in_connects_once_the_browser_comes_back() {
    let model = MockModel::start();
    let auth = Protected::start();
    let home = home_with(&model, &auth);
    let mut serve = Serve::start(&home);
    serve.skip_startup();
    let waiting = serve.until_server("tracker", "needs_auth");
    assert!(
        waiting["error"].as_str().unwrap().contains("mcp_login"),
        "{waiting}"
    );

    let address = sign_in(&mut serve);
    let query = query_of(&address);
    assert_eq!(query["code_challenge_method"], "S256");
    assert_eq!(query["resource"], auth.mcp_url(), "RFC 8707 resource");
    assert!(query["redirect_uri"].starts_with("http://127.0.0.1:"));
    assert_eq!(auth.seen().registrations.len(), 1, "registered itself");
    serve.wait_server("tracker", "connected");

    model.push(tool_reply("call_1", "mcp__tracker__whoami", json!({})));
    model.push(text_reply(&["Done."]));
    serve.user("who am I?");
    let turn = serve.until_ready();
    let output = turn
        .iter()
        .find(|e| e["type"] == "tool_output")
        .expect("the call ran");
    assert!(
        output["output"]
            .as_str()
            .unwrap()
            .contains("hello from the protected tracker"),
        "{output}"
    );
    let last = auth.seen().mcp_authorization.last().cloned().unwrap();
    assert!(last.starts_with("Bearer access-"), "{last}");

    // The tokens: a 0600 file in a 0700 folder, and in no line a client read.
    let dir = tokens_dir(&home);
    assert_eq!(
        std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(
        files[0].metadata().unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(
        !std::fs::read_to_string(home.path().join("config.toml"))
            .unwrap()
            .contains("secret")
    );
    no_token_in(&serve.seen, &auth);

    // A new session of the profile is signed in already.
    drop(serve);
    let mut again = Serve::start(&home);
    again.skip_startup();
    again.until_server("tracker", "connected");
    assert_eq!(auth.seen().registrations.len(), 1);
}

#[test]
fn tokens_are_refreshed_and_a_revoked_sign_in_needs_a_new_one() {
    let model = MockModel::start();
    let auth = Protected::start();
    // Tokens that expire at once: every request refreshes first.
    auth.seen().expires_in = 0;
    let home = home_with(&model, &auth);
    let mut serve = Serve::start(&home);
    serve.skip_startup();
    serve.until_server("tracker", "needs_auth");
    sign_in(&mut serve);
    serve.wait_server("tracker", "connected");
    let refreshes = |auth: &Protected| {
        auth.seen()
            .token
            .iter()
            .filter(|request| {
                request.get("grant_type").map(String::as_str) == Some("refresh_token")
            })
            .count()
    };
    assert!(refreshes(&auth) >= 1, "the expired token was refreshed");

    // The user revokes the app: the next call fails, and the server needs a sign-in.
    auth.revoke_everything();
    model.push(tool_reply("call_1", "mcp__tracker__whoami", json!({})));
    model.push(text_reply(&["It failed."]));
    serve.user("who am I?");
    let turn = serve.until_ready();
    let output = turn
        .iter()
        .find(|e| e["type"] == "tool_output")
        .expect("the call's card closes");
    assert_eq!(output["is_error"], true, "{output}");
    let waiting = serve.wait_server("tracker", "needs_auth");
    assert!(
        waiting["error"].as_str().unwrap().contains("sign in again"),
        "{waiting}"
    );
    no_token_in(&serve.seen, &auth);
}

#[test]
fn a_redirect_with_the_wrong_state_is_refused() {
    let model = MockModel::start();
    let auth = Protected::start();
    let home = home_with(&model, &auth);
    let mut serve = Serve::start(&home);
    serve.skip_startup();
    serve.until_server("tracker", "needs_auth");
    serve.send(json!({"op": "mcp_login", "name": "tracker"}));
    let address = serve.until("mcp_login").last().unwrap()["url"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, location) = browse(&address);
    let callback = location.unwrap();
    let (base, _) = callback.split_once('?').unwrap();
    let code = query_of(&callback)["code"].clone();
    let (status, _) = browse(&format!("{base}?code={code}&state=forged"));
    assert_eq!(status, 400);
    let errors = serve.until("error");
    let error = errors.last().unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        error.contains("tracker") && error.contains("sign-in failed"),
        "{error}"
    );
    // The state says why, for every client (the error came just before it).
    let view = serve.until("mcp_servers");
    let waiting = crate::common::mcp::server(view.last().unwrap(), "tracker").unwrap();
    assert_eq!(waiting["state"], "needs_auth");
    assert!(
        waiting["error"]
            .as_str()
            .unwrap()
            .contains("sign-in failed"),
        "{waiting}"
    );
    assert!(
        !auth
            .seen()
            .token
            .iter()
            .any(|request| request.get("grant_type").map(String::as_str)
                == Some("authorization_code")),
        "no code was exchanged"
    );
}

#[test]
fn signing_out_forgets_and_revokes_the_tokens() {
    let model = MockModel::start();
    let auth = Protected::start();
    let home = home_with(&model, &auth);
    let mut serve = Serve::start(&home);
    serve.skip_startup();
    serve.until_server("tracker", "needs_auth");
    sign_in(&mut serve);
    serve.wait_server("tracker", "connected");
    serve.send(json!({"op": "command", "input": "/mcp logout tracker"}));
    serve.until_server("tracker", "needs_auth");
    let files = std::fs::read_dir(tokens_dir(&home)).unwrap().count();
    assert_eq!(files, 0, "the token file is gone");
    let revoked = auth.seen().revoked.clone();
    assert!(
        revoked.iter().any(|token| token.starts_with("access-"))
            && revoked.iter().any(|token| token.starts_with("refresh-")),
        "{revoked:?}"
    );
    // Removing a signed-in server forgets its sign-in too.
    sign_in(&mut serve);
    serve.wait_server("tracker", "connected");
    assert_eq!(std::fs::read_dir(tokens_dir(&home)).unwrap().count(), 1);
    serve.send(json!({"op": "mcp_remove", "name": "tracker"}));
    serve.until("mcp_servers");
    assert_eq!(std::fs::read_dir(tokens_dir(&home)).unwrap().count(), 0);
    // A stdio server has no sign-in: a clear error.
    serve.send(json!({"op": "mcp_login", "name": "nowhere"}));
    let error = serve.until("error");
    assert!(
        error.last().unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("unknown MCP server")
    );
}

#[test]
fn a_sign_in_in_one_daemon_session_connects_the_others() {
    let model = MockModel::start();
    let auth = Protected::start();
    let home = home_with(&model, &auth);
    let _daemon = DaemonGuard(&home);
    let first_dir = tempfile::tempdir().unwrap();
    let second_dir = tempfile::tempdir().unwrap();
    let mut first = Serve::shim(&home).cwd(first_dir.path()).start();
    first.skip_startup();
    first.until_server("tracker", "needs_auth");
    let mut second = Serve::shim(&home).cwd(second_dir.path()).start();
    second.skip_startup();
    second.until_server("tracker", "needs_auth");
    sign_in(&mut first);
    first.wait_server("tracker", "connected");
    second.wait_server("tracker", "connected");
    assert_eq!(auth.seen().registrations.len(), 1);
    no_token_in(&first.seen, &auth);
    no_token_in(&second.seen, &auth);
    // Nor in the daemon's log.
    let log = std::fs::read_to_string(home.path().join("logs/daemon.log")).unwrap_or_default();
    for token in auth.issued() {
        assert!(!log.contains(&token), "a token in the daemon's log");
    }
}

#[test]
fn jucode_mcp_login_signs_in_from_the_command_line() {
    use std::io::BufRead;
    let model = MockModel::start();
    let auth = Protected::start();
    let home = home_with(&model, &auth);
    let mut login = std::process::Command::new(env!("CARGO_BIN_EXE_jucode"))
        .args(["mcp", "login", "tracker", "--no-browser"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("JUCODE_HOME", home.path())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(login.stdout.take().unwrap());
    let mut address = String::new();
    while !address.starts_with("http://") {
        address.clear();
        assert!(
            out.read_line(&mut address).unwrap() > 0,
            "no address printed"
        );
    }
    let (_, location) = browse(address.trim());
    assert_eq!(browse(&location.unwrap()).0, 200);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(login.wait().unwrap().success());
    assert!(rest.contains("signed in to tracker"), "{rest}");

    let mut serve = Serve::start(&home);
    serve.skip_startup();
    serve.until_server("tracker", "connected");
    drop(serve);

    let logout = home.jucode(&["mcp", "logout", "tracker"]);
    assert!(logout.status.success());
    assert!(String::from_utf8_lossy(&logout.stdout).contains("signed out of tracker"));
    assert!(!auth.seen().revoked.is_empty());
    let unknown = home.jucode(&["mcp", "login", "nowhere"]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no MCP server nowhere"));
}
