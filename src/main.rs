//! The `jucode` command line.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use jucode::config::Profile;
use jucode::host::SessionOptions;
use jucode::transport::{daemon_cli, remote, shim, stdio};

#[derive(Parser)]
#[command(
    name = "jucode",
    version,
    about = "A coding-agent engine built to be embedded",
    long_about = None,
    args_conflicts_with_subcommands = true,
    subcommand_required = false,
    arg_required_else_help = true
)]
struct Cli {
    /// Write logs to this file instead of the default (stderr; the daemon logs to
    /// <profile>/logs/daemon.log). Filter with RUST_LOG (default "warn", daemon "info").
    #[arg(long, global = true, value_name = "PATH")]
    log_file: Option<PathBuf>,

    #[command(flatten)]
    headless: HeadlessArgs,

    #[command(subcommand)]
    command: Option<Command>,
}

/// `jucode --headless "prompt"`: one turn, the same event lines as `serve` on stdout.
#[derive(clap::Args)]
struct HeadlessArgs {
    /// Run one turn with PROMPT (read from stdin when absent) and exit: 0 when it
    /// completed, 1 when it ended with an error, 2 when the session could not start,
    /// 130 when interrupted (SIGINT). Prints serve's event lines. Nobody answers
    /// approvals: gated calls are deferred (action_deferred) unless the mode allows them.
    #[arg(long)]
    headless: bool,
    /// A chat session (in <profile>/chats, with the chat prompt).
    #[arg(long, requires = "headless", conflicts_with = "session")]
    chat: bool,
    /// The model, as provider/model (default: the config's).
    #[arg(long, requires = "headless", value_name = "MODEL")]
    model: Option<String>,
    /// The approval mode: manual, plan, auto-edit, auto or full-access (default: the
    /// config's, else manual).
    #[arg(long, requires = "headless", value_name = "MODE", value_parser = parse_mode)]
    approval_mode: Option<jucode::config::ApprovalMode>,
    /// Continue this saved session instead of starting a new one.
    #[arg(long, requires = "headless", value_name = "ID")]
    session: Option<String>,
    /// The prompt (words are joined with spaces).
    #[arg(requires = "headless", trailing_var_arg = true, value_name = "PROMPT")]
    prompt: Vec<String>,
}

fn parse_mode(text: &str) -> Result<jucode::config::ApprovalMode, String> {
    jucode::config::ApprovalMode::parse(text)
        .ok_or_else(|| "expected one of manual, plan, auto-edit, auto, full-access".to_owned())
}

#[derive(Subcommand)]
enum Command {
    /// Speak serve protocol v2 (newline-delimited JSON) on stdin/stdout.
    ///
    /// By default the session runs in the jucode daemon (started if none runs) and this
    /// process only relays lines; --in-process runs the engine here instead.
    Serve(ServeArgs),
    /// Run the daemon in the foreground, or manage it (start, stop, status).
    Daemon(DaemonArgs),
    /// Print the JSON Schema (draft 2020-12) of serve protocol v2 and the daemon
    /// protocol: `$defs.Op` (every op) and `$defs.Event` (every event).
    Schema(SchemaArgs),
    /// List the saved sessions (newest first, this directory's first), or remove one.
    Sessions(SessionsArgs),
    /// Sign in to a remote MCP server that needs it, or forget its sign-in.
    Mcp(McpArgs),
    /// Speak the Agent Client Protocol (ACP v1, JSON-RPC on stdin/stdout) for editors.
    ///
    /// Sessions run in the jucode daemon (started if none runs), so another client can
    /// attach to them (`jucode serve --session ID`); --in-process runs them here.
    Acp(AcpArgs),
}

#[derive(clap::Args)]
struct AcpArgs {
    /// Run this on another machine over ssh ([user@]host, or an alias of
    /// ~/.ssh/config): the remote's own jucode, with every other flag passed through.
    #[arg(long, value_name = "[USER@]HOST")]
    remote: Option<String>,
    /// The remote's jucode program (default: `jucode` on the remote's PATH).
    #[arg(
        long,
        value_name = "PROGRAM",
        requires = "remote",
        default_value = "jucode"
    )]
    remote_program: String,
    /// Run the sessions inside this process instead of in the daemon.
    #[arg(long)]
    in_process: bool,
    /// The daemon's socket (default as for `serve --socket`).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
}

