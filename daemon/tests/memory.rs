//! What an idle session costs the daemon, measured with a counting allocator.
#![cfg(unix)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use common::TestDaemon;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator, only counting.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Includes the fake host's own channels and task, so the daemon's share is smaller.
#[tokio::test]
async fn an_idle_session_costs_well_under_100_kib() {
    const SESSIONS: isize = 200;
    let daemon = TestDaemon::start().await;
    let mut client = daemon.client().await;
    client.expect_hello().await;
    // Warm up (first session, lazily grown maps and buffers).
    client.open().await;
    let before = LIVE.load(Ordering::Relaxed);
    for _ in 0..SESSIONS {
        client.open().await;
    }
    let per_session = (LIVE.load(Ordering::Relaxed) - before) / SESSIONS;
    assert!(
        per_session < 16 * 1024,
        "{per_session} bytes per idle session"
    );
    // A client that does not read would hold the stop until its grace period ends.
    drop(client);
    daemon.stop().await.unwrap();
}
