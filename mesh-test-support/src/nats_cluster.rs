//! A loopback cluster of real `nats-server`s, for tests and benchmarks: the bus as operators
//! run it for a fleet that must outlive one machine.
//!
//! [`NatsCluster::start`] runs `n` servers (3 for the mesh's tests) from the binary
//! [`crate::nats_server::binary`] finds (`$MESH_NATS_SERVER` chooses it), each with its own
//! directory and JetStream store, its own client, route and monitoring ports on 127.0.0.1, every
//! route to every other, and `sync_interval: always` where the server has it (2.10 and later),
//! and waits until every server knows the same JetStream meta leader and the whole cluster.
//!
//! [`NatsCluster::start_with_tls`] has every server serve its clients TLS only, as the mesh's
//! bus does on real machines (the routes between the servers stay on loopback, plain).
//!
//! Then a test kills one ([`NatsCluster::kill`], SIGKILL), starts it again with its store
//! ([`NatsCluster::start_again`]) or with its store deleted ([`NatsCluster::start_empty`]), and
//! asks which server leads a stream ([`NatsCluster::index_of`] on the name the stream's info
//! gives) or which server a client is connected to ([`NatsCluster::index_of_port`]). Dropping
//! the handle kills every server and removes their directories.
//!
//! What it must never do: listen anywhere but loopback, or wait on a sleep — every wait is on a
//! condition the servers report (a greeting, `/jsz`), with a deadline that only bounds a failure.

use crate::nats_server::{
    binary, free_port, io, version_of, NatsServer, NatsServerError, ServerTls, LOG_FILE, USERS_FILE,
};
use mesh_bus::version::ServerVersion;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long [`NatsCluster::wait_until_formed`] waits before it says the cluster did not form.
pub const FORM_TIMEOUT: Duration = Duration::from_secs(60);

/// One server of the cluster: the server and its ports.
#[derive(Debug)]
struct Member {
    server: NatsServer,
    name: String,
    http_port: u16,
}

/// A running loopback cluster; every server is killed when it is dropped.
#[derive(Debug)]
pub struct NatsCluster {
    name: String,
    members: Vec<Member>,
}

/// The ports of one server.
#[derive(Debug, Clone, Copy)]
struct Ports {
    client: u16,
    route: u16,
    http: u16,
}

impl NatsCluster {
    /// Starts `size` clustered JetStream servers on loopback and waits until the cluster has
    /// formed (a meta leader every server knows, every server counted).
    ///
    /// # Errors
    /// [`NatsServerError`] when the binary is missing, a server does not come up or the cluster
    /// does not form within [`FORM_TIMEOUT`] (the message holds the end of each log).
    pub fn start(size: usize) -> Result<NatsCluster, NatsServerError> {
        NatsCluster::start_with_config(size, "")
    }

    /// As [`NatsCluster::start`], each server with `users` (an `authorization` block, as
    /// [`NatsServer::start_with_config`] takes) in its [`USERS_FILE`].
    ///
    /// # Errors
    /// As [`NatsCluster::start`].
    pub fn start_with_config(size: usize, users: &str) -> Result<NatsCluster, NatsServerError> {
        NatsCluster::start_serving(size, users, None)
    }

    /// As [`NatsCluster::start_with_config`], every server serving its clients TLS only with
    /// `tls` (its URLs are then `tls://…`).
    ///
    /// # Errors
    /// As [`NatsCluster::start`] (a certificate a server cannot read is in its log's end).
    pub fn start_with_tls(
        size: usize,
        users: &str,
        tls: &ServerTls,
    ) -> Result<NatsCluster, NatsServerError> {
        NatsCluster::start_serving(size, users, Some(tls))
    }

    fn start_serving(
        size: usize,
        users: &str,
        tls: Option<&ServerTls>,
    ) -> Result<NatsCluster, NatsServerError> {
        let binary = binary()?;
        let version = version_of(&binary)?;
        let name = format!("mesh-{}-{}", std::process::id(), unique());
        let mut last = None;
        for _ in 0..5 {
            let ports = (0..size)
                .map(|_| {
                    Ok(Ports {
                        client: free_port()?,
                        route: free_port()?,
                        http: free_port()?,
                    })
                })
                .collect::<Result<Vec<_>, NatsServerError>>()?;
            match NatsCluster::spawn_all(&binary, version, &name, &ports, users, tls) {
                Ok(members) => {
                    let cluster = NatsCluster { name, members };
                    cluster.wait_until_formed()?;
                    return Ok(cluster);
                }
                // A port taken between choosing it and binding it: choose again.
                Err(error) => last = Some(error),
            }
        }
        Err(last.expect("tried at least once"))
    }

