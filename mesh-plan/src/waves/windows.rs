//! Deploy windows: whether a wave may start at `now`, and if not, when it next may.
//!
//! A wave may start at an instant that is inside some allow window (any time, when there is
//! none) and inside no deny window. Allow windows add up: two that overlap, or one that opens
//! as another closes, never block each other (argo-cd#10425). Only the *start* of a wave is
//! judged: a wave under way when its window closes finishes.
//!
//! Days and times are read in each window's own zone, with its daylight saving, by `jiff`: a
//! window from 01:00 to 04:00 in Europe/Berlin lasts two hours on the last Sunday of March and
//! four on the last Sunday of October; a time that does not exist that day (02:30 as the clocks
//! go forward) is the instant the clocks reach it, and one that happens twice is the first.
//!
//! mesh-plan reads no clock and no file: `now` is an argument (seconds since the epoch, the
//! controller's clock) and zones come from the caller ([`zone_windows`] takes a function from a
//! zone's name to its [`TimeZone`]; the controller passes `jiff::tz::db().get`).

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::Timestamp;
use mesh_model::waves::{Effect, Window, WindowTime};
use serde::{Deserialize, Serialize};

/// How far ahead a next start is looked for past the last one-off deny window, in days: more
/// than a week, so every weekly allow window opens in it.
const LOOK_AHEAD_DAYS: i64 = 8;
/// The furthest a next start is looked for, in days.
const LOOK_AHEAD_LIMIT_DAYS: i64 = 800;

/// Windows with their zones found: what [`ZonedWindows::may_start`] judges.
#[derive(Debug, Clone, Default)]
pub struct ZonedWindows {
    windows: Vec<(Window, TimeZone)>,
}

/// A window whose zone is not known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("window `{window}`: no time zone `{zone}`: {reason}")]
pub struct UnknownZone {
    /// The window, as written back.
    pub window: String,
    /// The zone's name.
    pub zone: String,
    /// Why it was not found.
    pub reason: String,
}

/// Whether a wave may start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "start", rename_all = "kebab-case")]
pub enum StartVerdict {
    /// It may start now.
    Now,
    /// Not now: it may start at `at` (seconds since the epoch).
    At {
        /// The next instant a wave may start.
        at: u64,
        /// What holds it now: the deny window it is in, or that it is outside every allow
        /// window.
        held_by: String,
    },
    /// No start is allowed within the look-ahead (more than two years).
    Never {
        /// What holds it.
        held_by: String,
    },
}

/// Finds the zone of each window (`UTC` for a window that names none) with `zone`.
///
/// # Errors
/// Every window whose zone `zone` does not find.
pub fn zone_windows(
    windows: &[Window],
    zone: impl Fn(&str) -> Result<TimeZone, String>,
) -> Result<ZonedWindows, Vec<UnknownZone>> {
    let mut found = Vec::new();
    let mut unknown = Vec::new();
    for window in windows {
        match window.zone.as_deref().map(&zone) {
            None => found.push((window.clone(), TimeZone::UTC)),
            Some(Ok(tz)) => found.push((window.clone(), tz)),
            Some(Err(reason)) => unknown.push(UnknownZone {
                window: window.to_string(),
                zone: window.zone.clone().unwrap_or_default(),
                reason,
            }),
        }
    }
    if unknown.is_empty() {
        Ok(ZonedWindows { windows: found })
    } else {
        Err(unknown)
    }
}

/// An instant from seconds since the epoch, clamped to what jiff holds.
fn instant(seconds: u64) -> Timestamp {
    let seconds = i64::try_from(seconds).unwrap_or(i64::MAX);
    Timestamp::from_second(seconds).unwrap_or(Timestamp::MAX)
}

fn seconds(instant: Timestamp) -> u64 {
    u64::try_from(instant.as_second()).unwrap_or(0)
}

/// `date` at `minutes` after midnight (1440: the next midnight) in `tz`.
fn at_minutes(tz: &TimeZone, date: Date, minutes: u16) -> Option<Timestamp> {
    let (date, minutes) = if minutes >= 1440 {
        (date.tomorrow().ok()?, minutes - 1440)
    } else {
        (date, minutes)
    };
    let hour = i8::try_from(minutes / 60).ok()?;
    let minute = i8::try_from(minutes % 60).ok()?;
    tz.to_timestamp(date.at(hour, minute, 0, 0)).ok()
}

