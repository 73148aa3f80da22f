//! One client connection: its reader (ops in, routed) and its writer (the outbox).
//!
//! The reader decodes lines with the bounded [`LineCodec`], reads `op` and `session`
//! from each, and either runs a daemon op or forwards the raw line to a session. The
//! writer is a separate task draining the client's [`Outbox`](crate::outbox): so a
//! client that stops reading never stalls its own reader's routing, let alone a
//! session. Both share the stream (interprocess streams read and write through `&`).
//!
//! Interprocess streams do not shut down on a half being dropped, so the connection
//! closes only when both tasks have let go: the writer ends (finished, overflowed,
//! failed) and cancels `writer_done`, which stops the reader; the reader ending (EOF,
//! error, daemon stop) finishes the outbox, which ends the writer once it has flushed.
//!
//! The routing rules (which session an op goes to, what quitting means) are in
//! `docs/daemon-protocol.md`; this file implements them.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use interprocess::local_socket::tokio::Stream;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use tokio_util::codec::Decoder;
use tokio_util::sync::CancellationToken;

use crate::framing::{Frame, LineCodec};
use crate::host::{ClientInput, Host, Hosted, Intercept, OpenParams};
use crate::outbox::{Outbox, write_loop};
use crate::protocol::{CloseReason, DaemonEvent, DaemonOp, DaemonStatus, OpenOp, SessionInfo};
use crate::registry::{ClientHandle, Leave, QuitOutcome, Session, SessionId};
use crate::server::Shared;
use crate::wire::{self, Routed, Unroutable};

/// Bytes the reader asks the socket for at a time.
const READ_CHUNK: usize = 8 * 1024;
/// A read buffer grown larger than this (by a long line) is released once empty.
const KEEP_READ_BUFFER: usize = 64 * 1024;

/// How long a refused connection gets to read why before it is closed.
const REFUSAL_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Serves one accepted connection until it closes; `slot` is its share of the
/// daemon's connection bound, given back when it closes.
pub(crate) async fn serve<H: Host>(
    shared: Arc<Shared<H>>,
    stream: Stream,
    slot: tokio::sync::OwnedSemaphorePermit,
) {
    let _slot = slot;
    if !crate::listener::peer_allowed(&stream) {
        return;
    }
    let id = shared.next_client_id();
    let client = Arc::new(ClientHandle::new(id, Outbox::new(shared.limits)));
    let _ = client.outbox.push(shared.host.hello());
    shared.clients.fetch_add(1, Ordering::Relaxed);
    tracing::debug!(client = id, "client connected");

    let stream = Arc::new(stream);
    let writer_done = CancellationToken::new();
    let writer = tokio::spawn({
        let stream = stream.clone();
        let client = client.clone();
        let writer_done = writer_done.clone();
        let hard_stop = shared.hard_stop.clone();
        async move {
            write_loop(&*stream, &client.outbox, &hard_stop).await;
            writer_done.cancel();
        }
    });

    let mut connection = Connection {
        shared: shared.clone(),
        client: client.clone(),
        writer_done: writer_done.clone(),
    };
    let end = connection.read_loop(&stream).await;
    match end {
        ReadEnd::Eof => connection.leave_on_eof(),
        ReadEnd::DaemonStopping => {
            // Stay attached while the sessions wind down, to pass on their last events.
            tokio::select! {
                () = shared.release_clients.cancelled() => {}
                () = writer_done.cancelled() => {}
            }
            client.outbox.finish();
            connection.detach_all();
        }
        ReadEnd::WriterDone => {
            client.outbox.finish();
            connection.detach_all();
        }
    }
    drop(stream);
    let _ = writer.await;
    shared.clients.fetch_sub(1, Ordering::Relaxed);
    tracing::debug!(client = id, "client disconnected");
}

