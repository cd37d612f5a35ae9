//! A lock across machines: a lease in the mesh's records, so that two controllers on two
//! machines never plan or drive at once, and a collector never sweeps while a controller
//! publishes — a flock excludes only the processes of one machine. The controller holds the
//! lease [`PLANS_LEASE`] while planning or driving (every publish and build record happens
//! then), and so does the collector on a fleet for its whole run.
//!
//! The lease is the record [`PLANS_LEASE`] ([`LeaseRecord`]): who holds it, and a beat its holder
//! bumps every [`RENEW`]. It is taken with compare-and-set ([`RecordStore::update`]) when it is
//! free, when its holder is a process of this machine that is gone, or when its beat has not
//! moved for [`STALE`] as this waiter saw it (its own clock only: no two machines' clocks are
//! compared). A holder that finds the lease taken from it — it was not heard for [`STALE`] —
//! writes no plan after that (the controller checks [`check_held`] before every plan write),
//! and says so.
//!
//! # Invariants
//! - At most one live holder: every change of the record is a compare-and-set on its revision.
//! - A controller killed on this machine never keeps the next one waiting; one gone on another
//!   machine keeps it waiting [`STALE`] at most.

use crate::record_store::{RecordStore, RecordStoreError};
use serde::{Deserialize, Serialize};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The record holding the lease.
pub const PLANS_LEASE: &str = "locks/plans";

/// The lease record's format.
pub const LEASE_FORMAT: u32 = 1;

/// How often the holder bumps its beat.
pub const RENEW: Duration = Duration::from_secs(3);

/// How long a beat that does not move makes a lease free to take.
pub const STALE: Duration = Duration::from_secs(15);

/// The lease as recorded (format [`LEASE_FORMAT`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct LeaseRecord {
    /// Format version.
    pub format: u32,
    /// Who holds it; `None`: free.
    pub holder: Option<Holder>,
    /// Bumped by the holder every [`RENEW`], and by every change.
    pub beat: u64,
}

/// A controller holding the lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Holder {
    /// Its machine's host name.
    pub host: String,
    /// Its process.
    pub pid: u32,
    /// Its process's start time (`/proc/<pid>/stat`), so a later process given the pid is not
    /// taken for it.
    pub start_time: u64,
    /// What it does (`merge cat`, `plans resume`, …).
    pub doing: String,
    /// A random token naming this hold.
    pub token: String,
}

impl Holder {
    /// For people: `merge cat (pid 4242 on ctl-1)`.
    pub fn describe(&self) -> String {
        format!("{} (pid {} on {})", self.doing, self.pid, self.host)
    }
}

