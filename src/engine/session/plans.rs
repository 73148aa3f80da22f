//! Answers to proposed plans: approve (switch mode and implement) or revise.

use super::Session;
use crate::engine::conversation::store::{EntryBody, Prepared};
use crate::protocol::{ApprovalMode, Event, PlanDecision, PlanStatus, UserInput};

impl Session {
    pub(super) async fn approve_plan(
        &mut self,
        id: &str,
        decision: PlanDecision,
        mode: Option<ApprovalMode>,
        feedback: Option<String>,
    ) {
        let plan = self.emitter.change(|shared| shared.store.plan(id));
        let Some((title, markdown, status)) = plan else {
            self.reply_error(format!("unknown plan id: {id}")).await;
            return;
        };
        if status == PlanStatus::Approved {
            self.reply_error(format!("plan {id} was already approved"))
                .await;
            return;
        }
        let feedback = feedback.filter(|text| !text.trim().is_empty());
        match decision {
            PlanDecision::Approve => {
                let mode = match mode {
                    None => ApprovalMode::AutoEdit,
                    Some(ApprovalMode::Plan) => {
                        self.reply_error("a plan cannot be approved into plan mode: choose manual, auto-edit, auto or full-access")
                            .await;
                        return;
                    }
                    Some(mode) => mode,
                };
                self.set_plan_status(id, &title, &markdown, PlanStatus::Approved)
                    .await;
                self.apply_mode(mode).await;
                let mut message =
                    format!("The plan \"{title}\" ({id}) is approved. Implement it now.");
                if let Some(notes) = feedback {
                    message.push_str(&format!("\n\nNotes from the user:\n{notes}"));
                }
                self.submit(UserInput::text(message)).await;
            }
            PlanDecision::Revise => {
                let Some(feedback) = feedback else {
                    self.reply_error("revise needs feedback: say what to change in the plan")
                        .await;
                    return;
                };
                self.set_plan_status(id, &title, &markdown, PlanStatus::Revising)
                    .await;
                let message = format!(
                    "Revise the plan \"{title}\" ({id}). The user's feedback:\n{feedback}\n\n\
                     Deliver a complete revised plan with propose_plan."
                );
                self.submit(UserInput::text(message)).await;
            }
        }
    }

    async fn set_plan_status(&mut self, id: &str, title: &str, markdown: &str, status: PlanStatus) {
        self.emitter
            .emit_with(|shared| {
                shared.store.append(Prepared::counted(
                    EntryBody::PlanStatus {
                        plan: id.to_owned(),
                        status,
                    },
                    0,
                ));
                let event = Event::ProposedPlan {
                    id: id.to_owned(),
                    title: title.to_owned(),
                    markdown: markdown.to_owned(),
                    status,
                };
                (Some(event), ())
            })
            .await;
    }

    /// `/plan <id> approve [mode] [notes]` and `/plan <id> revise <feedback>`.
    pub(super) async fn plan_command(&mut self, args: &str) {
        let mut words = args.split_whitespace();
        let (Some(id), Some(decision)) = (words.next(), words.next()) else {
            self.reply_error(
                "usage: /plan <id> approve [mode] [notes] | /plan <id> revise <feedback>",
            )
            .await;
            return;
        };
        let rest: Vec<&str> = words.collect();
        match decision {
            "approve" => {
                let (mode, notes) = match rest.split_first() {
                    Some((first, notes)) => match ApprovalMode::parse(first) {
                        Some(mode) => (Some(mode), notes.join(" ")),
                        None => (None, rest.join(" ")),
                    },
                    None => (None, String::new()),
                };
                self.approve_plan(id, PlanDecision::Approve, mode, Some(notes))
                    .await;
            }
            "revise" => {
                self.approve_plan(id, PlanDecision::Revise, None, Some(rest.join(" ")))
                    .await;
            }
            other => {
                self.reply_error(format!(
                    "invalid decision {other:?}: expected \"approve\" or \"revise\""
                ))
                .await;
            }
        }
    }
}
