//! Discovery (the rule “Discovery waits for everyone who said they are there”): who is there, and
//! what each runtime serves.
//!
//! Every runtime — each host and the controller — answers NATS service discovery
//! (`$SRV.PING`, `$SRV.INFO`) through [`serve_discovery`], announcing its node and
//! modules in the service's metadata. [`discover`] asks who is there (PING, small, answered at
//! once), then asks each instance that answered what it serves (INFO), and waits for every one
//! of them — at least the old fixed window, at most [`DISCOVERY_LIMIT`] — naming those not
//! heard. [`discover_naming_unreadable`] also names every answer that could not be read.
//!
//! What it must never do: decide who is there by who answered INFO inside a fixed window (a
//! runtime with a large answer was reported as running nothing), or drop an instance that said
//! it is there without naming it.

use crate::nats::NatsError;
use futures_util::StreamExt;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use std::time::Duration;
use tokio::time::Instant;

/// The longest [`discover`] waits for INFO from instances that answered PING (unless the
/// window asked for is longer).
pub const DISCOVERY_LIMIT: Duration = Duration::from_secs(5);

/// The fixed window discovery used to gather answers in; [`discover`] waits at least this long
/// when given it.
pub const OLD_WINDOW: Duration = Duration::from_millis(750);

/// The service name a host's runtime answers discovery under.
pub const HOST_SERVICE: &str = "mesh-host";
/// The service name the controller answers discovery under.
pub const CONTROLLER_SERVICE: &str = "mesh-controller";

/// What a runtime says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeAnnouncement {
    /// [`HOST_SERVICE`] or [`CONTROLLER_SERVICE`] (letters, digits, `-`, `_`).
    pub service: String,
    /// The node it runs on.
    pub node: String,
    /// Its version (semver).
    pub version: String,
    /// The modules it runs.
    pub modules: Vec<String>,
}

/// A runtime answering discovery; stop it with [`DiscoveryService::stop`] or by dropping it.
#[derive(Debug)]
pub struct DiscoveryService {
    task: tokio::task::JoinHandle<()>,
    id: String,
}

impl DiscoveryService {
    /// The instance id it answers under (new for every start).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Stops answering.
    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for DiscoveryService {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The metadata key holding the node's name.
pub const NODE_KEY: &str = "node";
/// The metadata key holding the modules, comma-separated and sorted.
pub const MODULES_KEY: &str = "modules";

#[derive(serde::Serialize)]
struct PingAnswer<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    id: &'a str,
    version: &'a str,
    metadata: &'a BTreeMap<String, String>,
}

#[derive(serde::Serialize)]
struct InfoAnswer<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    id: &'a str,
    version: &'a str,
    description: &'a str,
    metadata: &'a BTreeMap<String, String>,
    endpoints: [(); 0],
}