/// The intervals `[start, end)` of a window that begin on the days `first..=last` in its zone
/// (a one-off window: its one interval, whatever the days).
fn occurrences(window: &Window, tz: &TimeZone, first: Date, last: Date) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    match &window.when {
        WindowTime::Weekly { days, from, to } => {
            let mut date = first;
            while date <= last {
                let weekday = date.weekday().to_monday_zero_offset() as usize;
                if days[weekday] {
                    let end_minutes = if to > from { *to } else { to + 1440 };
                    if let (Some(start), Some(end)) = (
                        at_minutes(tz, date, *from),
                        at_minutes(tz, date, end_minutes),
                    ) {
                        out.push((seconds(start), seconds(end)));
                    }
                }
                match date.tomorrow() {
                    Ok(next) => date = next,
                    Err(_) => break,
                }
            }
        }
        WindowTime::Once {
            date: (year, month, day),
            at,
            secs,
        } => {
            let date = Date::new(*year, *month as i8, *day as i8);
            if let Some(start) = date.ok().and_then(|date| at_minutes(tz, date, *at)) {
                let start = seconds(start);
                out.push((start, start.saturating_add(*secs)));
            }
        }
    }
    out
}

impl ZonedWindows {
    /// Whether there are no windows (a wave may always start).
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// The intervals of each window that hold instants from `from` to `to` (seconds).
    fn intervals(&self, from: u64, to: u64) -> Vec<(&Window, (u64, u64))> {
        let mut out = Vec::new();
        for (window, tz) in &self.windows {
            let day = |at: u64| tz.to_datetime(instant(at)).date();
            // A window that spans midnight began the day before.
            let first = day(from).yesterday().unwrap_or(day(from));
            for interval in occurrences(window, tz, first, day(to)) {
                if interval.1 > from && interval.0 <= to {
                    out.push((window, interval));
                }
            }
        }
        out
    }

    /// What holds a wave at `at`, if anything, among `intervals`.
    fn held_by(intervals: &[(&Window, (u64, u64))], any_allow: bool, at: u64) -> Option<String> {
        let inside = |(start, end): (u64, u64)| start <= at && at < end;
        if let Some((window, _)) = intervals
            .iter()
            .find(|(w, i)| w.effect == Effect::Deny && inside(*i))
        {
            return Some(format!("inside the window {window}"));
        }
        let allowed = !any_allow
            || intervals
                .iter()
                .any(|(w, i)| w.effect == Effect::Allow && inside(*i));
        (!allowed).then(|| "outside every allow window".to_owned())
    }