#[derive(clap::Args)]
struct SessionsArgs {
    /// Run this on another machine over ssh ([user@]host, or an alias of
    /// ~/.ssh/config): the remote's own jucode, with every other flag passed through.
    #[arg(long, value_name = "[USER@]HOST")]
    remote: Option<String>,
    /// The remote's jucode program (default: `jucode` on the remote's PATH).
    #[arg(
        long,
        value_name = "PROGRAM",
        requires = "remote",
        default_value = "jucode"
    )]
    remote_program: String,
    #[command(subcommand)]
    action: Option<SessionsAction>,
}

#[derive(clap::Args)]
struct McpArgs {
    #[command(subcommand)]
    action: McpAction,
}

#[derive(Subcommand)]
enum McpAction {
    /// Sign in to `[mcp_servers.NAME]` (OAuth): prints the address to open, opens a
    /// browser where it can, and waits for it to come back. Every session of the
    /// profile then connects with the sign-in.
    Login {
        name: String,
        /// Only print the address; do not try to open a browser.
        #[arg(long)]
        no_browser: bool,
    },
    /// Forget the sign-in of `[mcp_servers.NAME]` (revoked where the server offers it).
    Logout { name: String },
}

#[derive(Subcommand)]
enum SessionsAction {
    /// Delete a saved session's file (refused while a process runs it).
    Rm {
        /// The session id, as `jucode sessions` lists it.
        id: String,
        /// When the daemon runs the session, close it there first (a running turn is
        /// stopped), then delete it.
        #[arg(long)]
        force: bool,
    },
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Run this on another machine over ssh ([user@]host, or an alias of
    /// ~/.ssh/config): the remote's own jucode, with every other flag passed through.
    #[arg(long, value_name = "[USER@]HOST")]
    remote: Option<String>,
    /// The remote's jucode program (default: `jucode` on the remote's PATH).
    #[arg(
        long,
        value_name = "PROGRAM",
        requires = "remote",
        default_value = "jucode"
    )]
    remote_program: String,
    /// Run the engine inside this process instead of in the daemon.
    #[arg(long)]
    in_process: bool,
    /// Start a chat session (runs in <profile>/chats with the chat prompt).
    #[arg(long, conflicts_with = "session")]
    chat: bool,
    /// Continue this session instead of starting a new one: attach to it in the daemon
    /// (which loads it from disk if it is not running), or with --in-process load it
    /// here. Exit code 2 when no such session exists or it is open elsewhere.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Run the session on another agent the daemon hosts: an `[engines.NAME]` entry of
    /// config.toml (an ACP agent). Needs the daemon.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["session", "chat", "in_process"])]
    engine: Option<String>,
    /// The daemon's socket (default: $JUCODE_HOME/daemon.sock, else
    /// $XDG_RUNTIME_DIR/jucode/daemon.sock, else ~/.jucode/daemon.sock).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Also serve this session over the WebSocket API and dashboard: JSON or YAML with
    /// `host`, `port`, `headless` (default 127.0.0.1:23254), as `daemon --server-config`
    /// but for this one session. Needs the daemon (not with --in-process).
    #[arg(long, value_name = "JSON|YAML", conflicts_with = "in_process")]
    server_config: Option<String>,
}

#[derive(clap::Args)]
struct DaemonArgs {
    #[command(subcommand)]
    action: Option<DaemonAction>,
    /// Serve the WebSocket API and dashboard: JSON or YAML with `host`, `port`,
    /// `headless` (default 127.0.0.1:23254; port 0 disables). Overrides [websocket].
    #[arg(long, value_name = "JSON|YAML")]
    server_config: Option<String>,
    /// The socket to listen on or talk to (default as for `serve --socket`).
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
}