fn is_service_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// Starts answering discovery for `runtime` on `client`'s connection, as the NATS service API
/// does: `$SRV.PING` and `$SRV.INFO`, each also addressed by name and by name and id, answered
/// with the API's JSON (`io.nats.micro.v1.ping_response`, `io.nats.micro.v1.info_response`),
/// the node and modules in its metadata.
///
/// Answered here rather than by async-nats' `service` module, whose answers are queued
/// unflushed (unsent on a current-thread runtime until something else flushes, nats.rs
/// nats.rs#1408): every answer here is flushed as it is made.
///
/// # Guarantees
/// When this returns, the server knows the subscriptions: a discovery started after it hears
/// this runtime. PING is answered at once; INFO with the same and the (empty) endpoint list.
///
/// # Errors
/// [`NatsError::Service`] when the service name is not `[A-Za-z0-9_-]` or the subscriptions
/// cannot be made.
pub async fn serve_discovery(
    client: &async_nats::Client,
    runtime: &RuntimeAnnouncement,
) -> Result<DiscoveryService, NatsError> {
    let service_error = |source: async_nats::Error| NatsError::Service {
        name: runtime.service.clone(),
        source,
    };
    if !is_service_name(&runtime.service) {
        return Err(service_error(
            "a service name is letters, digits, `-` or `_`".into(),
        ));
    }
    let inbox = client.new_inbox();
    let id = inbox.rsplit('.').next().unwrap_or(&inbox).to_owned();
    let mut modules = runtime.modules.clone();
    modules.sort();
    modules.dedup();
    let metadata = BTreeMap::from([
        (NODE_KEY.to_owned(), runtime.node.clone()),
        (MODULES_KEY.to_owned(), modules.join(",")),
    ]);
    let name = runtime.service.as_str();
    let ping = serde_json::to_vec(&PingAnswer {
        kind: "io.nats.micro.v1.ping_response",
        name,
        id: &id,
        version: &runtime.version,
        metadata: &metadata,
    })
    .expect("a ping answer serializes");
    let description = format!("{} on {}", runtime.service, runtime.node);
    let info = serde_json::to_vec(&InfoAnswer {
        kind: "io.nats.micro.v1.info_response",
        name,
        id: &id,
        version: &runtime.version,
        description: &description,
        metadata: &metadata,
        endpoints: [],
    })
    .expect("an info answer serializes");
    let mut subscriptions = Vec::new();
    for (verb, answer) in [("PING", bytes::Bytes::from(ping)), ("INFO", info.into())] {
        for subject in [
            format!("$SRV.{verb}"),
            format!("$SRV.{verb}.{name}"),
            format!("$SRV.{verb}.{name}.{id}"),
        ] {
            let subscriber = client
                .subscribe(subject)
                .await
                .map_err(|e| service_error(e.into()))?;
            let answer = answer.clone();
            subscriptions.push(subscriber.map(move |message| (message, answer.clone())));
        }
    }
    crate::nats::round_trip(client)
        .await
        .map_err(|e| service_error(e.into()))?;
    let mut asked = futures_util::stream::select_all(subscriptions);
    let answering = client.clone();
    let service = runtime.service.clone();
    let task = tokio::spawn(async move {
        while let Some((message, answer)) = asked.next().await {
            let Some(reply) = message.reply else { continue };
            let sent = async {
                answering.publish(reply, answer).await?;
                answering.flush().await?;
                Ok::<(), async_nats::Error>(())
            };
            if let Err(error) = sent.await {
                tracing::error!(%error, service, "a discovery answer could not be sent");
            }
        }
    });
    Ok(DiscoveryService { task, id })
}

/// A runtime that said what it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeHeard {
    /// Its service name ([`HOST_SERVICE`], [`CONTROLLER_SERVICE`], or another service's).
    pub service: String,
    /// Its instance id.
    pub id: String,
    /// Its version.
    pub version: String,
    /// The node it runs on, if it said.
    pub node: Option<String>,
    /// The modules it runs, sorted.
    pub modules: Vec<String>,
    /// From the start of discovery to its PING answer.
    pub ping_time: Duration,
    /// From the start of discovery to its INFO answer.
    pub answer_time: Duration,
    /// Its INFO answer's size in bytes.
    pub answer_size: usize,
}

/// A runtime that said it is there (PING) and not what it serves (INFO) in time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeUnheard {
    /// Its service name.
    pub service: String,
    /// Its instance id.
    pub id: String,
    /// The node it runs on, if its PING answer said.
    pub node: Option<String>,
    /// From the start of discovery to its PING answer.
    pub ping_time: Duration,
}

/// What [`discover`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// Every runtime heard, sorted by service, node and id.
    pub runtimes: Vec<RuntimeHeard>,
    /// Every runtime that answered PING and not INFO (or not readably), sorted likewise. While
    /// one is here, nothing may say its modules are missing or run elsewhere.
    pub unheard: Vec<RuntimeUnheard>,
    /// How long discovery took.
    pub waited: Duration,
}

