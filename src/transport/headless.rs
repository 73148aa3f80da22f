//! `jucode --headless`: one turn, scripted. The same event lines as `serve` on stdout
//! (`hello`, the startup batch, the turn's events), then the process exits with the
//! turn's outcome: 0 after `status: ready`, 1 when the turn ended with an error, 130
//! when SIGINT interrupted it.
//!
//! Nobody can answer an approval, so the session is unattended from the start: a gated
//! call becomes an `action_deferred` event (the model is told it awaits confirmation)
//! unless the approval mode lets it run. Nothing but event lines reaches stdout;
//! diagnostics go to stderr.

use tokio::sync::mpsc;

use crate::engine::{Input, Outbound, SOLE_CLIENT, TurnEnd};
use crate::protocol::{DaemonEvent, Op, UserInput};

/// Exit codes.
pub const EXIT_OK: u8 = 0;
pub const EXIT_TURN_FAILED: u8 = 1;
/// The session could not start as asked (an `error` event says why).
pub const EXIT_CANNOT_START: u8 = 2;
pub const EXIT_INTERRUPTED: u8 = 130;

/// Runs `prompt` as one turn of a session built from `options`.
pub fn run(
    profile: crate::config::Profile,
    options: crate::host::SessionOptions,
    prompt: String,
) -> std::io::Result<u8> {
    let (events, lines) = mpsc::channel(crate::engine::EVENT_QUEUE);
    let writer =
        super::stdio::spawn_writer(std::io::stdout(), crate::protocol::hello_line(), lines);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("jucode-engine")
        .build()?;
    let code = runtime.block_on(async move {
        let asked_model = options.model.clone();
        let config_path = profile.config_path();
        let problems = crate::config::LoadedConfig::load(&config_path).problems;
        if !problems.is_empty() {
            return config_unusable(&events, &config_path, problems).await;
        }
        let built = tokio::task::spawn_blocking(move || crate::host::build_session(&profile, options))
            .await
            .unwrap_or_else(|err| Err(format!("internal error: {err}")));
        let mut params = match built {
            Ok(params) => params,
            Err(message) => return cannot_start(&events, message).await,
        };
        // A scripted run on a model it did not ask for would look like success.
        if let Err(why) = params.catalog.default_model() {
            let message = match &asked_model {
                Some(model) => format!("--model {model}: {why}"),
                None => why,
            };
            return cannot_start(&events, message).await;
        }
        let (ends_tx, mut ends) = mpsc::unbounded_channel();
        params.turn_ends = Some(ends_tx);
        let session = crate::engine::spawn(params, events);
        let inputs = session.inputs.clone();
        let send = |op: Op| {
            let inputs = inputs.clone();
            async move {
                let _ = inputs
                    .send(Input::Op {
                        client: SOLE_CLIENT,
                        op,
                    })
                    .await;
            }
        };
        send(Op::SetAttended { attended: false }).await;
        send(Op::UserMessage(UserInput::text(prompt))).await;
        let mut interrupted = false;
        let end = loop {
            tokio::select! {
                end = ends.recv() => break end,
                signal = tokio::signal::ctrl_c(), if !interrupted => {
                    if signal.is_err() {
                        continue;
                    }
                    interrupted = true;
                    eprintln!("jucode: interrupted; stopping the turn (press Ctrl-C again to quit at once)");
                    send(Op::Interrupt { index: None }).await;
                    // A second Ctrl-C quits at once.
                    tokio::spawn(async {
                        if tokio::signal::ctrl_c().await.is_ok() {
                            std::process::exit(i32::from(EXIT_INTERRUPTED));
                        }
                    });
                }
            }
        };
        send(Op::Shutdown).await;
        drop(inputs);
        drop(session.inputs);
        if let Err(err) = session.task.await {
            tracing::error!(%err, "session task failed");
        }
        crate::sessions::flush_all(std::time::Duration::from_secs(10)).await;
        match end {
            Some(TurnEnd::Completed) => EXIT_OK,
            Some(TurnEnd::Interrupted) => EXIT_INTERRUPTED,
            Some(TurnEnd::Failed) | None => EXIT_TURN_FAILED,
        }
    });
    drop(runtime);
    let _ = writer.join();
    Ok(code)
}

async fn cannot_start(events: &mpsc::Sender<Outbound>, message: String) -> u8 {
    eprintln!("jucode: {message}");
    let line = DaemonEvent::error(message, None).line();
    let _ = events.send(Outbound::Line(line)).await;
    EXIT_CANNOT_START
}

/// A config file with any problem stops a scripted run before it starts: `serve` can
/// go on and let the user fix things, but a script cannot read the errors, and a turn
/// answered on settings other than the ones written (a default in place of a typo, the
/// demo in place of a model) would exit 0 as if it had worked.
async fn config_unusable(
    events: &mpsc::Sender<Outbound>,
    path: &std::path::Path,
    problems: Vec<String>,
) -> u8 {
    let count = problems.len();
    for problem in problems {
        eprintln!("jucode: {problem}");
        let line = DaemonEvent::error(problem, None).line();
        let _ = events.send(Outbound::Line(line)).await;
    }
    let noun = if count == 1 { "problem" } else { "problems" };
    cannot_start(
        events,
        format!(
            "{} has {count} {noun} (above); --headless runs nothing until it is fixed",
            path.display()
        ),
    )
    .await
}