#[derive(Subcommand)]
enum DaemonAction {
    /// Start the daemon in the background (no-op when one is running).
    Start,
    /// Stop the daemon gracefully: sessions end, the socket is removed.
    Stop,
    /// Print the daemon's status as JSON; exits non-zero when no daemon answers.
    Status,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match cli.command {
        Some(Command::Serve(args)) => {
            init_logging(cli.log_file.as_deref(), "warn");
            serve(args)
        }
        Some(Command::Daemon(args)) => daemon(args, cli.log_file),
        Some(Command::Schema(args)) => schema(&args),
        Some(Command::Sessions(args)) => {
            init_logging(cli.log_file.as_deref(), "warn");
            sessions(args)
        }
        Some(Command::Acp(args)) => {
            init_logging(cli.log_file.as_deref(), "warn");
            acp(args)
        }
        Some(Command::Mcp(args)) => {
            init_logging(cli.log_file.as_deref(), "warn");
            mcp(args)
        }
        None if cli.headless.headless => {
            init_logging(cli.log_file.as_deref(), "warn");
            headless(cli.headless)
        }
        None => {
            eprintln!("jucode: nothing to do: give a command (try --help) or --headless PROMPT");
            2
        }
    };
    ExitCode::from(code)
}

fn serve(args: ServeArgs) -> u8 {
    if let Some(host) = args.remote {
        return on_remote(host, args.remote_program, remote::Dialect::Serve);
    }
    let profile = match checked_profile() {
        Ok(profile) => profile,
        Err(code) => return code,
    };
    if args.in_process {
        let options = SessionOptions::from_current_process(args.chat, args.session);
        return match stdio::serve_in_process(profile, options) {
            Ok(code) => code,
            Err(err) => fail(&format!("serve failed: {err}")),
        };
    }
    let Some(socket) = args
        .socket
        .or_else(jucode_daemon::default_socket_path_from_env)
    else {
        return fail("cannot find a place for the daemon socket: set JUCODE_HOME or --socket");
    };
    let attaching = args.session.is_some();
    let target = match args.session {
        Some(id) => shim::Target::Attach(id),
        None if args.chat => shim::Target::Open {
            cwd: profile.chats_dir(),
            chat: true,
            engine: None,
        },
        None => shim::Target::Open {
            cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
            chat: false,
            engine: args.engine.clone(),
        },
    };
    let pinned = match args.server_config.as_deref() {
        Some(text) => match websocket_for_this_session(&profile, text, &socket) {
            Ok(pinned) => Some(pinned),
            Err(message) => return fail(&message),
        },
        None => None,
    };
    let serving_websocket = pinned.is_some();
    match shim::serve_via_daemon(&socket, target, pinned) {
        shim::Outcome::Exited(code) => code as u8,
        shim::Outcome::Unreachable(why) if attaching => fail(&why),
        // Other agents are the daemon's to host: no silent fallback to jucode's own.
        shim::Outcome::Unreachable(why) if args.engine.is_some() => fail(&why),
        shim::Outcome::Unreachable(why) => {
            // No daemon, and none could be started (a socket directory others can
            // write to, no room, ...): the session still runs, here. Nothing was
            // printed yet, so stdout is exactly in-process serve's.
            eprintln!("jucode: {why}; running the session in this process instead");
            if serving_websocket {
                eprintln!("jucode: the WebSocket server needs the daemon: it is not started");
            }
            let options = SessionOptions::from_current_process(args.chat, None);
            match stdio::serve_in_process(profile, options) {
                Ok(code) => code,
                Err(err) => fail(&format!("serve failed: {err}")),
            }
        }
    }
}

fn headless(args: HeadlessArgs) -> u8 {
    let profile = match checked_profile() {
        Ok(profile) => profile,
        Err(code) => return code,
    };
    let prompt = if args.prompt.is_empty() {
        let mut text = String::new();
        if let Err(err) = std::io::Read::read_to_string(&mut std::io::stdin(), &mut text) {
            return fail(&format!("cannot read the prompt from stdin: {err}"));
        }
        // What a shell pipeline adds at the end is not part of the prompt.
        text.trim_end_matches(['\n', '\r']).to_owned()
    } else {
        args.prompt.join(" ")
    };
    if prompt.trim().is_empty() {
        eprintln!("jucode: --headless needs a prompt (as an argument, or on stdin)");
        return 2;
    }
    let mut options = SessionOptions::from_current_process(args.chat, args.session);
    options.model = args.model;
    options.approval_mode = args.approval_mode;
    match jucode::transport::headless::run(profile, options, prompt) {
        Ok(code) => code,
        Err(err) => fail(&format!("headless run failed: {err}")),
    }
}

