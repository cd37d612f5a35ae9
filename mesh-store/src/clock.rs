//! The mesh's one clock and its one date format, for every binary: [`now`] reads the system
//! clock as seconds since the Unix epoch, and [`rfc3339`] writes such a time as people read it
//! and as RFC 3339 has it, in UTC (`2026-11-29T15:30:00Z`).
//!
//! Only the edges read the clock: a binary, and the loops of the host's daemon and agent. A
//! library call takes `now` as an argument, so a test injects time by passing the moment it
//! wants; mesh-model and mesh-plan never read a clock. Every time the mesh keeps (a report, a
//! record, a window) is seconds since the epoch, and every time it prints goes through
//! [`rfc3339`], so two outputs never disagree on how a moment is written.
//!
//! It depends on nothing and is used by no other module of this crate.

/// Seconds since the Unix epoch, read from the system clock; 0 for a clock set before 1970.
///
/// For binaries and daemons' loops only: a library takes `now` as an argument.
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Seconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ`: RFC 3339 in UTC, as every output of the
/// mesh writes a time.
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn a_time_is_written_in_utc_as_rfc_3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_795_966_200), "2026-11-29T15:30:00Z");
        // A leap day, and the last second of a leap year.
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_735_689_599), "2024-12-31T23:59:59Z");
    }

    #[test]
    fn the_clock_reads_after_the_epoch() {
        assert!(super::now() > 1_700_000_000);
    }
}