/// Tells a connection over the daemon's bound why it is closed, instead of `hello`.
pub(crate) async fn refuse_full<H: Host>(shared: Arc<Shared<H>>, stream: Stream) {
    if !crate::listener::peer_allowed(&stream) {
        return;
    }
    tracing::warn!(
        max = shared.max_clients,
        "refused a connection: too many clients"
    );
    let message = format!(
        "too many connections: this jucode daemon serves at most {} clients at once; close some and retry",
        shared.max_clients
    );
    let line = DaemonEvent::error(message, None).line();
    let mut writer = &stream;
    let _ = tokio::time::timeout(REFUSAL_WRITE_TIMEOUT, async {
        use tokio::io::AsyncWriteExt;
        writer.write_all(&line).await?;
        writer.flush().await
    })
    .await;
}

enum ReadEnd {
    Eof,
    DaemonStopping,
    WriterDone,
}

struct Connection<H: Host> {
    shared: Arc<Shared<H>>,
    client: Arc<ClientHandle>,
    writer_done: CancellationToken,
}

impl<H: Host> Connection<H> {
    async fn read_loop(&mut self, stream: &Stream) -> ReadEnd {
        let mut codec = LineCodec::new();
        let mut buf = BytesMut::new();
        loop {
            loop {
                if self.client.outbox.is_closed() {
                    return ReadEnd::WriterDone;
                }
                match codec.decode(&mut buf) {
                    Ok(Some(frame)) => self.handle(frame).await,
                    Ok(None) => break,
                    Err(err) => {
                        tracing::debug!(%err, "decode failed");
                        return ReadEnd::Eof;
                    }
                }
            }
            if buf.is_empty() && buf.capacity() > KEEP_READ_BUFFER {
                buf = BytesMut::new();
            }
            buf.reserve(READ_CHUNK);
            let mut reader = stream;
            let read = tokio::select! {
                biased;
                () = self.writer_done.cancelled() => return ReadEnd::WriterDone,
                () = self.shared.stopping.cancelled() => return ReadEnd::DaemonStopping,
                read = reader.read_buf(&mut buf) => read,
            };
            match read {
                Ok(0) => break,
                Ok(_) => {}
                Err(err) => {
                    tracing::debug!(%err, "client read failed");
                    return ReadEnd::Eof;
                }
            }
        }
        // EOF: a last line without its newline still counts.
        while let Ok(Some(frame)) = codec.decode_eof(&mut buf) {
            self.handle(frame).await;
        }
        ReadEnd::Eof
    }

    /// The client closed its side: it leaves every session it was attached to, except
    /// those it quit and that are still winding down (it gets their last events), and
    /// the connection closes once its queue is flushed.
    fn leave_on_eof(&self) {
        for id in self.client.attached() {
            if let Some(session) = self.shared.sessions.get(&id) {
                session.leave_unless_quitting(&self.client);
            }
        }
        self.client.close_if_idle();
    }

    fn detach_all(&self) {
        for id in self.client.attached() {
            if let Some(session) = self.shared.sessions.get(&id) {
                session.unsubscribe(&self.client);
            }
        }
    }

    fn reply(&self, line: Bytes) {
        // A full queue cuts the client off; there is nothing else to do about it here.
        let _ = self.client.outbox.push(line);
    }

    fn error(&self, message: &str, session: Option<&str>) {
        self.reply(DaemonEvent::error(message, session).line());
    }

    async fn handle(&mut self, frame: Frame) {
        match frame {
            Frame::Line(line) => self.handle_line(line.freeze()).await,
            Frame::TooLong { limit } => {
                let message = format!(
                    "invalid command: line longer than {} MiB was skipped",
                    limit / (1024 * 1024)
                );
                let current = self.client.current();
                self.error(&message, current.as_deref());
            }
        }
    }

    async fn handle_line(&mut self, line: Bytes) {
        match wire::route(&line) {
            Routed::Unroutable(err) => self.unroutable(line, err).await,
            Routed::BadSession => self.error("invalid command: \"session\" must be a string", None),
            Routed::Daemon(Ok(op)) => self.daemon_op(op).await,
            Routed::Daemon(Err(message)) => self.error(&message, None),
            Routed::Session {
                op: Some(op),
                session,
            } => match self.shared.host.intercept(&op, &line) {
                Intercept::Forward => self.forward(session, line).await,
                Intercept::Quit => self.quit(session).await,
                Intercept::Switch(target) => self.switch(session, target, line).await,
            },
            Routed::Session { op: None, session } => self.forward(session, line).await,
        }
    }