fn acp(args: AcpArgs) -> u8 {
    use jucode::transport::link::{Backend, Local};
    if let Some(host) = args.remote {
        return on_remote(host, args.remote_program, remote::Dialect::Other);
    }
    let profile = match checked_profile() {
        Ok(profile) => profile,
        Err(code) => return code,
    };
    let attachments = profile.dir.join("attachments");
    let backend = if args.in_process {
        Backend::InProcess(std::sync::Arc::new(Local::new(profile)))
    } else {
        match args
            .socket
            .or_else(jucode_daemon::default_socket_path_from_env)
        {
            Some(socket) => Backend::Daemon {
                socket,
                start: true,
            },
            None => {
                return fail(
                    "cannot find a place for the daemon socket: set JUCODE_HOME or --socket",
                );
            }
        }
    };
    jucode::transport::acp::run(backend, attachments)
}

/// `serve --server-config`: a WebSocket server on a thread of its own, serving the
/// session the shim is about to open or attach to (through the daemon, like any other
/// client of it). It listens once that session is known; the returned sender is the
/// shim's to tell it. A refused exposure or a port that cannot be bound is an error
/// before anything else happens.
fn websocket_for_this_session(
    profile: &Profile,
    flags: &str,
    socket: &std::path::Path,
) -> Result<tokio::sync::watch::Sender<Option<String>>, String> {
    use jucode::transport::websocket;
    let flags = websocket::parse_server_flags(flags)?;
    let Some(mut config) = websocket::configured(profile, Some(&flags))? else {
        return Err("--server-config: port 0 serves nothing".to_owned());
    };
    let (announce, pinned) = tokio::sync::watch::channel(None);
    config.pinned = Some(pinned.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| format!("cannot start the WebSocket server: {err}"))?;
    let listener = runtime.block_on(websocket::bind(&config)).map_err(|err| {
        format!(
            "the WebSocket server cannot listen on {}:{}: {err}",
            config.host, config.port
        )
    })?;
    let backend = jucode::transport::link::Backend::Daemon {
        socket: socket.to_path_buf(),
        start: false,
    };
    let spawned = std::thread::Builder::new()
        .name("jucode-websocket".into())
        .spawn(move || {
            runtime.block_on(async move {
                let mut pinned = pinned;
                // Connections wait in the backlog until the session is known.
                if pinned.wait_for(Option::is_some).await.is_err() {
                    return;
                }
                let stop = tokio_util::sync::CancellationToken::new();
                websocket::serve(listener, config, backend, stop).await;
            });
        });
    spawned.map_err(|err| format!("cannot start the WebSocket server: {err}"))?;
    Ok(announce)
}

fn sessions(args: SessionsArgs) -> u8 {
    if let Some(host) = args.remote {
        return on_remote(host, args.remote_program, remote::Dialect::Other);
    }
    let profile = match checked_profile() {
        Ok(profile) => profile,
        Err(code) => return code,
    };
    match args.action {
        Some(SessionsAction::Rm { id, force }) => remove_session(&profile, &id, force),
        None => {
            let cwd = std::env::current_dir().ok();
            let saved = match jucode::sessions::list(&profile.dir, cwd.as_deref()) {
                Ok(saved) => saved,
                // Not "no saved sessions": the sessions may be there, out of reach.
                Err(message) => {
                    eprintln!("jucode: cannot list the saved sessions: {message}");
                    return 2;
                }
            };
            if saved.is_empty() {
                eprintln!(
                    "no saved sessions in {}",
                    jucode::sessions::sessions_dir(&profile.dir).display()
                );
                return 0;
            }
            let mut out = String::new();
            for session in saved {
                let updated = chrono::DateTime::from_timestamp_millis(session.updated as i64)
                    .map(|at| at.format("%Y-%m-%d %H:%M").to_string())
                    .unwrap_or_default();
                let kind = match (&session.engine, session.chat) {
                    (Some(engine), _) => format!(" (on {engine})"),
                    (None, true) => " (chat)".to_owned(),
                    (None, false) => String::new(),
                };
                match (&session.broken, &session.cwd) {
                    (Some(why), _) => out.push_str(&format!(
                        "{}  {updated}  broken: it cannot be continued\n    {why}\n",
                        session.id
                    )),
                    (None, cwd) => out.push_str(&format!(
                        "{}  {updated}  {}{kind}\n    {}\n",
                        session.id,
                        cwd.as_deref().unwrap_or(Path::new("?")).display(),
                        session.label
                    )),
                }
            }
            print_out(&out)
        }
    }
}