    /// Whether a wave may start at `now` (seconds since the epoch), and if not, the next instant
    /// it may.
    pub fn may_start(&self, now: u64) -> StartVerdict {
        let any_allow = self.windows.iter().any(|(w, _)| w.effect == Effect::Allow);
        let day = 86_400u64;
        let last_deny = self
            .windows
            .iter()
            .filter(|(w, _)| w.effect == Effect::Deny)
            .flat_map(|(w, tz)| match w.when {
                WindowTime::Once { .. } => {
                    let today = tz.to_datetime(instant(now)).date();
                    occurrences(w, tz, today, today)
                }
                WindowTime::Weekly { .. } => Vec::new(),
            })
            .map(|(_, end)| end)
            .max()
            .unwrap_or(now)
            .max(now);
        let horizon = last_deny
            .saturating_add(LOOK_AHEAD_DAYS as u64 * day)
            .min(now.saturating_add(LOOK_AHEAD_LIMIT_DAYS as u64 * day));
        let intervals = self.intervals(now, horizon);
        let Some(held_by) = Self::held_by(&intervals, any_allow, now) else {
            return StartVerdict::Now;
        };
        // The allowed instants begin where an allow window opens or a deny window closes.
        let mut candidates: Vec<u64> = intervals
            .iter()
            .map(|(w, (start, end))| match w.effect {
                Effect::Allow => *start,
                Effect::Deny => *end,
            })
            .filter(|at| *at > now && *at <= horizon)
            .collect();
        candidates.sort_unstable();
        candidates.dedup();
        for at in candidates {
            if Self::held_by(&intervals, any_allow, at).is_none() {
                return StartVerdict::At { at, held_by };
            }
        }
        StartVerdict::Never { held_by }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(text: &str) -> ZonedWindows {
        #[derive(serde::Deserialize)]
        struct File {
            windows: Vec<Window>,
        }
        let file: File = toml::from_str(text).unwrap();
        let db = jiff::tz::TimeZoneDatabase::bundled();
        zone_windows(&file.windows, |name| {
            db.get(name).map_err(|e| e.to_string())
        })
        .unwrap()
    }

    /// Seconds since the epoch of an RFC 3339 instant.
    fn at(text: &str) -> u64 {
        seconds(text.parse::<Timestamp>().unwrap())
    }

    fn shown(verdict: StartVerdict) -> String {
        match verdict {
            StartVerdict::Now => "now".into(),
            StartVerdict::At { at, held_by } => format!("{} ({held_by})", instant(at)),
            StartVerdict::Never { held_by } => format!("never ({held_by})"),
        }
    }

    const OFFICE_HOURS: &str =
        r#"windows = [{ allow = "Mon-Fri 09:00-16:00", zone = "Europe/Berlin" }]"#;

    #[test]
    fn a_wave_outside_its_allowed_hours_waits_for_the_next_opening() {
        let office = windows(OFFICE_HOURS);
        // Tuesday 2026-06-09 10:00 in Berlin is 08:00 UTC (summer time).
        assert_eq!(shown(office.may_start(at("2026-06-09T08:00:00Z"))), "now");
        // 16:00 closes it: half open.
        assert_eq!(
            shown(office.may_start(at("2026-06-09T14:00:00Z"))),
            "2026-06-10T07:00:00Z (outside every allow window)"
        );
        // Friday evening waits for Monday morning.
        assert_eq!(
            shown(office.may_start(at("2026-06-12T17:00:00Z"))),
            "2026-06-15T07:00:00Z (outside every allow window)"
        );
        assert_eq!(shown(ZonedWindows::default().may_start(0)), "now");
    }

    #[test]
    fn the_next_start_across_the_spring_daylight_saving_change_is_in_summer_time() {
        let office = windows(OFFICE_HOURS);
        // Friday 2026-03-27 17:00 CET (16:00 UTC); Berlin goes to summer time on Sunday the
        // 29th: Monday 09:00 is 07:00 UTC, not 08:00.
        assert_eq!(
            shown(office.may_start(at("2026-03-27T16:00:00Z"))),
            "2026-03-30T07:00:00Z (outside every allow window)"
        );
    }

    #[test]
    fn a_window_across_a_daylight_saving_change_lasts_the_hours_the_clocks_show() {
        let night = windows(r#"windows = [{ allow = "Sun 01:00-04:00", zone = "Europe/Berlin" }]"#);
        // 2026-03-29: 01:00 CET is 00:00 UTC; 04:00 CEST is 02:00 UTC — two hours.
        assert_eq!(shown(night.may_start(at("2026-03-29T00:00:00Z"))), "now");
        assert_eq!(shown(night.may_start(at("2026-03-29T01:59:59Z"))), "now");
        assert_eq!(
            shown(night.may_start(at("2026-03-29T02:00:00Z"))),
            "2026-04-04T23:00:00Z (outside every allow window)"
        );
        // 2026-10-25: 01:00 CEST is 23:00 UTC the day before; 04:00 CET is 03:00 UTC — four.
        assert_eq!(
            shown(night.may_start(at("2026-10-24T22:59:59Z"))),
            "2026-10-24T23:00:00Z (outside every allow window)"
        );
        assert_eq!(shown(night.may_start(at("2026-10-25T02:59:59Z"))), "now");
        assert_eq!(
            shown(night.may_start(at("2026-10-25T03:00:00Z"))),
            // The next Sunday is in winter time: 01:00 CET is 00:00 UTC.
            "2026-11-01T00:00:00Z (outside every allow window)"
        );
        // A window opening in the hour the clocks skip opens as they reach it.
        let skipped =
            windows(r#"windows = [{ allow = "Sun 02:30-05:00", zone = "Europe/Berlin" }]"#);
        assert_eq!(
            shown(skipped.may_start(at("2026-03-28T12:00:00Z"))),
            "2026-03-29T01:30:00Z (outside every allow window)"
        );
    }

    #[test]
    fn two_allow_windows_that_overlap_do_not_block_each_other() {
        // argo-cd#10425: with several allow windows, being outside one held the sync.
        let two = windows(
            r#"windows = [
                { allow = "Mon-Fri 09:00-12:00", zone = "Europe/Berlin" },
                { allow = "Mon-Fri 11:00-16:00", zone = "Europe/Berlin" },
                { allow = "Sat 10:00-11:00" },
            ]"#,
        );
        // Tuesday 2026-06-09, Berlin summer time (UTC+2).
        for (utc, expected) in [
            ("2026-06-09T07:30:00Z", "now"), // 09:30: the first only
            ("2026-06-09T09:30:00Z", "now"), // 11:30: both
            ("2026-06-09T10:30:00Z", "now"), // 12:30: the second only
            (
                "2026-06-09T14:30:00Z", // 16:30: neither
                "2026-06-10T07:00:00Z (outside every allow window)",
            ),
            (
                "2026-06-12T15:00:00Z", // Friday evening: Saturday's window, in UTC
                "2026-06-13T10:00:00Z (outside every allow window)",
            ),
        ] {
            assert_eq!(shown(two.may_start(at(utc))), expected, "{utc}");
        }
    }

    #[test]
    fn a_deny_range_holds_every_allow_window_until_it_ends() {
        let christmas = windows(
            r#"windows = [
                { allow = "Mon-Fri 09:00-16:00", zone = "Europe/Berlin" },
                { deny = "2026-12-24 00:00/72h", zone = "Europe/Berlin" },
                { deny = "Fri 12:00-24:00", zone = "Europe/Berlin" },
            ]"#,
        );
        // Thursday 24 December 10:00 CET: denied until Sunday 27th 00:00, then the next
        // allowed start is Monday the 28th 09:00 CET (08:00 UTC).
        assert_eq!(
            shown(christmas.may_start(at("2026-12-24T09:00:00Z"))),
            "2026-12-28T08:00:00Z (inside the window deny 2026-12-24 00:00/3d (Europe/Berlin))"
        );
        // Never on Friday afternoons: Friday 2026-06-12 13:00 in Berlin waits for Monday.
        assert_eq!(
            shown(christmas.may_start(at("2026-06-12T11:00:00Z"))),
            "2026-06-15T07:00:00Z (inside the window deny Fri 12:00-24:00 (Europe/Berlin))"
        );
        // A deny window alone: any time outside it.
        let deny = windows(r#"windows = [{ deny = "Sat,Sun" }]"#);
        assert_eq!(
            shown(deny.may_start(at("2026-06-13T12:00:00Z"))),
            "2026-06-15T00:00:00Z (inside the window deny Sat,Sun (UTC))"
        );
    }

    #[test]
    fn a_window_across_midnight_holds_the_early_hours_of_the_next_day() {
        let nights = windows(r#"windows = [{ allow = "Fri 22:00-02:00" }]"#);
        assert_eq!(shown(nights.may_start(at("2026-06-13T01:00:00Z"))), "now");
        assert_eq!(
            shown(nights.may_start(at("2026-06-13T02:00:00Z"))),
            "2026-06-19T22:00:00Z (outside every allow window)"
        );
    }

    #[test]
    fn an_unknown_zone_is_refused_naming_the_window() {
        let window: Window = serde_json::from_value(
            serde_json::json!({ "allow": "Mon 09:00-10:00", "zone": "Europe/Berln" }),
        )
        .unwrap();
        let db = jiff::tz::TimeZoneDatabase::bundled();
        let error =
            zone_windows(&[window], |name| db.get(name).map_err(|e| e.to_string())).unwrap_err();
        assert_eq!(error[0].window, "allow Mon 09:00-10:00 (Europe/Berln)");
        assert!(error[0].to_string().starts_with(
            "window `allow Mon 09:00-10:00 (Europe/Berln)`: no time zone `Europe/Berln`"
        ));
    }
}