    fn spawn_all(
        binary: &Path,
        version: ServerVersion,
        cluster: &str,
        ports: &[Ports],
        users: &str,
        tls: Option<&ServerTls>,
    ) -> Result<Vec<Member>, NatsServerError> {
        let mut members = Vec::new();
        for (index, own) in ports.iter().enumerate() {
            let dir = tempfile::Builder::new()
                .prefix("mesh-nats-cluster-")
                .tempdir()
                .map_err(io("making its directory"))?;
            std::fs::write(dir.path().join(USERS_FILE), users).map_err(io("writing its users"))?;
            let name = format!("{cluster}-{index}");
            let routes: Vec<u16> = ports.iter().map(|p| p.route).collect();
            let mut text = member_config(&name, cluster, *own, &routes, dir.path(), version);
            if let Some(tls) = tls {
                text.push_str(&tls.config());
            }
            // Each server comes up on its own (its client port greets before its routes are
            // up); the cluster forming is waited for once all are started.
            let server = NatsServer::start_member(
                binary,
                version,
                dir,
                (&name, own.client),
                &text,
                tls.cloned(),
            )?;
            members.push(Member {
                server,
                name,
                http_port: own.http,
            });
        }
        Ok(members)
    }

    /// How many servers it has (running or not).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether it has no server.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The cluster's name (the servers' `cluster { name }`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Server `index`.
    ///
    /// # Panics
    /// When there is no server `index`.
    pub fn server(&self, index: usize) -> &NatsServer {
        &self.members[index].server
    }

    /// Server `index`'s name (`server_name`, as stream and consumer infos name their leader).
    ///
    /// # Panics
    /// When there is no server `index`.
    pub fn server_name(&self, index: usize) -> &str {
        &self.members[index].name
    }

