use super::*;

struct Fixture {
    _dir: tempfile::TempDir,
    profile: PathBuf,
    root: PathBuf,
    cwd: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("profile");
    let root = dir.path().join("repo");
    let cwd = root.join("app");
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir_all(&profile).unwrap();
    std::fs::create_dir(root.join(".git")).unwrap();
    Fixture {
        _dir: dir,
        profile,
        root,
        cwd,
    }
}

fn context(fixture: &Fixture, chat: bool) -> ProjectContext {
    ProjectContext::load(ProjectSetup {
        profile_dir: fixture.profile.clone(),
        cwd: fixture.cwd.clone(),
        chat,
        base_prompt: "BASE".into(),
        env: Arc::new(HashMap::new()),
        session_id: "s1".into(),
        user_hooks: HooksConfig::default(),
    })
}

#[test]
fn nothing_local_needs_no_trust() {
    let fixture = fixture();
    std::fs::write(fixture.profile.join("AGENTS.md"), "user rules").unwrap();
    let project = context(&fixture, false);
    assert_eq!(project.trust_prompt(), None);
    let prompt = project.system_prompt();
    assert!(prompt.starts_with("BASE\n\n# Instructions"), "{prompt}");
    assert!(prompt.contains(&format!(
        "## {}\n\nuser rules",
        fixture.profile.join("AGENTS.md").display()
    )));
}

#[test]
fn project_resources_wait_for_trust() {
    let fixture = fixture();
    std::fs::write(fixture.profile.join("AGENTS.md"), "user rules").unwrap();
    std::fs::write(fixture.root.join("AGENTS.md"), "root rules").unwrap();
    std::fs::write(fixture.cwd.join("AGENTS.md"), "app rules").unwrap();
    let skill = fixture.root.join(".jucode/skills/release");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\ndescription: Cut a release\n---\n...",
    )
    .unwrap();
    let commands = fixture.profile.join("commands");
    std::fs::create_dir_all(&commands).unwrap();
    std::fs::write(commands.join("hi.md"), "Say hi to $1").unwrap();

    let project = context(&fixture, false);
    let expected = (
        fixture.cwd.display().to_string(),
        fixture.root.display().to_string(),
    );
    assert_eq!(project.trust_prompt(), Some(expected));
    let prompt = project.system_prompt();
    assert!(
        prompt.contains("user rules") && !prompt.contains("root rules"),
        "{prompt}"
    );
    assert!(!prompt.contains("release"));
    // The user's own command needs no trust.
    assert_eq!(project.commands().len(), 1);

    let change = project.trust(TrustDecision::Repo).unwrap();
    assert_eq!(
        change.status,
        SessionStatus::Trusted(format!("{} (repository)", fixture.root.display()))
    );
    assert!(change.newly_trusted);
    assert_eq!(project.trust_prompt(), None);
    let prompt = project.system_prompt();
    let user = prompt.find("user rules").unwrap();
    let root = prompt.find("root rules").unwrap();
    let app = prompt.find("app rules").unwrap();
    assert!(user < root && root < app, "{prompt}");
    assert!(prompt.contains(&format!(
        "- release: Cut a release ({})",
        skill.join("SKILL.md").display()
    )));

    // A new session in the same place remembers; "no" for this directory wins.
    assert_eq!(context(&fixture, false).trust_prompt(), None);
    let change = project.trust(TrustDecision::No).unwrap();
    assert!(!change.newly_trusted);
    assert!(!project.system_prompt().contains("root rules"));
    assert!(
        !context(&fixture, false)
            .system_prompt()
            .contains("root rules")
    );
}

#[test]
fn chat_sessions_have_no_project() {
    let fixture = fixture();
    std::fs::write(fixture.cwd.join("AGENTS.md"), "app rules").unwrap();
    let project = context(&fixture, true);
    assert_eq!(project.trust_prompt(), None);
    assert_eq!(project.system_prompt(), "BASE");
    assert!(project.trust(TrustDecision::Yes).is_err());
}
