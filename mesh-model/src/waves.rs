//! How a change reaches the fleet, as data: the `[rollout]` table of the inventory (the fleet's
//! default) and of a module's `module.toml` (its own, over the fleet's key by key).
//!
//! ```toml
//! [rollout]
//! budget = { failed = "2%", min = 20 }  # stop once over 2 % of a wave's answers are failures
//! max-parallel = 500                   # sends under way at once
//! windows = [
//!   { allow = "Mon-Fri 09:00-16:00", zone = "Europe/Berlin" },
//!   { deny = "2026-12-24 00:00/72h", zone = "Europe/Berlin" },
//! ]
//! [[rollout.waves]]
//! select = "role=canary"               # a wave by selector ...
//! pause = "approve"                    # ... then wait for a person's approval
//! [[rollout.waves]]
//! size = "10%"                         # ... or by size, of the nodes not yet in a wave
//! pause = "15m"
//! [[rollout.waves]]
//! size = "100%"
//! ```
//!
//! Start at [`RolloutPolicy`]. Only the text is read here; which node falls in which wave, the
//! budget's arithmetic and the windows' calendar (zones, daylight saving) are mesh-plan's.

use crate::selector::Selector;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A `[rollout]` table. Every key is optional: a module's table overrides the inventory's key
/// by key ([`RolloutPolicy::over`]), and a key set nowhere keeps today's behaviour.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RolloutPolicy {
    /// When the failures of a wave stop the rollout (unset: the first failure does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// How many sends are under way at once (unset: the module's `max-parallel`, else all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_parallel: Option<u32>,
    /// The waves, in order (unset: one machine first, then the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waves: Option<Vec<WaveDefinition>>,
    /// The hours a wave may start in (unset: any time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows: Option<Vec<Window>>,
}

impl RolloutPolicy {
    /// The policy a module rolls out by: each key of its own table (`module`), else the
    /// fleet's (`fleet`); `None` when neither has a `[rollout]`.
    pub fn over(
        module: Option<&RolloutPolicy>,
        fleet: Option<&RolloutPolicy>,
    ) -> Option<RolloutPolicy> {
        match (module, fleet) {
            (None, None) => None,
            (Some(one), None) | (None, Some(one)) => Some(one.clone()),
            (Some(module), Some(fleet)) => Some(RolloutPolicy {
                budget: module.budget.clone().or_else(|| fleet.budget.clone()),
                max_parallel: module.max_parallel.or(fleet.max_parallel),
                waves: module.waves.clone().or_else(|| fleet.waves.clone()),
                windows: module.windows.clone().or_else(|| fleet.windows.clone()),
            }),
        }
    }
}

/// The failure budget: a wave's rollout stops when the failed share of its answered nodes
/// exceeds `failed`, once at least `min` have answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Budget {
    /// The share of answers that may be failures.
    pub failed: Share,
    /// How many nodes must have answered before the budget is judged (default 1).
    #[serde(default = "one")]
    pub min: u32,
}

fn one() -> u32 {
    1
}

/// A share written as a percentage (`"2%"`, `"0.5%"`), kept in hundredths of a percent
/// (basis points), 0 to 10,000.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Share {
    /// Hundredths of a percent: `"2%"` is 200, `"100%"` 10,000.
    pub basis_points: u32,
}

impl Share {
    /// Reads `"N%"` with at most two decimals, at most 100 %.
    pub fn parse(text: &str) -> Result<Share, String> {
        let bad =
            || format!("`{text}` is not a share: write a percentage, e.g. \"10%\" or \"0.5%\"");
        let number = text.trim().strip_suffix('%').ok_or_else(bad)?.trim();
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(fraction) || fraction.len() > 2 {
            return Err(bad());
        }
        if number.ends_with('.') {
            return Err(bad());
        }
        let whole: u32 = whole.parse().map_err(|_| bad())?;
        let fraction: u32 = format!("{fraction:0<2}").parse().map_err(|_| bad())?;
        let basis_points = whole.checked_mul(100).ok_or_else(bad)? + fraction;
        if basis_points > 10_000 {
            return Err(format!("`{text}` is over 100%"));
        }
        Ok(Share { basis_points })
    }
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, fraction) = (self.basis_points / 100, self.basis_points % 100);
        match fraction {
            0 => write!(f, "{whole}%"),
            n if n % 10 == 0 => write!(f, "{whole}.{}%", n / 10),
            n => write!(f, "{whole}.{n:02}%"),
        }
    }
}

