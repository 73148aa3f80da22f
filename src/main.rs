//! The `jucode` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use jucode::config::Profile;
use jucode::host::SessionOptions;

#[derive(Parser)]
#[command(name = "jucode", version, about = "A coding-agent engine built to be embedded", long_about = None)]
struct Cli {
    /// Write logs to this file instead of stderr (filter with RUST_LOG, default "warn").
    #[arg(long, global = true, value_name = "PATH")]
    log_file: Option<PathBuf>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Speak serve protocol v2 (newline-delimited JSON) on stdin/stdout.
    Serve(ServeArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Run the engine inside this process instead of in the daemon.
    #[arg(long)]
    in_process: bool,
    /// Start a chat session (runs in <profile>/chats with the chat prompt).
    #[arg(long)]
    chat: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_file.as_deref());
    let result = match cli.command {
        Command::Serve(args) => serve(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("jucode: {message}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: ServeArgs) -> Result<(), String> {
    let profile = Profile::resolve()?;
    // Until the daemon lands every session runs in process; `--in-process` keeps that
    // meaning afterwards.
    let _ = args.in_process;
    jucode::transport::stdio::serve_in_process(
        profile,
        SessionOptions::from_current_process(args.chat),
    )
    .map_err(|err| format!("serve failed: {err}"))
}

fn init_logging(file: Option<&std::path::Path>) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match file.map(|path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    }) {
        Some(Ok(file)) => builder
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(file))
            .init(),
        Some(Err(err)) => {
            builder.with_writer(std::io::stderr).init();
            tracing::warn!(%err, "cannot open the log file; logging to stderr");
        }
        None => builder.with_writer(std::io::stderr).init(),
    }
}