/// This command line, run by the remote's jucode over ssh (`transport::remote`).
fn on_remote(host: String, program: String, dialect: remote::Dialect) -> u8 {
    match remote::Remote::new(host, program) {
        Ok(remote) => {
            let args = remote::passed_through(std::env::args_os().skip(1));
            remote.run(&args, dialect)
        }
        Err(message) => fail(&message),
    }
}

#[derive(clap::Args)]
struct SchemaArgs {
    /// The WebSocket JSON-RPC dialect's schema instead (docs/websocket.md): each method's
    /// params and result, the notifications, and the envelopes of every message.
    #[arg(long)]
    websocket: bool,
}

fn schema(args: &SchemaArgs) -> u8 {
    let text = if args.websocket {
        jucode::transport::websocket::methods::schema_text()
    } else {
        jucode::protocol::schema::document_text()
    };
    match jucode::transport::stdio::print_stdout(&text) {
        Ok(()) => 0,
        Err(err) => fail(&format!("cannot write the schema: {err}")),
    }
}

fn daemon(args: DaemonArgs, log_file: Option<PathBuf>) -> u8 {
    let profile = match checked_profile() {
        Ok(profile) => profile,
        Err(code) => return code,
    };
    let Some(socket) = args
        .socket
        .or_else(jucode_daemon::default_socket_path_from_env)
    else {
        return fail("cannot find a place for the daemon socket: set JUCODE_HOME or --socket");
    };
    match args.action {
        None => {
            let log_file = log_file.unwrap_or_else(|| profile.logs_dir().join("daemon.log"));
            if let Some(dir) = log_file.parent() {
                let _ = jucode::config::private::create_dir_all(dir);
            }
            init_logging(Some(&log_file), "info");
            let flags = match args
                .server_config
                .as_deref()
                .map(jucode::transport::websocket::parse_server_flags)
                .transpose()
            {
                Ok(flags) => flags,
                Err(message) => return fail(&message),
            };
            let advice_profile = profile.clone();
            match daemon_cli::run_foreground(profile, &socket, flags) {
                Ok(()) => 0,
                Err(err) if err.kind() == std::io::ErrorKind::AddrInUse => {
                    fail(&daemon_cli::already_running_advice(&err, &advice_profile))
                }
                Err(err) => fail(&format!("daemon: {err}")),
            }
        }
        Some(action) => {
            init_logging(log_file.as_deref(), "warn");
            let result = match action {
                DaemonAction::Start => daemon_cli::start(&socket),
                DaemonAction::Stop => daemon_cli::stop(&socket),
                DaemonAction::Status => daemon_cli::status(&socket),
            };
            match result {
                Ok(code) => code,
                Err(message) => fail(&message),
            }
        }
    }
}

/// The profile, refused (exit 2, as a session that cannot start) when someone else
/// could have written it (`Profile::check_private`).
/// `jucode mcp login|logout NAME`.
fn mcp(args: McpArgs) -> u8 {
    let profile = match checked_profile() {
        Ok(profile) => profile,
        Err(code) => return code,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => return fail(&format!("cannot start: {err}")),
    };
    let config_path = profile.config_path();
    match args.action {
        McpAction::Login { name, no_browser } => {
            let done = runtime.block_on(jucode::mcp::login(&config_path, &name, |url| {
                println!("Open this address to sign in to {name}:\n{url}");
                if !no_browser {
                    open_browser(url);
                }
            }));
            match done {
                Ok(()) => {
                    println!("signed in to {name}");
                    0
                }
                Err(message) => fail(&message),
            }
        }
        McpAction::Logout { name } => {
            match runtime.block_on(jucode::mcp::logout(&config_path, &name)) {
                Ok(true) => {
                    println!("signed out of {name}");
                    0
                }
                Ok(false) => {
                    println!("{name} had no sign-in");
                    0
                }
                Err(message) => fail(&message),
            }
        }
    }
}

