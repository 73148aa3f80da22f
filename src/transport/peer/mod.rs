//! What `jucode acp` and the WebSocket server share: a JSON-RPC peer driving
//! serve-protocol sessions. Each of its sessions is a [`PeerSession`] (the link, the
//! translator, the open being answered, the requests waiting for the session to catch
//! up, the open permission requests), the requests the peer sends its client are an
//! [`Outgoing`] table, and [`core::Core`] runs everything the two dialects do alike:
//! opening, listing, prompts' attachments, permission requests and their answers,
//! barriers, close, and what a session's end answers. Only framing and what truly
//! differs between the dialects ([`core::Dialect`]) stays in `acp/` and `websocket/`.

pub mod core;

use std::collections::{HashMap, VecDeque};

use serde_json::Value;

use tokio::sync::mpsc;

use self::core::Dialect;
use super::jsonrpc::RpcId;
use super::link::{Backend, Link, LinkEvent, Target};
use super::translate::updates::PermissionAsk;
use super::translate::{self, Translator};
use crate::protocol::Op;

/// The `sync` token of every barrier: they are answered in order, so one serves all.
const BARRIER_TOKEN: &str = "barrier";

/// The open (new, attach, load ...) a session answers once its first events are in.
pub struct Pending<O> {
    pub id: RpcId,
    pub open: O,
}

/// One session of a peer of dialect `D`.
pub struct PeerSession<D: Dialect> {
    pub link: Link,
    pub tr: Translator,
    /// What the dialect answers once the session has handled the ops sent before it
    /// (an open, a mode change ...).
    barriers: VecDeque<D::Barrier>,
    /// Open permission requests: call id → the request's id.
    pub permissions: HashMap<String, i64>,
    /// Permission requests held back until the open is answered.
    pub held_asks: Vec<(String, PermissionAsk)>,
    /// A `session/close` waiting for the session to end.
    pub closing: Option<RpcId>,
    /// The open not answered yet; until it is, the session takes no other request.
    pub pending: Option<Pending<D::Open>>,
    /// What the dialect keeps besides.
    pub x: D::Extra,
}

impl<D: Dialect> PeerSession<D> {
    pub fn new(link: Link, pending: Pending<D::Open>) -> Self {
        let mut tr = Translator::new(D::WORDING);
        tr.replay_next_transcript = D::replays(&pending.open);
        Self {
            link,
            tr,
            barriers: VecDeque::new(),
            permissions: HashMap::new(),
            held_asks: Vec::new(),
            closing: None,
            pending: Some(pending),
            x: D::Extra::default(),
        }
    }

    /// Answers `barrier` once the session has handled every op sent so far (a `sync`,
    /// whose `synced` comes back to this link only, after everything those ops caused).
    /// `with_models` first asks for the model list (`list_models`), which an open's
    /// answer carries as config options.
    pub async fn barrier(&mut self, barrier: D::Barrier, with_models: bool) {
        if with_models {
            self.link.send(Op::ListModels).await;
        }
        self.barriers.push_back(barrier);
        self.link
            .send(Op::Sync {
                token: BARRIER_TOKEN.to_owned(),
            })
            .await;
    }

    /// The barrier a `synced` with `token` answers, if it is one of ours.
    pub fn passed(&mut self, token: &str) -> Option<D::Barrier> {
        (token == BARRIER_TOKEN)
            .then(|| self.barriers.pop_front())
            .flatten()
    }

    /// Every barrier still waiting (the session ended before answering them).
    pub fn take_barriers(&mut self) -> Vec<D::Barrier> {
        self.barriers.drain(..).collect()
    }

    /// The client answered the permission request of `call_id` (`outcome`: its result,
    /// `None` when it answered with an error): the session gets the approval it means.
    /// `cancelling`: the client cancelled the turn, so an unanswered request denies
    /// nothing (the interrupt closes it).
    pub async fn permission_answered(
        &mut self,
        call_id: &str,
        outcome: Option<&Value>,
        cancelling: bool,
    ) {
        self.permissions.remove(call_id);
        if let Some(op) = translate::permission_answer(call_id, outcome, cancelling) {
            self.link.send(op).await;
        }
    }
}

/// The requests a peer sent its client, by id, with what each is for; a withdrawn
/// request's late answer is dropped.
pub struct Outgoing<T> {
    next: i64,
    open: HashMap<i64, Option<T>>,
}

impl<T> Default for Outgoing<T> {
    fn default() -> Self {
        Self {
            next: 0,
            open: HashMap::new(),
        }
    }
}

impl<T> Outgoing<T> {
    /// A new request's id, for `what`.
    pub fn ask(&mut self, what: T) -> i64 {
        let id = self.next;
        self.next += 1;
        self.open.insert(id, Some(what));
        id
    }

    /// Request `id` is no longer asked (`$/cancel_request` went out): its answer, if one
    /// still comes, is nothing.
    pub fn withdraw(&mut self, id: i64) {
        self.open.insert(id, None);
    }

    /// What the answered request `id` was for; `None` for a withdrawn one or an id we
    /// never sent.
    pub fn answered(&mut self, id: &RpcId) -> Option<T> {
        id.as_i64().and_then(|id| self.open.remove(&id)).flatten()
    }
}

/// Sessions being opened (a new one, an attach, a load), by the tag their link reports
/// when it comes up, with what waits for each.
pub struct Openings<T> {
    next: u64,
    open: HashMap<u64, T>,
}

impl<T> Default for Openings<T> {
    fn default() -> Self {
        Self {
            next: 0,
            open: HashMap::new(),
        }
    }
}

impl<T> Openings<T> {
    /// Connects `target` through `backend` in a task of its own; its link reports on
    /// `events` under the tag, and a failure goes to `failures` as `failed(tag, why)`.
    pub fn start<I: Send + 'static>(
        &mut self,
        what: T,
        backend: &Backend,
        target: Target,
        events: mpsc::Sender<LinkEvent>,
        failures: mpsc::Sender<I>,
        failed: fn(u64, String) -> I,
    ) {
        let tag = self.next;
        self.next += 1;
        self.open.insert(tag, what);
        let backend = backend.clone();
        tokio::spawn(async move {
            if let Err(error) = backend.connect(target, events, tag).await {
                let _ = failures.send(failed(tag, error)).await;
            }
        });
    }

    /// What waited for the session of `tag` (it came up, or failed to).
    pub fn take(&mut self, tag: u64) -> Option<T> {
        self.open.remove(&tag)
    }
}