    /// One of the daemon's own ops.
    async fn daemon_op(&mut self, op: DaemonOp) {
        match op {
            DaemonOp::Open(open) => self.open(open).await,
            DaemonOp::Attach { session, env } => self.attach(session, env).await,
            DaemonOp::Detach { session } => self.detach(session).await,
            DaemonOp::Close { session } => self.close(session),
            DaemonOp::Sessions => self.sessions().await,
            DaemonOp::DaemonStatus => self.daemon_status(),
            DaemonOp::DaemonStop => {
                self.reply(DaemonEvent::info("daemon stopping", None).line());
                self.shared.stop_requested.cancel();
            }
        }
    }

    /// Not a JSON object: it never acts. The current session's engine reports it to
    /// this client exactly as `jucode serve` would; with no current session the daemon
    /// does.
    async fn unroutable(&mut self, line: Bytes, err: Unroutable) {
        if let Some(current) = self.client.current() {
            return self.forward(Some(current.to_string()), line).await;
        }
        let message = match err {
            Unroutable::NotAnObject => {
                "invalid command: expected a JSON object with a string \"op\" field".to_owned()
            }
            Unroutable::Invalid(err) => format!("invalid command: {err}"),
        };
        self.error(&message, None);
    }

    /// The session an op is for: the one it names, which this client must be attached
    /// to, or else the client's current session. `Err` has been reported to the client.
    fn target(&self, session: Option<String>) -> Result<Arc<Session<H::Input>>, ()> {
        let id: SessionId = match session {
            Some(id) => {
                if self.shared.sessions.get(&id).is_none() {
                    self.error(&format!("unknown session: {id}"), Some(&id));
                    return Err(());
                }
                if !self.client.is_attached(&id) {
                    self.error(&format!("not attached to session {id}"), Some(&id));
                    return Err(());
                }
                id.into()
            }
            None => match self.client.current() {
                Some(id) => id,
                None => {
                    self.error("no session: send open or attach first", None);
                    return Err(());
                }
            },
        };
        match self.shared.sessions.get(&id) {
            Some(session) => Ok(session),
            None => {
                self.error(&format!("unknown session: {id}"), Some(&id));
                Err(())
            }
        }
    }

    /// Sends `input` to a session, unless the daemon stops or this client goes away
    /// first. `false` when the session no longer takes input (it is ending).
    async fn send(&self, session: &Session<H::Input>, input: ClientInput) -> bool {
        let Some(sender) = session.input() else {
            return false;
        };
        tokio::select! {
            sent = sender.send(input.into()) => sent.is_ok(),
            () = self.shared.stopping.cancelled() => true,
            () = self.writer_done.cancelled() => true,
        }
    }

    async fn forward(&mut self, session: Option<String>, line: Bytes) {
        let Ok(session) = self.target(session) else {
            return;
        };
        let input = ClientInput::Line {
            client: self.client.id,
            line,
        };
        if !self.send(&session, input).await {
            let message = format!("session {} is closing", session.id);
            self.error(&message, Some(&session.id));
        }
    }

    async fn open(&mut self, op: OpenOp) {
        if op.cwd.as_ref().is_some_and(|cwd| !cwd.is_absolute()) {
            return self.error("invalid open: cwd must be an absolute path", None);
        }
        let (clients, watched) = watch::channel(0);
        let params = OpenParams {
            cwd: op.cwd.clone(),
            chat: op.chat,
            env: op.env,
            clients: watched,
            resume: None,
            engine: op.engine,
        };
        let hosted = match self.shared.host.open(params).await {
            Ok(hosted) => hosted,
            Err(err) => return self.error(&format!("cannot open session: {err}"), None),
        };
        // Subscribed before the fan-out starts: the opener gets every line from the
        // very first, without a snapshot.
        if let Err(message) = self.host_session(hosted, clients, None) {
            self.error(&message, None);
        }
    }