/// An answer to discovery that could not be read (the rule “Discovery waits for everyone who said
/// they are there”: named, never dropped).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct UnreadableAnswer {
    /// What it answers: `$SRV.PING`, or `$SRV.INFO.<service>.<id>`.
    pub asked: String,
    /// The instance's service name, when known (an INFO answer's, from its PING answer).
    pub service: Option<String>,
    /// The instance's id, when known.
    pub id: Option<String>,
    /// The instance's node, when its PING answer said.
    pub node: Option<String>,
    /// Why it cannot be read.
    pub error: String,
    /// How the answer begins, as text (at most [`UNREADABLE_SHOWN`] characters).
    pub answer: String,
}

/// The most characters of an unreadable answer kept in [`UnreadableAnswer::answer`].
pub const UNREADABLE_SHOWN: usize = 120;

/// What [`discover_naming_unreadable`] found: the [`Discovery`], and every answer that could not
/// be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveryAnswers {
    /// Who is there and what each serves.
    pub discovery: Discovery,
    /// Every answer that could not be read, in the order heard. An instance whose INFO answer
    /// is here is in [`Discovery::unheard`] too: what it serves is not known.
    pub unreadable: Vec<UnreadableAnswer>,
}

impl UnreadableAnswer {
    fn new(asked: String, pinged: Option<(&str, &Pinged)>, error: String, payload: &[u8]) -> Self {
        UnreadableAnswer {
            asked,
            service: pinged.map(|(_, p)| p.service.clone()),
            id: pinged.map(|(id, _)| id.to_owned()),
            node: pinged.and_then(|(_, p)| p.node.clone()),
            error,
            answer: String::from_utf8_lossy(payload)
                .chars()
                .take(UNREADABLE_SHOWN)
                .collect(),
        }
    }
}