impl Serialize for Share {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Share {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Share::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// How many nodes a wave by size takes, of the nodes not yet in a wave.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaveSize {
    /// A share of them (`"10%"`), rounded to the nearest node, a half up.
    Share(Share),
    /// A number of them (`5`), or all that are left when fewer.
    Count(u32),
}

impl fmt::Display for WaveSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaveSize::Share(share) => write!(f, "{share}"),
            WaveSize::Count(count) => write!(f, "{count}"),
        }
    }
}

impl Serialize for WaveSize {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            WaveSize::Share(share) => share.serialize(serializer),
            WaveSize::Count(count) => serializer.serialize_u32(*count),
        }
    }
}

impl<'de> Deserialize<'de> for WaveSize {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = WaveSize;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a share of the nodes left (\"10%\") or a number of nodes (5)")
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<WaveSize, E> {
                u32::try_from(n)
                    .map(WaveSize::Count)
                    .map_err(|_| E::custom(format!("`size` {n} is too large")))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<WaveSize, E> {
                u64::try_from(n)
                    .map_err(|_| E::custom(format!("`size` {n} is negative")))
                    .and_then(|n| self.visit_u64(n))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<WaveSize, E> {
                if let Ok(count) = text.trim().parse::<u32>() {
                    return Ok(WaveSize::Count(count));
                }
                Share::parse(text)
                    .map(WaveSize::Share)
                    .map_err(|why| E::custom(format!("`size`: {why}")))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// What a rollout does once a wave is done, before the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pause {
    /// Wait for a person's approval (`"approve"`).
    Approve,
    /// Wait this many seconds (`"15m"`, `"1h30m"`).
    For {
        /// Seconds.
        secs: u64,
    },
}

impl fmt::Display for Pause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pause::Approve => f.write_str("approve"),
            Pause::For { secs } => f.write_str(&format_duration(*secs)),
        }
    }
}

impl Serialize for Pause {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Pause {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text.trim() == "approve" {
            return Ok(Pause::Approve);
        }
        parse_duration_secs(&text)
            .map(|secs| Pause::For { secs })
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "`pause` is \"approve\" or a duration such as \"15m\", not `{text}`"
                ))
            })
    }
}

/// Reads a duration of whole units, `d`, `h`, `m` and `s`, largest first (`"15m"`, `"1h30m"`,
/// `"72h"`), in seconds; `None` when it is not one.
pub fn parse_duration_secs(text: &str) -> Option<u64> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    let mut number = String::new();
    let mut last_scale = u64::MAX;
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let scale = match c {
            'd' => 86_400,
            'h' => 3_600,
            'm' => 60,
            's' => 1,
            _ => return None,
        };
        if number.is_empty() || scale >= last_scale {
            return None;
        }
        last_scale = scale;
        total = total.checked_add(number.parse::<u64>().ok()?.checked_mul(scale)?)?;
        number.clear();
    }
    number.is_empty().then_some(total)
}

/// Writes seconds as [`parse_duration_secs`] reads them (`"1h30m"`; `"0s"` for none).
pub fn format_duration(secs: u64) -> String {
    let mut out = String::new();
    let mut left = secs;
    for (unit, scale) in [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)] {
        if left >= scale {
            out.push_str(&format!("{}{unit}", left / scale));
            left %= scale;
        }
    }
    if out.is_empty() {
        out.push_str("0s");
    }
    out
}

/// One wave: the nodes a selector chooses, or a size of the nodes not yet in a wave; and what
/// the rollout does once it is done.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "WaveToml", into = "WaveToml")]
pub struct WaveDefinition {
    /// A name people read (`canaries`); unset, a wave is named by its place (`wave 2`).
    pub name: Option<String>,
    /// Which nodes it takes.
    pub nodes: WaveNodes,
    /// What happens once it is done (unset: the next wave starts).
    pub pause: Option<Pause>,
}