    /// Registers a session the host started and starts its fan-out, with this client
    /// attached (from its first line, or waiting for the snapshot `token`).
    fn host_session(
        &mut self,
        hosted: Hosted<H::Input, H::Output>,
        clients: watch::Sender<usize>,
        token: Option<u64>,
    ) -> Result<Arc<Session<H::Input>>, String> {
        let Hosted {
            id,
            input,
            output,
            cwd,
            chat,
            engine,
        } = hosted;
        let session = Arc::new(Session::new(id.into(), cwd, chat, engine, input, clients));
        if let Err(session) = self.shared.sessions.insert(session.clone()) {
            return Err(format!(
                "cannot open session: duplicate session id {}",
                session.id
            ));
        }
        if session.subscribe(&self.client, token).is_err() || self.shared.stopping.is_cancelled() {
            session.close_input(CloseReason::DaemonStopping);
        }
        tracing::info!(session = %session.id, client = self.client.id, "session started");
        let task = crate::fanout::run(self.shared.clone(), session.clone(), output);
        self.shared.session_tasks.spawn(task);
        Ok(session)
    }

    /// Attaches to a running session, or loads a saved one first.
    async fn attach(&mut self, id: String, env: std::collections::HashMap<String, String>) {
        let token = self.shared.next_token();
        let session = match self.shared.sessions.get(&id) {
            Some(session) => session,
            None => match self.load(&id, env, token).await {
                Ok(session) => {
                    self.send(&session, ClientInput::Snapshot { token }).await;
                    return;
                }
                Err(message) => return self.error(&message, Some(&id)),
            },
        };
        if session.subscribe(&self.client, Some(token)).is_err() {
            return self.error(&format!("unknown session: {id}"), Some(&id));
        }
        // If the session is ending the snapshot never comes; `session_closed` does.
        self.send(&session, ClientInput::Snapshot { token }).await;
    }

    /// Leaves after the session has handled this client's earlier ops (a barrier), so
    /// their answers still arrive; `detached` is the client's last line of it. A
    /// session already ending handles no more input: the client stays for its last
    /// events, and `session_closed` is its last line of it instead.
    async fn detach(&mut self, session: Option<String>) {
        let Ok(session) = self.target(session) else {
            return;
        };
        let token = self.shared.next_token();
        if !session.leave_at(&self.client, token, Leave::Detach) {
            let message = format!("not attached to session {}", session.id);
            return self.error(&message, Some(&session.id));
        }
        if !self.send(&session, ClientInput::Barrier { token }).await {
            session.cancel_leave(&self.client, token);
        }
    }

    fn close(&mut self, session: Option<String>) {
        let Some(id) = session
            .map(SessionId::from)
            .or_else(|| self.client.current())
        else {
            return self.error("no session: send open or attach first", None);
        };
        let Some(session) = self.shared.sessions.get(&id) else {
            return self.error(&format!("unknown session: {id}"), Some(&id));
        };
        session.close_input(CloseReason::Closed);
        if !self.client.is_attached(&id) {
            // Attached clients learn of the end from `session_closed`; this one would not.
            let line = DaemonEvent::info(format!("closing session {id}"), Some(&id)).line();
            self.reply(line);
        }
    }

    /// `shutdown`, `/quit`, `/exit`: see [`QuitOutcome`].
    async fn quit(&mut self, session: Option<String>) {
        let Ok(session) = self.target(session) else {
            return;
        };
        let token = self.shared.next_token();
        match session.quit(&self.client, token) {
            QuitOutcome::Detached => {
                if !self.send(&session, ClientInput::Barrier { token }).await {
                    session.cancel_leave(&self.client, token);
                }
            }
            // The connection closes (if nothing else is attached) when it has ended.
            QuitOutcome::Ending => {}
            QuitOutcome::NotAttached => {
                let message = format!("not attached to session {}", session.id);
                self.error(&message, Some(&session.id));
            }
        }
    }