    /// The server named `name` (a stream's leader, as its info says), if it is one of these.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.members.iter().position(|member| member.name == name)
    }

    /// The server listening for clients on `port` (a client's `server_info().port`).
    pub fn index_of_port(&self, port: u16) -> Option<usize> {
        self.members
            .iter()
            .position(|member| member.server.port() == port)
    }

    /// Every server's client URL, comma-separated, as a client given several servers takes it
    /// (`nats://127.0.0.1:a,nats://127.0.0.1:b,…`).
    pub fn urls(&self) -> String {
        self.members
            .iter()
            .map(|member| member.server.url())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Server `index`'s client URL alone.
    ///
    /// # Panics
    /// When there is no server `index`.
    pub fn url(&self, index: usize) -> String {
        self.members[index].server.url()
    }

    /// Kills server `index` at once (SIGKILL), as a machine losing power; its store is kept.
    ///
    /// # Panics
    /// When there is no server `index`.
    pub fn kill(&mut self, index: usize) {
        self.members[index].server.kill();
    }

    /// Starts a killed server `index` again with what its store holds; it rejoins the cluster
    /// (wait for what it must catch up on with [`NatsCluster::wait_until_formed`] and the
    /// stream's own state).
    ///
    /// # Errors
    /// [`NatsServerError`] when it does not come up.
    ///
    /// # Panics
    /// When there is no server `index`.
    pub fn start_again(&mut self, index: usize) -> Result<(), NatsServerError> {
        self.members[index].server.start_again()
    }

    /// Starts a killed server `index` again with its JetStream store deleted, as a machine
    /// replaced with an empty disk: it must catch up from the others.
    ///
    /// # Errors
    /// [`NatsServerError`] when the store cannot be removed or the server does not come up.
    ///
    /// # Panics
    /// When there is no server `index`, or it is running.
    pub fn start_empty(&mut self, index: usize) -> Result<(), NatsServerError> {
        let server = &mut self.members[index].server;
        assert!(
            !server.is_running(),
            "kill server {index} before emptying it"
        );
        let store = server.store_dir();
        if store.exists() {
            std::fs::remove_dir_all(&store).map_err(io("removing its store"))?;
        }
        server.start_again()
    }

    /// What server `index` holds of stream `stream` in its own store, as its `/jsz` says:
    /// `(messages, last sequence)`; `None` when it is not running or holds no such stream.
    ///
    /// # Panics
    /// When there is no server `index`.
    pub fn stream_state(&self, index: usize, stream: &str) -> Option<(u64, u64)> {
        let member = &self.members[index];
        if !member.server.is_running() {
            return None;
        }
        let body = http_get(member.http_port, "/jsz?accounts=true&streams=true")?;
        let page: serde_json::Value = serde_json::from_str(&body).ok()?;
        page.get("account_details")?
            .as_array()?
            .iter()
            .filter_map(|account| account.get("stream_detail")?.as_array())
            .flatten()
            .find(|detail| detail.get("name").and_then(|n| n.as_str()) == Some(stream))
            .and_then(|detail| {
                let state = detail.get("state")?;
                Some((
                    state.get("messages")?.as_u64()?,
                    state.get("last_seq")?.as_u64()?,
                ))
            })
    }

    /// The names of the clients connected to server `index` now, as they gave them
    /// (`NatsOptions::name`: `mesh-controller`, `mesh-host <node>`, …; its `/connz` monitoring
    /// page), one per connection; empty when it is not running or does not answer.
    ///
    /// # Panics
    /// When there is no server `index`.
    pub fn client_names(&self, index: usize) -> Vec<String> {
        let member = &self.members[index];
        if !member.server.is_running() {
            return Vec::new();
        }
        let Some(body) = http_get(member.http_port, "/connz?limit=1024") else {
            return Vec::new();
        };
        let page: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        page.get("connections")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|connection| connection.get("name")?.as_str().map(str::to_owned))
            .collect()
    }

    /// Waits until every running server reports the same JetStream meta leader, that leader is
    /// running, and each counts the cluster's full size (its `/jsz` monitoring page).
    ///
    /// # Errors
    /// [`NatsServerError::NotStarted`] when that is not so within [`FORM_TIMEOUT`], naming what
    /// each server said and the end of its log.
    pub fn wait_until_formed(&self) -> Result<(), NatsServerError> {
        let deadline = Instant::now() + FORM_TIMEOUT;
        loop {
            let said: Vec<Option<MetaCluster>> = self
                .members
                .iter()
                .map(|member| {
                    member
                        .server
                        .is_running()
                        .then(|| meta_cluster(member.http_port))
                        .flatten()
                })
                .collect();
            if self.formed(&said) {
                return Ok(());
            }
            if Instant::now() > deadline {
                let report: Vec<String> = self
                    .members
                    .iter()
                    .zip(&said)
                    .map(|(member, said)| {
                        format!(
                            "{} said {said:?}, log: {}",
                            member.name,
                            log_tail(member.server.dir())
                        )
                    })
                    .collect();
                return Err(NatsServerError::NotStarted {
                    port: self.members.first().map_or(0, |m| m.server.port()),
                    log: format!("the cluster did not form: {}", report.join("; ")),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn formed(&self, said: &[Option<MetaCluster>]) -> bool {
        let mut leader = None;
        for (member, said) in self.members.iter().zip(said) {
            if !member.server.is_running() {
                continue;
            }
            let Some(said) = said else { return false };
            if said.leader.is_empty() || said.cluster_size != self.members.len() {
                return false;
            }
            match &leader {
                None => leader = Some(said.leader.clone()),
                Some(known) if *known == said.leader => {}
                Some(_) => return false,
            }
        }
        leader
            .and_then(|name| self.index_of(&name))
            .is_some_and(|index| self.members[index].server.is_running())
    }
}

/// What a server's `/jsz` says of the JetStream meta group.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MetaCluster {
    leader: String,
    cluster_size: usize,
}

/// Server at `http_port`'s view of the meta group, `None` while it cannot say.
fn meta_cluster(http_port: u16) -> Option<MetaCluster> {
    let body = http_get(http_port, "/jsz")?;
    let page: serde_json::Value = serde_json::from_str(&body).ok()?;
    let meta = page.get("meta_cluster")?;
    Some(MetaCluster {
        leader: meta
            .get("leader")
            .and_then(|leader| leader.as_str())
            .unwrap_or_default()
            .to_owned(),
        cluster_size: meta
            .get("cluster_size")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0) as usize,
    })
}

/// A plain HTTP/1.0 GET of `path` on the loopback monitoring port; its body.
fn http_get(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.lines().next()?;
    status.contains(" 200").then(|| body.to_owned())
}

fn log_tail(dir: &Path) -> String {
    let log = std::fs::read_to_string(dir.join(LOG_FILE)).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(3).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() as u64);
    nanos ^ (NEXT.fetch_add(1, Ordering::Relaxed) << 32)
}

/// One clustered server's configuration: its name, loopback client, route and monitoring ports,
/// routes to every server of the cluster (its own among them: the server ignores a route to
/// itself), JetStream under its own directory with `sync_interval: always` where its version
/// has it, and the users of [`USERS_FILE`].
fn member_config(
    name: &str,
    cluster: &str,
    own: Ports,
    routes: &[u16],
    dir: &Path,
    version: ServerVersion,
) -> String {
    let routes: Vec<String> = routes
        .iter()
        .map(|port| format!("\"nats://127.0.0.1:{port}\""))
        .collect();
    let single = crate::nats_server::server_config(
        own.client,
        &dir.join("store"),
        &dir.join(LOG_FILE),
        version,
    );
    format!(
        "server_name: {name:?}\n\
         {single}\
         http: \"127.0.0.1:{http}\"\n\
         cluster {{\n  name: {cluster:?}\n  listen: \"127.0.0.1:{route}\"\n  \
         routes: [{routes}]\n}}\n",
        http = own.http,
        route = own.route,
        routes = routes.join(", "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_member_routes_to_every_server_on_loopback() {
        let own = Ports {
            client: 4001,
            route: 5001,
            http: 6001,
        };
        let text = member_config(
            "c-0",
            "c",
            own,
            &[5001, 5002, 5003],
            Path::new("/d"),
            ServerVersion::new(2, 15, 1),
        );
        assert!(text.starts_with("server_name: \"c-0\"\nlisten: \"127.0.0.1:4001\"\n"));
        assert!(text.contains("sync_interval: always"), "{text}");
        assert!(text.contains("http: \"127.0.0.1:6001\""), "{text}");
        assert!(
            text.contains(
                "cluster {\n  name: \"c\"\n  listen: \"127.0.0.1:5001\"\n  routes: \
                 [\"nats://127.0.0.1:5001\", \"nats://127.0.0.1:5002\", \
                 \"nats://127.0.0.1:5003\"]\n}\n"
            ),
            "{text}"
        );
    }
}
