//! Finding what a project and its user bring to a session: instruction files, skills and
//! custom commands (Markdown with front matter), and project configs.
//!
//! The project's resources are looked for in every directory from the repository root
//! down to the working directory, the most specific last (it wins a name clash); the
//! user's in the profile. Nothing here decides whether they may be used (see `trust`).

use std::path::{Path, PathBuf};

use gray_matter::Matter;
use gray_matter::engine::YAML;
use serde::Deserialize;

use crate::engine::ports::project::CustomCommand;

/// Instruction files above this size are cut: they are re-sent on every request.
pub const MAX_INSTRUCTIONS_BYTES: usize = 64 * 1024;

/// The instruction files a directory may hold, in the order they are read.
const INSTRUCTION_FILES: [&str; 2] = ["AGENTS.md", "JUCODE.md"];

/// The repository root above `cwd` (the nearest directory with a `.git`), or `cwd`.
pub fn repo_root(cwd: &Path) -> PathBuf {
    cwd.ancestors()
        .find(|dir| dir.join(".git").exists())
        .unwrap_or(cwd)
        .to_path_buf()
}

/// The directories from `root` down to `cwd`, root first.
fn chain(root: &Path, cwd: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = cwd
        .ancestors()
        .take_while(|dir| dir.starts_with(root))
        .map(Path::to_path_buf)
        .collect();
    dirs.reverse();
    dirs
}

/// One instruction file, as the prompt shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Instructions {
    pub path: PathBuf,
    pub text: String,
}

/// A skill: the model sees its name, description and path, and reads it when needed.
#[derive(Debug, Clone, PartialEq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub path: PathBuf,
}

/// What a project directory chain (or a profile) holds.
#[derive(Debug, Default, Clone)]
pub struct Found {
    pub instructions: Vec<Instructions>,
    pub skills: Vec<Skill>,
    pub commands: Vec<CustomCommand>,
    /// Project configs (`.jucode/config.toml`), root first.
    pub configs: Vec<PathBuf>,
}

impl Found {
    pub fn is_empty(&self) -> bool {
        self.instructions.is_empty()
            && self.skills.is_empty()
            && self.commands.is_empty()
            && self.configs.is_empty()
    }
}

/// The project's own resources, from `root` down to `cwd`.
pub fn project(root: &Path, cwd: &Path) -> Found {
    let mut found = Found::default();
    for dir in chain(root, cwd) {
        found.instructions.extend(instructions_in(&dir));
        let local = dir.join(".jucode");
        merge_skills(&mut found.skills, skills_in(&local.join("skills")));
        merge_commands(
            &mut found.commands,
            commands_in(&local.join("commands"), "project"),
        );
        let config = local.join("config.toml");
        if config.is_file() {
            found.configs.push(config);
        }
    }
    found
}

/// The user's own resources, in the profile.
pub fn user(profile_dir: &Path) -> Found {
    Found {
        instructions: instructions_file(&profile_dir.join("AGENTS.md"))
            .into_iter()
            .collect(),
        skills: skills_in(&profile_dir.join("skills")),
        commands: commands_in(&profile_dir.join("commands"), "user"),
        configs: Vec::new(),
    }
}

fn instructions_in(dir: &Path) -> Vec<Instructions> {
    INSTRUCTION_FILES
        .iter()
        .filter_map(|name| instructions_file(&dir.join(name)))
        .collect()
}

fn instructions_file(path: &Path) -> Option<Instructions> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let text = if text.len() <= MAX_INSTRUCTIONS_BYTES {
        text.to_owned()
    } else {
        let mut cut = MAX_INSTRUCTIONS_BYTES;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        format!("{}\n[{} truncated]", &text[..cut], path.display())
    };
    Some(Instructions {
        path: path.to_owned(),
        text,
    })
}