/// Which nodes a wave takes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WaveNodes {
    /// The module's nodes the selector matches (`select = "role=canary"`).
    Select(Selector),
    /// A size of the module's nodes not in an earlier wave nor a wave by selector.
    Size(WaveSize),
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WaveToml {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    select: Option<Selector>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    size: Option<WaveSize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pause: Option<Pause>,
}

impl TryFrom<WaveToml> for WaveDefinition {
    type Error = String;
    fn try_from(toml: WaveToml) -> Result<Self, String> {
        let nodes = match (toml.select, toml.size) {
            (Some(select), None) => WaveNodes::Select(select),
            (None, Some(size)) => WaveNodes::Size(size),
            (Some(_), Some(_)) => return Err("a wave has `select` or `size`, not both".into()),
            (None, None) => {
                return Err(
                    "a wave needs `select` (a selector) or `size` (\"10%\" or a number)".into(),
                )
            }
        };
        Ok(WaveDefinition {
            name: toml.name,
            nodes,
            pause: toml.pause,
        })
    }
}

impl From<WaveDefinition> for WaveToml {
    fn from(wave: WaveDefinition) -> Self {
        let (select, size) = match wave.nodes {
            WaveNodes::Select(select) => (Some(select), None),
            WaveNodes::Size(size) => (None, Some(size)),
        };
        WaveToml {
            name: wave.name,
            select,
            size,
            pause: wave.pause,
        }
    }
}

/// Whether a window lets waves start, or stops them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Effect {
    /// Waves may start inside it (with allow windows, only inside one of them).
    Allow,
    /// No wave starts inside it, whatever the allow windows say.
    Deny,
}

/// A deploy window: `{ allow = "Mon-Fri 09:00-16:00", zone = "Europe/Berlin" }` or
/// `{ deny = "2026-12-24 00:00/72h" }`. A wave under way when a window closes finishes; only
/// the start of a wave is judged.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "WindowToml", into = "WindowToml")]
pub struct Window {
    /// Allow or deny.
    pub effect: Effect,
    /// When.
    pub when: WindowTime,
    /// The IANA time zone its days and times are in (unset: UTC).
    pub zone: Option<String>,
}

/// When a window is, in its zone's days and times.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WindowTime {
    /// Every week, on `days`, from `from` to `to` (minutes after midnight; `to` up to 1440,
    /// and at or before `from` when it ends the next day): `Mon-Fri 09:00-16:00`, `Sat,Sun`,
    /// `Fri 22:00-02:00`.
    Weekly {
        /// Monday first: `days[0]` is Monday, `days[6]` Sunday.
        days: [bool; 7],
        /// Minutes after midnight it opens.
        from: u16,
        /// Minutes after midnight it closes.
        to: u16,
    },
    /// Once, from a date and time for a duration: `2026-12-24 00:00/72h`.
    Once {
        /// Year, month (1–12) and day (1–31).
        date: (i16, u8, u8),
        /// Minutes after midnight it opens.
        at: u16,
        /// How long it lasts, in seconds.
        secs: u64,
    },
}

/// The days' names, Monday first.
pub const DAY_NAMES: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

impl WindowTime {
    /// Reads a window's text (see [`WindowTime`]'s variants).
    pub fn parse(text: &str) -> Result<WindowTime, String> {
        let text = text.trim();
        if let Some((start, duration)) = text.split_once('/') {
            return parse_once(start.trim(), duration.trim())
                .map_err(|why| format!("`{text}`: {why}"));
        }
        parse_weekly(text).map_err(|why| format!("`{text}`: {why}"))
    }
}

