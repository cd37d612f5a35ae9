//! Waiting on a condition, never on time, and a free loopback port.

use std::time::{Duration, Instant};

/// A port free on 127.0.0.1 when asked (the kernel's pick; a test binds it soon after).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind a loopback port")
        .local_addr()
        .expect("a bound socket has an address")
        .port()
}

/// Waits until `check` answers `Ok`, looking again every 100 ms; `Err` says what it saw, for
/// the failure after `limit`, which only bounds a failure (nothing is asserted on time).
pub fn wait_for<T>(what: &str, limit: Duration, check: impl FnMut() -> Result<T, String>) -> T {
    try_wait_for(limit, Duration::from_millis(100), check)
        .unwrap_or_else(|seen| panic!("never within {limit:?}: {what}: {seen}"))
}

/// As [`wait_for`], looking every `every`, but a condition not met within `limit` is an `Err`
/// with what `check` last said, for a caller that reports it rather than panics (the soak).
///
/// # Errors
/// What `check` last said, once `limit` has passed.
pub fn try_wait_for<T>(
    limit: Duration,
    every: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + limit;
    loop {
        match check() {
            Ok(found) => return Ok(found),
            Err(seen) if Instant::now() >= deadline => return Err(seen),
            // Only paces the looks at the condition: the test waits on `check`, not on time.
            Err(_) => std::thread::sleep(every),
        }
    }
}
