//! Session modes (jucode's approval modes), config options (model and reasoning
//! effort), slash commands and plan steps, in their ACP shapes.

use super::Translator;
use super::updates::{
    AvailableCommand, CommandInput, ConfigOption, ConfigValue, Mode, ModeState, PlanEntry,
};
use crate::protocol::{ApprovalMode, CommandInfo, PlanStep, StepStatus};

/// The id of the model config option (category `model`).
pub const MODEL_OPTION: &str = "model";
/// The id of the reasoning effort config option (category `thought_level`).
pub const EFFORT_OPTION: &str = "thought_level";

fn mode(mode: ApprovalMode) -> Mode {
    let (name, description) = match mode {
        ApprovalMode::Manual => ("Manual", "Asks before every edit and shell command"),
        ApprovalMode::Plan => (
            "Plan",
            "Read-only: explores and proposes a plan, changes nothing",
        ),
        ApprovalMode::AutoEdit => (
            "Auto-edit",
            "Edits inside the project run; shell commands ask",
        ),
        ApprovalMode::Auto => (
            "Auto",
            "Edits and commands run; dangerous commands and edits outside the project ask",
        ),
        ApprovalMode::FullAccess => ("Full access", "Everything runs without asking"),
    };
    Mode {
        id: mode.as_str(),
        name,
        description,
    }
}

/// The approval modes as ACP session modes.
pub fn modes(current: ApprovalMode) -> ModeState {
    ModeState {
        current_mode_id: current.as_str().to_owned(),
        available_modes: ApprovalMode::ALL.into_iter().map(mode).collect(),
    }
}

/// The model and (when the model takes one) the reasoning effort, as `select` options.
pub fn config_options(session: &Translator) -> Vec<ConfigOption> {
    let Some(status) = &session.model else {
        return Vec::new();
    };
    let current = format!("{}/{}", status.provider, status.model);
    let mut models: Vec<ConfigValue> = session
        .models
        .iter()
        .map(|entry| ConfigValue {
            value: entry.model.clone(),
            name: entry.model.clone(),
        })
        .collect();
    if !models.iter().any(|entry| entry.value == current) {
        models.insert(
            0,
            ConfigValue {
                value: current.clone(),
                name: current.clone(),
            },
        );
    }
    let mut options = vec![ConfigOption {
        id: MODEL_OPTION,
        name: "Model",
        category: "model",
        kind: "select",
        current_value: current,
        options: models,
    }];
    if !status.reasoning_efforts.is_empty() {
        let current = status
            .reasoning_effort
            .clone()
            .unwrap_or_else(|| status.reasoning_efforts[0].clone());
        options.push(ConfigOption {
            id: EFFORT_OPTION,
            name: "Reasoning effort",
            category: "thought_level",
            kind: "select",
            current_value: current,
            options: status
                .reasoning_efforts
                .iter()
                .map(|effort| ConfigValue {
                    value: effort.clone(),
                    name: effort.clone(),
                })
                .collect(),
        });
    }
    options
}

/// Slash commands, without their `/` (ACP clients add it).
pub fn commands(commands: &[CommandInfo]) -> Vec<AvailableCommand> {
    commands
        .iter()
        .map(|command| AvailableCommand {
            name: command.command.trim_start_matches('/').to_owned(),
            description: command.description.clone(),
            input: (!command.args.is_empty()).then(|| CommandInput {
                hint: command.args.clone(),
            }),
        })
        .collect()
}

pub fn plan(steps: &[PlanStep]) -> Vec<PlanEntry> {
    steps
        .iter()
        .map(|step| PlanEntry {
            content: step.step.clone(),
            priority: "medium",
            status: match step.status {
                StepStatus::Pending => "pending",
                StepStatus::InProgress => "in_progress",
                StepStatus::Completed => "completed",
            },
        })
        .collect()
}