/// The start time of the live process `pid` (clock ticks after boot, `/proc/<pid>/stat` field
/// 22), so a later process given the same pid is not taken for it; `None` when there is no
/// such live process (a zombie is not live). mesh-apply's windows read the same field for the
/// same reason.
fn start_time_of(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ...`: comm may hold spaces and parentheses; state is field 3.
    let fields: Vec<&str> = text[text.rfind(')')? + 1..].split_whitespace().collect();
    if matches!(fields.first(), Some(&"Z") | Some(&"X")) {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// An error taking, keeping or checking a lease.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The record could not be read or written.
    #[error(transparent)]
    Store(#[from] RecordStoreError),
    /// The record is not a lease record of this format.
    #[error("{0}")]
    Record(String),
    /// This process could not be known, or no token could be made.
    #[error("{what}")]
    Io {
        /// What failed.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The lease is held by another.
    #[error(
        "the plans lock was taken over by {holder} (this process was not heard for {stale} s); \
         it stops here and writes no more"
    )]
    TakenOver {
        /// Who holds it now.
        holder: String,
        /// [`STALE`], in seconds.
        stale: u64,
    },
    /// The lease was released by another.
    #[error(
        "the plans lock was released by another process; this one stops here and writes no more"
    )]
    Released,
}

/// This machine's host name.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .unwrap_or_else(|_| "unknown-host".to_owned())
}

fn token() -> Result<String, LeaseError> {
    let mut random = [0u8; 8];
    use std::io::Read as _;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut file| file.read_exact(&mut random))
        .map_err(|source| LeaseError::Io {
            what: "reading /dev/urandom for a lease token".to_owned(),
            source,
        })?;
    Ok(random.iter().map(|b| format!("{b:02x}")).collect())
}

fn parse(bytes: Option<&[u8]>) -> Result<LeaseRecord, String> {
    match bytes {
        None => Ok(LeaseRecord {
            format: LEASE_FORMAT,
            holder: None,
            beat: 0,
        }),
        Some(bytes) => {
            let record: LeaseRecord = serde_json::from_slice(bytes)
                .map_err(|e| format!("{PLANS_LEASE} is not a lease record: {e}"))?;
            if record.format != LEASE_FORMAT {
                return Err(format!(
                    "{PLANS_LEASE} has format {}, this build reads format {LEASE_FORMAT}",
                    record.format
                ));
            }
            Ok(record)
        }
    }
}

fn encode(record: &LeaseRecord) -> Vec<u8> {
    serde_json::to_vec_pretty(record).expect("a lease record always serializes")
}

/// Whether `holder` is a process of this machine that is gone.
fn gone_from_this_machine(holder: &Holder, host: &str) -> bool {
    holder.host == host && start_time_of(holder.pid) != Some(holder.start_time)
}

/// The lease, held until dropped: renewed by a thread of its own, released on drop.
pub struct Lease {
    records: Arc<dyn RecordStore>,
    token: String,
    current: Arc<Mutex<Option<String>>>,
    stop: Option<mpsc::Sender<()>>,
    renewer: Option<JoinHandle<()>>,
}

impl Lease {
    /// Takes the lease for `doing`, waiting (and saying so on standard error, once per holder)
    /// while another live process holds it. `current` is where the caller keeps the token of
    /// the lease it holds, so its writes can check it is still held ([`check_held`]).
    ///
    /// # Errors
    /// When the record cannot be read or written, or is not a lease record.
    pub fn acquire(
        records: Arc<dyn RecordStore>,
        doing: &str,
        current: Arc<Mutex<Option<String>>>,
    ) -> Result<Lease, LeaseError> {
        let host = host_name();
        let pid = std::process::id();
        let start_time = start_time_of(pid).ok_or_else(|| LeaseError::Io {
            what: "reading this process's start time".to_owned(),
            source: std::io::Error::other(format!("/proc/{pid}/stat has no start time")),
        })?;
        let mine = Holder {
            host: host.clone(),
            pid,
            start_time,
            doing: doing.to_owned(),
            token: token()?,
        };
        // The holder's beat as this waiter last saw it change, and when (this clock only).
        let mut seen: Option<(Holder, u64, Instant)> = None;
        let mut said: Option<String> = None;
        loop {
            let mut held_by: Option<(Holder, u64)> = None;
            let taken = records.update(PLANS_LEASE, &mut |bytes| {
                held_by = None;
                let record = parse(bytes)?;
                let free = match &record.holder {
                    None => true,
                    Some(holder) if gone_from_this_machine(holder, &host) => true,
                    Some(holder) => matches!(
                        &seen,
                        Some((h, beat, since))
                            if h == holder && *beat == record.beat && since.elapsed() >= STALE
                    ),
                };
                if !free {
                    held_by = record.holder.clone().map(|h| (h, record.beat));
                    return Err("held".to_owned());
                }
                Ok(encode(&LeaseRecord {
                    format: LEASE_FORMAT,
                    holder: Some(mine.clone()),
                    beat: record.beat + 1,
                }))
            });
            match (taken, held_by) {
                (Ok(_), _) => break,
                (Err(_), Some((holder, beat))) => {
                    let moved = !matches!(&seen, Some((h, b, _)) if *h == holder && *b == beat);
                    if moved {
                        seen = Some((holder.clone(), beat, Instant::now()));
                    }
                    if said.as_deref() != Some(holder.token.as_str()) {
                        eprintln!(
                            "waiting for the plans lock, held by {} (taken over if it is not \
                             renewed for {} s)",
                            holder.describe(),
                            STALE.as_secs()
                        );
                        said = Some(holder.token.clone());
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
                (Err(error), None) => return Err(error.into()),
            }
        }
        *current
            .lock()
            .expect("the lease token lock is never poisoned") = Some(mine.token.clone());
        let (stop, stopped) = mpsc::channel::<()>();
        let renewer = {
            let records = Arc::clone(&records);
            let token = mine.token.clone();
            std::thread::spawn(move || loop {
                match stopped.recv_timeout(RENEW) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                let renewed = records.update(PLANS_LEASE, &mut |bytes| {
                    let record = parse(bytes)?;
                    match &record.holder {
                        Some(holder) if holder.token == token => Ok(encode(&LeaseRecord {
                            beat: record.beat + 1,
                            ..record
                        })),
                        Some(holder) => Err(format!("taken by {}", holder.describe())),
                        None => Err("released by someone else".to_owned()),
                    }
                });
                if let Err(error) = renewed {
                    // Not fatal here: the next plan write checks the lease and stops.
                    tracing::error!("the plans lock could not be renewed: {error:#}");
                }
            })
        };
        Ok(Lease {
            records,
            token: mine.token,
            current,
            stop: Some(stop),
            renewer: Some(renewer),
        })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(renewer) = self.renewer.take() {
            let _ = renewer.join();
        }
        *self
            .current
            .lock()
            .expect("the lease token lock is never poisoned") = None;
        let token = self.token.clone();
        let released = self.records.update(PLANS_LEASE, &mut |bytes| {
            let record = parse(bytes)?;
            match &record.holder {
                Some(holder) if holder.token == token => Ok(encode(&LeaseRecord {
                    holder: None,
                    beat: record.beat + 1,
                    ..record
                })),
                _ => Err("not ours any more".to_owned()),
            }
        });
        if let Err(error) = released {
            tracing::warn!("the plans lock was not released: {error:#}");
        }
    }
}

/// Fails unless the lease named by `token` is still held: a process whose lease was taken
/// over (it was not heard for [`STALE`]) writes no more.
///
/// # Errors
/// When the lease is held by another, or cannot be read.
pub fn check_held(records: &dyn RecordStore, token: &str) -> Result<(), LeaseError> {
    let record = parse(records.get(PLANS_LEASE)?.as_deref()).map_err(LeaseError::Record)?;
    match &record.holder {
        Some(holder) if holder.token == token => Ok(()),
        Some(holder) => Err(LeaseError::TakenOver {
            holder: holder.describe(),
            stale: STALE.as_secs(),
        }),
        None => Err(LeaseError::Released),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record_store::DirRecords;

    fn record(records: &dyn RecordStore) -> LeaseRecord {
        parse(records.get(PLANS_LEASE).unwrap().as_deref()).unwrap()
    }

    fn other_holder(host: &str, pid: u32) -> Holder {
        Holder {
            host: host.to_owned(),
            pid,
            start_time: 0,
            doing: "merge cat".to_owned(),
            token: "theirs".to_owned(),
        }
    }

    #[test]
    fn a_free_lease_is_taken_held_and_released() {
        let dir = tempfile::tempdir().unwrap();
        let records: Arc<dyn RecordStore> = Arc::new(DirRecords::new(dir.path()));
        let slot = Arc::new(Mutex::new(None));
        let lease =
            Lease::acquire(Arc::clone(&records), "plans resume", Arc::clone(&slot)).unwrap();
        let held = record(records.as_ref());
        let holder = held.holder.clone().unwrap();
        assert_eq!(holder.pid, std::process::id());
        assert_eq!(holder.doing, "plans resume");
        assert_eq!(slot.lock().unwrap().as_deref(), Some(holder.token.as_str()));
        check_held(records.as_ref(), &holder.token).unwrap();
        drop(lease);
        let released = record(records.as_ref());
        assert_eq!(released.holder, None);
        assert!(released.beat > held.beat);
        assert_eq!(*slot.lock().unwrap(), None);
    }

    #[test]
    fn a_holder_gone_from_this_machine_never_keeps_the_next_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let records: Arc<dyn RecordStore> = Arc::new(DirRecords::new(dir.path()));
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        let pid = gone.id();
        gone.wait().unwrap();
        records
            .put(
                PLANS_LEASE,
                &encode(&LeaseRecord {
                    format: LEASE_FORMAT,
                    holder: Some(other_holder(&host_name(), pid)),
                    beat: 7,
                }),
            )
            .unwrap();
        let lease = Lease::acquire(Arc::clone(&records), "plans resume", Arc::default()).unwrap();
        assert_eq!(
            record(records.as_ref()).holder.unwrap().pid,
            std::process::id()
        );
        drop(lease);
    }

    #[test]
    fn a_lease_taken_over_is_no_longer_held() {
        let dir = tempfile::tempdir().unwrap();
        let records: Arc<dyn RecordStore> = Arc::new(DirRecords::new(dir.path()));
        let slot = Arc::new(Mutex::new(None));
        let lease = Lease::acquire(Arc::clone(&records), "merge cat", Arc::clone(&slot)).unwrap();
        let token = slot.lock().unwrap().clone().unwrap();
        check_held(records.as_ref(), &token).unwrap();
        // Another controller took it over (this one was not heard for STALE).
        records
            .put(
                PLANS_LEASE,
                &encode(&LeaseRecord {
                    format: LEASE_FORMAT,
                    holder: Some(other_holder("ctl-2", 77)),
                    beat: 99,
                }),
            )
            .unwrap();
        let error = check_held(records.as_ref(), &token)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("taken over by merge cat (pid 77 on ctl-2)"),
            "{error}"
        );
        // Dropping the old lease leaves the new holder's record alone.
        drop(lease);
        assert_eq!(record(records.as_ref()).holder.unwrap().token, "theirs");
    }
}