/// Opens `url` in the desktop's browser where there is one; nothing happens otherwise
/// (the address is printed either way).
fn open_browser(url: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let _ = std::process::Command::new(opener)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
}

fn checked_profile() -> Result<Profile, u8> {
    let profile = Profile::resolve().map_err(|message| fail(&message))?;
    profile.check_private().map_err(|message| {
        eprintln!("jucode: {message}");
        2
    })?;
    Ok(profile)
}

/// `jucode sessions rm [--force] ID`.
fn remove_session(profile: &Profile, id: &str, force: bool) -> u8 {
    use jucode::sessions::RemoveError;
    let removed = match jucode::sessions::remove(&profile.dir, id) {
        Err(RemoveError::OpenInDaemon(_)) if force => {
            let Some(socket) = jucode_daemon::default_socket_path_from_env() else {
                return fail("cannot find the daemon socket: set JUCODE_HOME");
            };
            if let Err(message) = daemon_cli::close_session(&socket, id) {
                return fail(&format!(
                    "cannot close session {id} in the daemon: {message}"
                ));
            }
            // The daemon releases the file once the session's last entries are written.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            let mut pause = std::time::Duration::from_millis(5);
            loop {
                match jucode::sessions::remove(&profile.dir, id) {
                    Err(RemoveError::OpenInDaemon(_)) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(std::time::Duration::from_millis(200));
                    }
                    other => break other,
                }
            }
        }
        other => other,
    };
    match removed {
        Ok(path) => print_out(&format!("removed session {id} ({})\n", path.display())),
        Err(err) => fail(&err.to_string()),
    }
}

/// Prints a command's result: 0, or 1 when stdout cannot be written (a closed pipe is
/// fine: see `print_stdout`).
fn print_out(text: &str) -> u8 {
    match jucode::transport::stdio::print_stdout(text) {
        Ok(()) => 0,
        Err(err) => fail(&format!("cannot write to stdout: {err}")),
    }
}

fn fail(message: &str) -> u8 {
    eprintln!("jucode: {message}");
    1
}

/// A log file that holds whole lines only: an event (one write of whole lines) that
/// fails, on a full disk say, is cut back off, and the first line written once the disk
/// takes them again says how many were lost. Logging never stops the process: the
/// failure goes back to `tracing`, which drops the event.
struct LogFile {
    file: std::fs::File,
    lost: u64,
}

impl LogFile {
    /// Appends `bytes` whole or not at all.
    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let whole = self.file.metadata()?.len();
        let written = self.file.write_all(bytes);
        if written.is_err() {
            let _ = self.file.set_len(whole);
        }
        written
    }
}

impl std::io::Write for LogFile {
    fn write(&mut self, event: &[u8]) -> std::io::Result<usize> {
        if self.lost > 0 {
            let note = format!(
                "jucode: {} log events could not be written (the disk refused them)\n",
                self.lost
            );
            if let Err(err) = self.append(note.as_bytes()) {
                self.lost += 1;
                return Err(err);
            }
            self.lost = 0;
        }
        match self.append(event) {
            Ok(()) => Ok(event.len()),
            Err(err) => {
                self.lost += 1;
                Err(err)
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

fn init_logging(file: Option<&Path>, default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match file.map(|path| {
        jucode::config::private::file_options()
            .create(true)
            .append(true)
            .open(path)
    }) {
        Some(Ok(file)) => builder
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(LogFile { file, lost: 0 }))
            .init(),
        Some(Err(err)) => {
            builder.with_writer(std::io::stderr).init();
            tracing::warn!(%err, "cannot open the log file; logging to stderr");
        }
        None => builder.with_writer(std::io::stderr).init(),
    }
}