#[derive(Debug, Default, Deserialize)]
struct SkillFront {
    name: Option<String>,
    description: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct CommandFront {
    description: Option<String>,
    args: Option<String>,
    #[serde(rename = "argument-hint")]
    argument_hint: Option<String>,
}

/// `<dir>/<name>/SKILL.md`, sorted by name.
fn skills_in(dir: &Path) -> Vec<Skill> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut skills: Vec<Skill> = entries
        .flatten()
        .filter_map(|entry| {
            let path = entry.path().join("SKILL.md");
            let text = std::fs::read_to_string(&path).ok()?;
            let front = Matter::<YAML>::new()
                .parse::<SkillFront>(&text)
                .ok()
                .and_then(|parsed| parsed.data)
                .unwrap_or_default();
            let folder = entry.file_name().to_string_lossy().into_owned();
            Some(Skill {
                name: front.name.unwrap_or(folder),
                description: front.description.unwrap_or_default(),
                path,
            })
        })
        .collect();
    skills.sort_by(|a, b| a.name.cmp(&b.name));
    skills
}

/// `<dir>/<name>.md`, sorted by name. Names are what a slash command can be.
fn commands_in(dir: &Path, marker: &str) -> Vec<CustomCommand> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut commands: Vec<CustomCommand> = entries
        .flatten()
        .filter_map(|entry| {
            let path = entry.path();
            if path.extension().is_none_or(|ext| ext != "md") {
                return None;
            }
            let name = path.file_stem()?.to_string_lossy().into_owned();
            if !valid_command_name(&name) {
                tracing::warn!(path = %path.display(), "not a command name; skipped");
                return None;
            }
            let text = std::fs::read_to_string(&path).ok()?;
            let parsed = Matter::<YAML>::new().parse::<CommandFront>(&text).ok();
            let (front, body) = match parsed {
                Some(parsed) => (parsed.data.unwrap_or_default(), parsed.content),
                None => (CommandFront::default(), text),
            };
            Some(CustomCommand {
                description: front
                    .description
                    .unwrap_or_else(|| format!("Custom command from {}", path.display())),
                args: front.args.or(front.argument_hint).unwrap_or_default(),
                marker: marker.to_owned(),
                template: body.trim().to_owned(),
                name,
            })
        })
        .collect();
    commands.sort_by(|a, b| a.name.cmp(&b.name));
    commands
}

fn valid_command_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Adds `more`, which replaces same-named entries already there (more specific wins).
pub fn merge_skills(into: &mut Vec<Skill>, more: Vec<Skill>) {
    for skill in more {
        into.retain(|known| known.name != skill.name);
        into.push(skill);
    }
}

pub fn merge_commands(into: &mut Vec<CustomCommand>, more: Vec<CustomCommand>) {
    for command in more {
        into.retain(|known| known.name != command.name);
        into.push(command);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_are_found_from_the_root_down() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        let cwd = root.join("crates/app");
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir(root.join(".git")).unwrap();
        std::fs::write(root.join("AGENTS.md"), "root rules").unwrap();
        std::fs::write(cwd.join("JUCODE.md"), "app rules").unwrap();
        std::fs::write(root.join("crates/AGENTS.md"), "  ").unwrap();
        let skill = root.join(".jucode/skills/deploy");
        std::fs::create_dir_all(&skill).unwrap();
        std::fs::write(
            skill.join("SKILL.md"),
            "---\nname: deploy\ndescription: How to deploy\n---\nSteps...",
        )
        .unwrap();
        let commands = cwd.join(".jucode/commands");
        std::fs::create_dir_all(&commands).unwrap();
        std::fs::write(
            commands.join("review.md"),
            "---\ndescription: Review a file\nargs: <file>\n---\nReview $1 carefully.",
        )
        .unwrap();
        std::fs::write(commands.join("bad name.md"), "x").unwrap();
        assert_eq!(repo_root(&cwd), root);
        let found = project(&root, &cwd);
        let texts: Vec<&str> = found.instructions.iter().map(|i| i.text.as_str()).collect();
        assert_eq!(texts, ["root rules", "app rules"]);
        assert_eq!(found.skills.len(), 1);
        assert_eq!(found.skills[0].description, "How to deploy");
        assert_eq!(found.commands.len(), 1);
        let review = &found.commands[0];
        assert_eq!(
            (
                review.name.as_str(),
                review.args.as_str(),
                review.marker.as_str()
            ),
            ("review", "<file>", "project")
        );
        assert_eq!(review.template, "Review $1 carefully.");
        assert!(!found.is_empty());
        assert!(project(&cwd, &cwd).instructions.len() == 1);
    }
}