fn parse_once(start: &str, duration: &str) -> Result<WindowTime, String> {
    let (date, time) = start.split_once(' ').unwrap_or((start, "00:00"));
    let parts: Vec<&str> = date.split('-').collect();
    let number = |s: &str| s.parse::<u32>().ok();
    let (year, month, day) = match parts.as_slice() {
        [y, m, d] if y.len() == 4 && m.len() == 2 && d.len() == 2 => {
            match (number(y), number(m), number(d)) {
                (Some(y), Some(m), Some(d)) => (y, m, d),
                _ => return Err("expected a date as YYYY-MM-DD".into()),
            }
        }
        _ => return Err("expected a date as YYYY-MM-DD, then a time and `/DURATION`".into()),
    };
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return Err(format!("{date} is not a day of the calendar"));
    }
    let at = parse_time(time.trim(), false)?;
    let secs = parse_duration_secs(duration)
        .filter(|secs| *secs > 0)
        .ok_or_else(|| format!("`{duration}` is not a duration such as \"72h\""))?;
    Ok(WindowTime::Once {
        date: (year as i16, month as u8, day as u8),
        at,
        secs,
    })
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn parse_time(text: &str, end: bool) -> Result<u16, String> {
    let bad = || format!("expected a time as HH:MM, not `{text}`");
    let (hours, minutes) = text.split_once(':').ok_or_else(bad)?;
    if hours.len() != 2 || minutes.len() != 2 {
        return Err(bad());
    }
    let hours: u16 = hours.parse().map_err(|_| bad())?;
    let minutes: u16 = minutes.parse().map_err(|_| bad())?;
    if minutes > 59 || hours > 24 || (hours == 24 && (minutes != 0 || !end)) {
        return Err(format!("{text} is not a time of day"));
    }
    Ok(hours * 60 + minutes)
}

fn parse_day(text: &str) -> Result<usize, String> {
    DAY_NAMES
        .iter()
        .position(|name| name.eq_ignore_ascii_case(text))
        .ok_or_else(|| format!("expected a day (Mon, Tue, Wed, Thu, Fri, Sat, Sun), not `{text}`"))
}

fn parse_weekly(text: &str) -> Result<WindowTime, String> {
    let words: Vec<&str> = text.split_whitespace().collect();
    let (days_text, times_text) = match words.as_slice() {
        [one] if one.contains(':') => (None, Some(*one)),
        [one] => (Some(*one), None),
        [days, times] => (Some(*days), Some(*times)),
        [] => return Err("expected days, times or both (`Mon-Fri 09:00-16:00`)".into()),
        [_, _, extra, ..] => {
            return Err(format!("expected days then times, found more: `{extra}`"))
        }
    };
    let mut days = [days_text.is_none(); 7];
    for part in days_text.into_iter().flat_map(|d| d.split(',')) {
        match part.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (parse_day(first)?, parse_day(last)?);
                let mut day = first;
                loop {
                    days[day] = true;
                    if day == last {
                        break;
                    }
                    day = (day + 1) % 7;
                }
            }
            None => days[parse_day(part)?] = true,
        }
    }
    let (from, to) = match times_text {
        None => (0, 1440),
        Some(times) => {
            let (from, to) = times
                .split_once('-')
                .ok_or_else(|| format!("expected times as HH:MM-HH:MM, not `{times}`"))?;
            let (from, to) = (parse_time(from, false)?, parse_time(to, true)?);
            if from == to {
                return Err(format!("`{times}` opens and closes at once"));
            }
            (from, to)
        }
    };
    Ok(WindowTime::Weekly { days, from, to })
}

fn write_time(f: &mut fmt::Formatter<'_>, minutes: u16) -> fmt::Result {
    write!(f, "{:02}:{:02}", minutes / 60, minutes % 60)
}

