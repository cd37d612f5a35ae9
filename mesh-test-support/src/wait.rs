//! Waiting on a condition, never on time, and a free loopback port.

use std::time::{Duration, Instant};

/// A port free on 127.0.0.1 when asked, for a server a test starts soon after: chosen below the
/// kernel's ephemeral range, so no outgoing connection of this or another process is given it
/// meanwhile as its local port (a port the kernel picks with `bind(0)` is in that range, and was
/// seen taken back that way by the test's own connection to a nats-server before the container
/// it was for could listen). Processes start at places of their own in the range, and each pick
/// is bound once to see that it is free.
///
/// # Panics
/// When no port below the ephemeral range is free.
pub fn free_port() -> u16 {
    try_free_port().expect("a free loopback port below the kernel's ephemeral range")
}

/// As [`free_port`], an error when none is free.
///
/// # Errors
/// Every port from 10,000 up to the kernel's ephemeral range is taken.
pub fn try_free_port() -> std::io::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const FIRST: u32 = 10_000;
    // Linux's ephemeral range starts at 32,768 unless configured lower.
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768)
        .clamp(FIRST + 1_000, 65_535);
    let span = ephemeral - FIRST;
    let start = std::process::id().wrapping_mul(2_654_435_761)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
    for _ in 0..span {
        let step = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST + start.wrapping_add(step.wrapping_mul(7_919)) % span;
        let port = u16::try_from(port).expect("below 65,536");
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no free loopback port from {FIRST} to {ephemeral}"),
    ))
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
