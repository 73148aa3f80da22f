//! The dashboard page in headless Chromium (Debian's `chromium`, which `.ci/run`
//! installs; `JUCODE_CHROMIUM` names another), driven through its DevTools protocol by
//! `dashboard_cdp.py`: it loads, opens a session in a folder it asks for (offering
//! recent ones), streams a scripted turn, answers an approval, and shows each session's
//! title, state and usage, also when opened from the list.

use std::path::PathBuf;
use std::process::Command;

use serde_json::json;

use crate::common::mock::{MockModel, text_reply, tool_reply};
use crate::common::serve::Home;
use crate::{WsDaemon, free_port, python};

fn chromium() -> Result<PathBuf, String> {
    let chromium = std::env::var_os("JUCODE_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("chromium"));
    match Command::new(&chromium).arg("--version").output() {
        Ok(out) if out.status.success() => Ok(chromium),
        _ => Err(format!(
            "{} is not installed (apt-get install chromium, as .ci/run does)",
            chromium.display()
        )),
    }
}

#[test]
fn the_dashboard_streams_a_turn_and_answers_an_approval_in_chromium() {
    let (python, chromium) = match (python(), chromium()) {
        (Ok(python), Ok(chromium)) => (python, chromium),
        (Err(why), _) | (_, Err(why)) => {
            crate::skipped(&why);
            return;
        }
    };
    let model = MockModel::start();
    let home = Home::new();
    home.mock_config_in_mode(&model.base_url(), "manual");
    model.push(tool_reply(
        "call_1",
        "bash",
        json!({"command": "echo dash > dash.txt"}),
    ));
    model.push(text_reply(&["Finished", " it"]));
    let port = free_port();
    let daemon = WsDaemon::start(&home, &format!(r#"{{"port": {port}}}"#), port, &[]);
    daemon.wait_listening();
    let profile = home.path().join("chromium-profile");
    let workdir = home.path().join("proj");
    std::fs::create_dir(&workdir).unwrap();
    let screenshot = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/dashboard.png");
    crate::run_case_script(
        &python,
        "dashboard_cdp.py",
        &[
            ("DASHBOARD_URL", format!("http://127.0.0.1:{port}/")),
            ("CHROMIUM", chromium.display().to_string()),
            ("PROFILE", profile.display().to_string()),
            ("WORKDIR", workdir.display().to_string()),
            ("SCREENSHOT", screenshot.display().to_string()),
        ],
    );
    assert!(
        workdir.join("dash.txt").exists(),
        "the turn ran in the chosen folder"
    );
    daemon.stop();
}