impl fmt::Display for WindowTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WindowTime::Weekly { days, from, to } => {
                let every_day = days.iter().all(|d| *d);
                let whole_day = *from == 0 && *to == 1440;
                if !every_day || whole_day {
                    let mut runs: Vec<String> = Vec::new();
                    let mut day = 0;
                    while day < 7 {
                        if !days[day] {
                            day += 1;
                            continue;
                        }
                        let start = day;
                        while day + 1 < 7 && days[day + 1] {
                            day += 1;
                        }
                        runs.push(match day - start {
                            0 => DAY_NAMES[start].to_owned(),
                            1 => format!("{},{}", DAY_NAMES[start], DAY_NAMES[day]),
                            _ => format!("{}-{}", DAY_NAMES[start], DAY_NAMES[day]),
                        });
                        day += 1;
                    }
                    f.write_str(&runs.join(","))?;
                }
                if !whole_day {
                    if !every_day {
                        f.write_str(" ")?;
                    }
                    write_time(f, *from)?;
                    f.write_str("-")?;
                    write_time(f, *to)?;
                }
                Ok(())
            }
            WindowTime::Once {
                date: (year, month, day),
                at,
                secs,
            } => {
                write!(f, "{year:04}-{month:02}-{day:02} ")?;
                write_time(f, *at)?;
                write!(f, "/{}", format_duration(*secs))
            }
        }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let effect = match self.effect {
            Effect::Allow => "allow",
            Effect::Deny => "deny",
        };
        write!(f, "{effect} {}", self.when)?;
        match &self.zone {
            Some(zone) => write!(f, " ({zone})"),
            None => f.write_str(" (UTC)"),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct WindowToml {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    allow: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    deny: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    zone: Option<String>,
}

impl TryFrom<WindowToml> for Window {
    type Error = String;
    fn try_from(toml: WindowToml) -> Result<Self, String> {
        let (effect, text, key) = match (toml.allow, toml.deny) {
            (Some(text), None) => (Effect::Allow, text, "allow"),
            (None, Some(text)) => (Effect::Deny, text, "deny"),
            (Some(_), Some(_)) => return Err("a window has `allow` or `deny`, not both".into()),
            (None, None) => {
                return Err("a window needs `allow` or `deny` (\"Mon-Fri 09:00-16:00\")".into())
            }
        };
        if toml.zone.as_deref().is_some_and(|z| z.trim().is_empty()) {
            return Err("a window's `zone` is an IANA zone name, e.g. \"Europe/Berlin\"".into());
        }
        let when = WindowTime::parse(&text).map_err(|why| format!("`{key}`: {why}"))?;
        Ok(Window {
            effect,
            when,
            zone: toml.zone,
        })
    }
}

impl From<Window> for WindowToml {
    fn from(window: Window) -> Self {
        let text = Some(window.when.to_string());
        let (allow, deny) = match window.effect {
            Effect::Allow => (text, None),
            Effect::Deny => (None, text),
        };
        WindowToml {
            allow,
            deny,
            zone: window.zone,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(text: &str) -> Result<RolloutPolicy, String> {
        #[derive(Deserialize)]
        struct File {
            rollout: RolloutPolicy,
        }
        toml::from_str::<File>(text)
            .map(|file| file.rollout)
            .map_err(|e| e.message().to_owned())
    }

    #[test]
    fn the_issues_example_reads_and_writes_back() {
        let text = r#"
            [rollout]
            budget = { failed = "2%", min = 20 }
            max-parallel = 500
            windows = [
              { allow = "Mon-Fri 09:00-16:00", zone = "Europe/Berlin" },
              { deny = "2026-12-24 00:00/72h" },
            ]
            [[rollout.waves]]
            select = "role=canary"
            pause = "approve"
            [[rollout.waves]]
            size = "10%"
            pause = "15m"
            [[rollout.waves]]
            size = "100%"
        "#;
        let read = policy(text).unwrap();
        assert_eq!(
            read.budget,
            Some(Budget {
                failed: Share { basis_points: 200 },
                min: 20
            })
        );
        let waves = read.waves.as_ref().unwrap();
        assert_eq!(
            waves[0].nodes,
            WaveNodes::Select(Selector::parse("role=canary").unwrap())
        );
        assert_eq!(waves[0].pause, Some(Pause::Approve));
        assert_eq!(waves[1].pause, Some(Pause::For { secs: 900 }));
        assert_eq!(
            waves[2].nodes,
            WaveNodes::Size(WaveSize::Share(Share {
                basis_points: 10_000
            }))
        );
        let windows = read.windows.as_ref().unwrap();
        assert_eq!(
            windows[0].to_string(),
            "allow Mon-Fri 09:00-16:00 (Europe/Berlin)"
        );
        assert_eq!(windows[1].to_string(), "deny 2026-12-24 00:00/3d (UTC)");
        // Written and read again, it is the same policy.
        let json = serde_json::to_string(&read).unwrap();
        assert_eq!(serde_json::from_str::<RolloutPolicy>(&json).unwrap(), read);
    }

    #[test]
    fn bad_values_are_refused_naming_the_key() {
        let check = |body: &str, expected: &str| {
            let error = policy(&format!("[rollout]\n{body}\n")).unwrap_err();
            assert!(error.contains(expected), "{body}: {error}");
        };
        check("budget = { failed = \"2\" }", "`2` is not a share");
        check("budget = { failed = \"120%\" }", "`120%` is over 100%");
        check(
            "budget = { failed = \"2%\", mni = 3 }",
            "unknown field `mni`",
        );
        check("max-paralel = 3", "unknown field `max-paralel`");
        check(
            "[[rollout.waves]]\nsize = \"ten\"",
            "`size`: `ten` is not a share",
        );
        check(
            "[[rollout.waves]]\npause = \"approve\"",
            "a wave needs `select`",
        );
        check(
            "[[rollout.waves]]\nselect = \"a\"\nsize = 3",
            "a wave has `select` or `size`, not both",
        );
        check(
            "[[rollout.waves]]\nselect = \"site=\"",
            "expected a label value after `=`",
        );
        check(
            "[[rollout.waves]]\nsize = 3\npause = \"soon\"",
            "`pause` is \"approve\"",
        );
        check(
            "windows = [{ allow = \"Mon-Fry 09:00-16:00\" }]",
            "`allow`: `Mon-Fry 09:00-16:00`: expected a day",
        );
        check(
            "windows = [{ deny = \"2026-02-30 00:00/1h\" }]",
            "2026-02-30 is not a day of the calendar",
        );
        check(
            "windows = [{ deny = \"2026-12-24 00:00/later\" }]",
            "`later` is not a duration",
        );
        check(
            "windows = [{ allow = \"Mon 25:00-26:00\" }]",
            "25:00 is not a time of day",
        );
        check(
            "windows = [{ allow = \"Mon\", deny = \"Tue\" }]",
            "not both",
        );
    }

    #[test]
    fn window_texts_read_as_their_days_and_times() {
        let weekly = |text: &str| match WindowTime::parse(text).unwrap() {
            WindowTime::Weekly { days, from, to } => (days, from, to),
            WindowTime::Once { .. } => panic!("{text} is weekly"),
        };
        let t = true;
        let f = false;
        assert_eq!(
            weekly("Mon-Fri 09:00-16:00"),
            ([t, t, t, t, t, f, f], 540, 960)
        );
        assert_eq!(weekly("Sat,Sun"), ([f, f, f, f, f, t, t], 0, 1440));
        assert_eq!(
            weekly("Fri-Mon 22:00-02:00"),
            ([t, f, f, f, t, t, t], 1320, 120)
        );
        assert_eq!(weekly("12:00-24:00"), ([t; 7], 720, 1440));
        for text in [
            "Mon-Fri 09:00-16:00",
            "Sat,Sun",
            "Mon,Wed,Fri 22:00-02:00",
            "12:00-24:00",
        ] {
            assert_eq!(WindowTime::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(
            WindowTime::parse("2026-12-24/1d12h").unwrap(),
            WindowTime::Once {
                date: (2026, 12, 24),
                at: 0,
                secs: 129_600
            }
        );
    }

    #[test]
    fn shares_durations_and_a_modules_policy_over_the_fleets() {
        assert_eq!(Share::parse("0.5%").unwrap().basis_points, 50);
        assert_eq!(Share::parse("12.25%").unwrap().to_string(), "12.25%");
        assert_eq!(Share::parse("0.5%").unwrap().to_string(), "0.5%");
        assert!(Share::parse("1.%").is_err());
        assert!(Share::parse("1.234%").is_err());
        assert_eq!(parse_duration_secs("1h30m"), Some(5400));
        assert_eq!(parse_duration_secs("30m1h"), None);
        assert_eq!(parse_duration_secs("15"), None);
        assert_eq!(format_duration(5400), "1h30m");
        let fleet = policy("[rollout]\nmax-parallel = 5\nbudget = { failed = \"1%\" }").unwrap();
        let module = policy("[rollout]\nmax-parallel = 2").unwrap();
        let over = RolloutPolicy::over(Some(&module), Some(&fleet)).unwrap();
        assert_eq!(over.max_parallel, Some(2));
        assert_eq!(over.budget, fleet.budget);
        assert_eq!(RolloutPolicy::over(None, None), None);
    }
}
