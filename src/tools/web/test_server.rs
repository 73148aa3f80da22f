//! A loopback HTTP server for the web tools' tests, on the test's own runtime.
//!
//! Routes are one function from the request (path and query, headers) to an
//! [`Answer`]. Every request is recorded before it is answered, and
//! [`TestServer::requested`] waits for the n-th one, so a test synchronises on what the
//! server saw, never on time.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::HeaderMap;
use hyper::{Request, Response};
use tokio::sync::Notify;

type Body = BoxBody<Bytes, Infallible>;

/// How the server answers one request.
pub(super) enum Answer {
    /// A complete answer.
    Full {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: Vec<u8>,
    },
    /// Headers and the first bytes of the body, then nothing, ever.
    Stall {
        content_type: &'static str,
        first: Vec<u8>,
    },
}

impl Answer {
    pub fn ok(content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        Self::Full {
            status: 200,
            headers: vec![("content-type", content_type.to_owned())],
            body: body.into(),
        }
    }

    pub fn redirect(location: impl Into<String>) -> Self {
        Self::Full {
            status: 302,
            headers: vec![("location", location.into())],
            body: Vec::new(),
        }
    }

    pub fn status(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Self {
        Self::Full {
            status,
            headers: vec![("content-type", content_type.to_owned())],
            body: body.into(),
        }
    }
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub target: String,
    pub headers: HeaderMap,
}

type Route = dyn Fn(&str, &HeaderMap) -> Answer + Send + Sync;

#[derive(Default)]
struct Log {
    seen: Mutex<Vec<Seen>>,
    changed: Notify,
}

pub(super) struct TestServer {
    pub addr: SocketAddr,
    log: Arc<Log>,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    /// Serves `route` on 127.0.0.1 until dropped.
    pub async fn start(route: impl Fn(&str, &HeaderMap) -> Answer + Send + Sync + 'static) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let log = Arc::new(Log::default());
        let route: Arc<Route> = Arc::new(route);
        let task = tokio::spawn(serve(listener, route, log.clone()));
        Self { addr, log, task }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Waits until the server has seen `n` requests, and returns them.
    pub async fn requested(&self, n: usize) -> Vec<Seen> {
        loop {
            let changed = self.log.changed.notified();
            {
                let seen = self.log.seen.lock().expect("log lock");
                if seen.len() >= n {
                    return seen.clone();
                }
            }
            changed.await;
        }
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.log.seen.lock().expect("log lock").clone()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(listener: tokio::net::TcpListener, route: Arc<Route>, log: Arc<Log>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let route = route.clone();
        let log = log.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let route = route.clone();
                let log = log.clone();
                async move { Ok::<_, Infallible>(answer(&req, &*route, &log)) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

fn answer(req: &Request<Incoming>, route: &Route, log: &Log) -> Response<Body> {
    let target = req
        .uri()
        .path_and_query()
        .map(|target| target.as_str().to_owned())
        .unwrap_or_default();
    let answer = route(&target, req.headers());
    log.seen.lock().expect("log lock").push(Seen {
        target,
        headers: req.headers().clone(),
    });
    log.changed.notify_waiters();
    match answer {
        Answer::Full {
            status,
            headers,
            body,
        } => {
            let mut response = Response::builder().status(status);
            for (name, value) in headers {
                response = response.header(name, value);
            }
            response
                .body(Full::new(Bytes::from(body)).boxed())
                .expect("response")
        }
        Answer::Stall {
            content_type,
            first,
        } => {
            let frames = futures_util::stream::iter([Ok(Frame::data(Bytes::from(first)))])
                .chain(futures_util::stream::pending());
            Response::builder()
                .header("content-type", content_type)
                .body(BodyExt::boxed(StreamBody::new(frames)))
                .expect("response")
        }
    }
}