/// An INFO answer: heard, or named unreadable (with its instance, when it is one asked).
fn read_info(
    message: &async_nats::Message,
    at: Duration,
    asked: &[String],
    pinged: &BTreeMap<String, Pinged>,
    heard: &mut BTreeMap<String, RuntimeHeard>,
    answered_unreadably: &mut BTreeSet<String>,
    unreadable: &mut Vec<UnreadableAnswer>,
) {
    let instance = message
        .subject
        .rsplit('.')
        .next()
        .and_then(|n| n.parse::<usize>().ok())
        .and_then(|n| asked.get(n))
        .and_then(|id| pinged.get_key_value(id));
    let Some((instance_id, instance)) = instance else {
        unreadable.push(UnreadableAnswer::new(
            "$SRV.INFO".to_owned(),
            None,
            format!("an answer on `{}`, which was not asked", message.subject),
            &message.payload,
        ));
        return;
    };
    let answer: Answer = match serde_json::from_slice(&message.payload) {
        Ok(answer) => answer,
        Err(error) => {
            tracing::warn!(%error, id = %instance_id, "a discovery INFO answer that cannot be read");
            answered_unreadably.insert(instance_id.clone());
            unreadable.push(UnreadableAnswer::new(
                format!("$SRV.INFO.{}.{instance_id}", instance.service),
                Some((instance_id, instance)),
                error.to_string(),
                &message.payload,
            ));
            return;
        }
    };
    let metadata = answer.metadata.unwrap_or_default();
    let mut modules: Vec<String> = metadata
        .get(MODULES_KEY)
        .map(|m| {
            m.split(',')
                .filter(|m| !m.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    modules.sort();
    let ping_time = instance.ping_time;
    let id = instance_id.clone();
    heard.insert(
        id.clone(),
        RuntimeHeard {
            service: answer.name,
            id,
            version: answer.version,
            node: metadata.get(NODE_KEY).cloned(),
            modules,
            ping_time,
            answer_time: at,
            answer_size: message.payload.len(),
        },
    );
}

/// A PING answer, read: `None` when it is one already heard, or cannot be read (then it is
/// in `unreadable`, naming whoever it says sent it and why).
fn read_ping(
    message: &async_nats::Message,
    pinged: &BTreeMap<String, Pinged>,
    unreadable: &mut Vec<UnreadableAnswer>,
) -> Option<Answer> {
    let answer: Answer = match serde_json::from_slice(&message.payload) {
        Ok(answer) => answer,
        Err(error) => {
            tracing::warn!(%error, "a discovery PING answer that cannot be read");
            let mut named = UnreadableAnswer::new(
                "$SRV.PING".to_owned(),
                None,
                error.to_string(),
                &message.payload,
            );
            // Who sent it, as far as it says.
            if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&message.payload) {
                let text =
                    |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
                named.service = text(value.get("name"));
                named.id = text(value.get("id"));
                named.node = text(value.get("metadata").and_then(|m| m.get(NODE_KEY)));
            }
            unreadable.push(named);
            return None;
        }
    };
    if pinged.contains_key(&answer.id) {
        return None;
    }
    let subject = format!("$SRV.INFO.{}.{}", answer.name, answer.id);
    if !crate::is_valid_subject(&subject, false)
        || answer.name.contains('.')
        || answer.id.contains('.')
    {
        tracing::warn!(%subject, "a discovery PING answer naming an instance that cannot be asked");
        unreadable.push(UnreadableAnswer::new(
            "$SRV.PING".to_owned(),
            None,
            format!(
                "its service `{}` and id `{}` do not make a subject to ask INFO on",
                answer.name, answer.id
            ),
            &message.payload,
        ));
        return None;
    }
    Some(answer)
}

#[derive(serde::Deserialize)]
struct Answer {
    name: String,
    id: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    metadata: Option<HashMap<String, String>>,
}

struct Pinged {
    service: String,
    node: Option<String>,
    ping_time: Duration,
}

/// Asks who is there and what each serves: [`discover_naming_unreadable`] without the answers
/// that could not be read (their instances are still named [`Discovery::unheard`] when their
/// PING answer could be read).
///
/// # Errors
/// As [`discover_naming_unreadable`].
pub async fn discover(
    client: &async_nats::Client,
    window: Duration,
) -> Result<Discovery, NatsError> {
    Ok(discover_naming_unreadable(client, window).await?.discovery)
}

/// Asks who is there and what each serves, naming every answer that could not be read.
///
/// PING goes to every runtime with a reply inbox; every PING answer heard before discovery
/// ends (during `window`, or later while INFO is awaited) is collected, and each instance that
/// answered is asked INFO (`$SRV.INFO.<name>.<id>`) at once. What came and was not yet read
/// when discovery ends is read then: nothing heard is dropped unnamed.
/// Discovery ends when `window` has passed and every instance that answered PING has answered
/// INFO, or at [`DISCOVERY_LIMIT`] (or `window`, if longer), naming those not heard.
///
/// # Guarantees
/// A quiet mesh costs `window`; a slow answer is waited for up to the limit; an instance that
/// answered PING is either in [`Discovery::runtimes`] or in [`Discovery::unheard`], never
/// dropped; an answer that cannot be read (not the service API's JSON, or naming an instance
/// that cannot be asked) is in [`DiscoveryAnswers::unreadable`] with why, never dropped.
///
/// # Errors
/// [`NatsError::Core`] when the inboxes cannot be subscribed to or PING cannot be sent.
pub async fn discover_naming_unreadable(
    client: &async_nats::Client,
    window: Duration,
) -> Result<DiscoveryAnswers, NatsError> {
    let core = |subject: &str| {
        let subject = subject.to_owned();
        move |source: async_nats::Error| NatsError::Core { subject, source }
    };
    let ping_inbox = client.new_inbox();
    let info_inbox = client.new_inbox();
    let mut pings = client
        .subscribe(ping_inbox.clone())
        .await
        .map_err(|e| core(&ping_inbox)(e.into()))?;
    // Each instance is asked INFO with a reply subject of its own (`<inbox>.<n>`), so that an
    // answer that cannot be read still names who gave it.
    let info_replies = format!("{info_inbox}.*");
    let mut infos = client
        .subscribe(info_replies.clone())
        .await
        .map_err(|e| core(&info_replies)(e.into()))?;
    crate::nats::round_trip(client).await?;
    let start = Instant::now();
    client
        .publish_with_reply("$SRV.PING", ping_inbox.clone(), Default::default())
        .await
        .map_err(|e| core("$SRV.PING")(e.into()))?;
    client
        .flush()
        .await
        .map_err(|e| core("$SRV.PING")(e.into()))?;

    let window_end = start + window;
    let limit_end = start + window.max(DISCOVERY_LIMIT);
    let mut pinged: BTreeMap<String, Pinged> = BTreeMap::new();
    // The instance asked INFO with reply `<inbox>.<n>`, by n.
    let mut asked: Vec<String> = Vec::new();
    let mut heard: BTreeMap<String, RuntimeHeard> = BTreeMap::new();
    let mut answered_unreadably: BTreeSet<String> = BTreeSet::new();
    let mut unreadable: Vec<UnreadableAnswer> = Vec::new();
    loop {
        let now = Instant::now();
        let all_heard = pinged
            .keys()
            .all(|id| heard.contains_key(id) || answered_unreadably.contains(id));
        if now >= limit_end || (now >= window_end && all_heard) {
            break;
        }
        // Until the window ends, more PING answers may come; after it, only INFO is awaited.
        let until = if now < window_end && all_heard {
            window_end
        } else {
            limit_end
        };
        tokio::select! {
            _ = tokio::time::sleep_until(until) => {}
            // PING answers are heard until discovery ends, not only in the window: a late one
            // is asked INFO too (and an unreadable one named), never dropped.
            Some(message) = pings.next() => {
                let at = start.elapsed();
                let Some(answer) = read_ping(&message, &pinged, &mut unreadable) else {
                    continue;
                };
                let subject = format!("$SRV.INFO.{}.{}", answer.name, answer.id);
                let reply = format!("{info_inbox}.{}", asked.len());
                client
                    .publish_with_reply(subject.clone(), reply, Default::default())
                    .await
                    .map_err(|e| core(&subject)(e.into()))?;
                client.flush().await.map_err(|e| core(&subject)(e.into()))?;
                asked.push(answer.id.clone());
                pinged.insert(answer.id.clone(), Pinged {
                    service: answer.name,
                    node: answer.metadata.and_then(|m| m.get(NODE_KEY).cloned()),
                    ping_time: at,
                });
            }
            Some(message) = infos.next() => {
                let at = start.elapsed();
                read_info(&message, at, &asked, &pinged, &mut heard, &mut answered_unreadably, &mut unreadable);
            }
        }
    }
    // What came and was not yet read when discovery ended is read now, so that nothing heard is
    // dropped unnamed: a PING answer too late to be asked INFO is unheard (or unreadable).
    while let Some(Some(message)) = futures_util::FutureExt::now_or_never(pings.next()) {
        if let Some(answer) = read_ping(&message, &pinged, &mut unreadable) {
            pinged.insert(
                answer.id.clone(),
                Pinged {
                    service: answer.name,
                    node: answer.metadata.and_then(|m| m.get(NODE_KEY).cloned()),
                    ping_time: start.elapsed(),
                },
            );
        }
    }
    while let Some(Some(message)) = futures_util::FutureExt::now_or_never(infos.next()) {
        let at = start.elapsed();
        read_info(
            &message,
            at,
            &asked,
            &pinged,
            &mut heard,
            &mut answered_unreadably,
            &mut unreadable,
        );
    }
    let waited = start.elapsed();
    let mut unheard: Vec<RuntimeUnheard> = pinged
        .into_iter()
        .filter(|(id, _)| !heard.contains_key(id))
        .map(|(id, p)| RuntimeUnheard {
            service: p.service,
            id,
            node: p.node,
            ping_time: p.ping_time,
        })
        .collect();
    unheard.sort_by(|a, b| (&a.service, &a.node, &a.id).cmp(&(&b.service, &b.node, &b.id)));
    let mut runtimes: Vec<RuntimeHeard> = heard.into_values().collect();
    runtimes.sort_by(|a, b| (&a.service, &a.node, &a.id).cmp(&(&b.service, &b.node, &b.id)));
    Ok(DiscoveryAnswers {
        discovery: Discovery {
            runtimes,
            unheard,
            waited,
        },
        unreadable,
    })
}
