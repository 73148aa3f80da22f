//! Answers to proposed plans: approve (switch mode and implement) or revise.

use super::Session;
use crate::config::ApprovalMode;
use crate::protocol::{Event, UserInput};

impl Session {
    pub(super) async fn approve_plan(
        &mut self,
        id: &str,
        decision: &str,
        mode: Option<String>,
        feedback: Option<String>,
    ) {
        let plan = self.emitter.change(|shared| {
            shared.history.plan(id).map(|(title, markdown, status)| {
                (title.to_owned(), markdown.to_owned(), status.to_owned())
            })
        });
        let Some((title, markdown, status)) = plan else {
            self.emitter.error(format!("unknown plan id: {id}")).await;
            return;
        };
        if status == "approved" {
            self.emitter
                .error(format!("plan {id} was already approved"))
                .await;
            return;
        }
        let feedback = feedback.filter(|text| !text.trim().is_empty());
        match decision {
            "approve" => {
                let mode = match mode.as_deref().map(ApprovalMode::parse) {
                    None => ApprovalMode::AutoEdit,
                    Some(Some(ApprovalMode::Plan)) => {
                        self.emitter
                            .error("a plan cannot be approved into plan mode: choose manual, auto-edit, auto or full-access")
                            .await;
                        return;
                    }
                    Some(Some(mode)) => mode,
                    Some(None) => {
                        self.emitter
                            .error(format!(
                                "unknown approval mode: {} (expected manual, auto-edit, auto or full-access)",
                                mode.unwrap_or_default()
                            ))
                            .await;
                        return;
                    }
                };
                self.set_plan_status(id, &title, &markdown, "approved")
                    .await;
                self.apply_mode(mode).await;
                let mut message =
                    format!("The plan \"{title}\" ({id}) is approved. Implement it now.");
                if let Some(notes) = feedback {
                    message.push_str(&format!("\n\nNotes from the user:\n{notes}"));
                }
                self.submit(UserInput::text(message)).await;
            }
            "revise" => {
                let Some(feedback) = feedback else {
                    self.emitter
                        .error("revise needs feedback: say what to change in the plan")
                        .await;
                    return;
                };
                self.set_plan_status(id, &title, &markdown, "revising")
                    .await;
                let message = format!(
                    "Revise the plan \"{title}\" ({id}). The user's feedback:\n{feedback}\n\n\
                     Deliver a complete revised plan with propose_plan."
                );
                self.submit(UserInput::text(message)).await;
            }
            other => {
                self.emitter
                    .error(format!(
                        "invalid decision {other:?}: expected \"approve\" or \"revise\""
                    ))
                    .await;
            }
        }
    }

    async fn set_plan_status(&mut self, id: &str, title: &str, markdown: &str, status: &str) {
        self.emitter
            .emit_with(|shared| {
                shared.history.set_plan_status(id, status);
                let event = Event::ProposedPlan {
                    id: id.to_owned(),
                    title: title.to_owned(),
                    markdown: markdown.to_owned(),
                    status: status.to_owned(),
                };
                (Some(event), ())
            })
            .await;
    }

    /// `/plan <id> approve [mode] [notes]` and `/plan <id> revise <feedback>`.
    pub(super) async fn plan_command(&mut self, args: &str) {
        let mut words = args.split_whitespace();
        let (Some(id), Some(decision)) = (words.next(), words.next()) else {
            self.emitter
                .error("usage: /plan <id> approve [mode] [notes] | /plan <id> revise <feedback>")
                .await;
            return;
        };
        let rest: Vec<&str> = words.collect();
        match decision {
            "approve" => {
                let (mode, notes) = match rest.split_first() {
                    Some((first, notes)) if ApprovalMode::parse(first).is_some() => {
                        (Some((*first).to_owned()), notes.join(" "))
                    }
                    _ => (None, rest.join(" ")),
                };
                self.approve_plan(id, "approve", mode, Some(notes)).await;
            }
            other => {
                self.approve_plan(id, other, None, Some(rest.join(" ")))
                    .await;
            }
        }
    }
}