    /// `/resume <target>`: this client leaves the session it sends from (once that has
    /// handled its earlier ops, without a `detached`: it continues elsewhere) and
    /// attaches to `target`, loading it if need be. A line naming the session it is
    /// sent from goes to that session, which says so.
    async fn switch(&mut self, session: Option<String>, target: String, line: Bytes) {
        let Ok(current) = self.target(session) else {
            return;
        };
        if *current.id == *target {
            return self.forward(Some(target), line).await;
        }
        let token = self.shared.next_token();
        let next = match self.shared.sessions.get(&target) {
            Some(next) => match next.subscribe(&self.client, Some(token)) {
                Ok(()) => next,
                Err(_) => {
                    return self.error(&format!("unknown session: {target}"), Some(&current.id));
                }
            },
            None => match self.load(&target, Default::default(), token).await {
                Ok(next) => next,
                Err(message) => return self.error(&message, Some(&current.id)),
            },
        };
        let leave = self.shared.next_token();
        if current.leave_at(&self.client, leave, Leave::Switch)
            && !self
                .send(&current, ClientInput::Barrier { token: leave })
                .await
        {
            current.unsubscribe(&self.client);
        }
        self.send(&next, ClientInput::Snapshot { token }).await;
    }

    /// Loads saved session `id` with this client waiting for its snapshot `token`.
    async fn load(
        &mut self,
        id: &str,
        env: std::collections::HashMap<String, String>,
        token: u64,
    ) -> Result<Arc<Session<H::Input>>, String> {
        let (clients, watched) = watch::channel(0);
        let params = OpenParams {
            cwd: None,
            chat: false,
            env,
            clients: watched,
            resume: Some(id.to_owned()),
            engine: None,
        };
        match self.shared.host.open(params).await {
            Ok(hosted) => self.host_session(hosted, clients, Some(token)),
            // Another client may have loaded it meanwhile (its lock is then taken).
            Err(message) => match self.shared.sessions.get(id) {
                Some(session) => {
                    if session.subscribe(&self.client, Some(token)).is_err() {
                        return Err(format!("unknown session: {id}"));
                    }
                    Ok(session)
                }
                None => Err(message),
            },
        }
    }

    /// Live sessions, oldest first, then saved ones that are not live, newest first.
    async fn sessions(&self) {
        let saved = match self.shared.host.saved_sessions().await {
            Ok(saved) => saved,
            // Live sessions alone would pass for the whole list: say what is wrong.
            Err(message) => return self.error(&message, None),
        };
        let mut sessions: Vec<_> = self
            .shared
            .sessions
            .all()
            .into_iter()
            .map(|s| {
                let on_disk = saved.iter().find(|saved| *saved.id == *s.id);
                SessionInfo {
                    session: s.id.to_string(),
                    cwd: s.cwd.as_ref().map(|cwd| cwd.to_string_lossy().into_owned()),
                    chat: s.chat,
                    engine: s.engine.clone(),
                    clients: s.client_count(),
                    state: s.state(),
                    created_at: s.created_at,
                    live: true,
                    label: on_disk.and_then(|saved| saved.label.clone()),
                    updated: on_disk.map_or(s.created_at, |saved| saved.updated),
                    broken: None,
                }
            })
            .collect();
        // By id: comparing each saved session with every row so far was quadratic
        // (seconds with 10,000 saved sessions).
        let live: std::collections::HashSet<String> =
            sessions.iter().map(|live| live.session.clone()).collect();
        for saved in saved {
            if live.contains(&saved.id) {
                continue;
            }
            sessions.push(SessionInfo {
                session: saved.id,
                cwd: saved
                    .cwd
                    .as_ref()
                    .map(|cwd| cwd.to_string_lossy().into_owned()),
                chat: saved.chat,
                engine: saved.engine,
                clients: 0,
                state: "saved".to_owned(),
                created_at: saved.created_at,
                live: false,
                label: saved.label,
                updated: saved.updated,
                broken: saved.broken,
            });
        }
        self.reply(DaemonEvent::Sessions { sessions }.line());
    }

    fn daemon_status(&self) {
        let status = DaemonStatus {
            pid: std::process::id(),
            version: self.shared.version.clone(),
            build: self.shared.build.clone(),
            socket: self.shared.socket.to_string_lossy().into_owned(),
            sessions: self.shared.sessions.len(),
            clients: self.shared.clients.load(Ordering::Relaxed),
            uptime_ms: self.shared.started.elapsed().as_millis() as u64,
            socket_activated: self.shared.socket_activated,
        };
        self.reply(DaemonEvent::DaemonStatus(status).line());
    }
}
