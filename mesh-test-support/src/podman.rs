//! Podman for tests, a sandbox: configured from `scripts/podman-env.sh`, containers named per
//! test and removed when the test ends, and container resources running the locally imported
//! busybox image.

use mesh_apply::{ContainerStatus, Podman, PodmanConfig};
use mesh_model::declaration::{resource_id, ContainerSpec, JobSpec, Mount, Resource, Spec};
use std::path::Path;
use std::process::Command;

/// The variables `scripts/podman-env.sh` exports; a test without them fails, saying so.
const NEEDED: [&str; 4] = [
    "CONTAINERS_CONF",
    "CONTAINERS_STORAGE_CONF",
    "MESH_PODMAN_ULIMITS",
    "MESH_TEST_IMAGE",
];

/// The podman configuration tests use: the environment's, with no grace period on stop (busybox
/// `sleep` as PID 1 ignores SIGTERM).
pub fn podman_config() -> PodmanConfig {
    for var in NEEDED {
        if std::env::var_os(var).is_none() {
            panic!(
                "podman is not configured for the tests: `{var}` is not set. Run \
                 `source scripts/podman-env.sh` in this shell first, or the test command \
                 `scripts/test`"
            );
        }
    }
    PodmanConfig {
        stop_timeout_secs: 0,
        ..PodmanConfig::from_environment()
    }
}

/// The settle time of the tests' containers (the rule “A container is applied only when it runs”):
/// short, by configuration. A container that exits at once has exited long before it.
pub const SETTLE_MS: u64 = 500;

/// The locally imported busybox image.
pub fn image() -> String {
    podman_config();
    std::env::var("MESH_TEST_IMAGE").unwrap()
}

/// Removes its containers (whoever made them) when dropped.
pub struct Containers {
    names: Vec<String>,
}

impl Containers {
    /// A unique name per test and process: `mesh-test-<what>-<pid>`.
    pub fn name(&mut self, what: &str) -> String {
        let name = format!("mesh-test-{what}-{}", std::process::id());
        remove(&name);
        self.names.push(name.clone());
        name
    }

    /// None yet.
    pub fn new() -> Self {
        Containers { names: Vec::new() }
    }
}

impl Default for Containers {
    fn default() -> Self {
        Containers::new()
    }
}

impl Drop for Containers {
    fn drop(&mut self) {
        for name in &self.names {
            remove(name);
        }
    }
}

/// A prefix of container names unique to this run and call (`mesh-test-<pid>-<n>-`); every
/// container whose name starts with it is removed when it is dropped, whether or not the test
/// named it, and whether or not the test passed.
pub struct RunPrefix(pub String);

impl Default for RunPrefix {
    fn default() -> Self {
        RunPrefix::new()
    }
}

impl RunPrefix {
    /// A prefix no other call of this run has.
    pub fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        RunPrefix(format!("mesh-test-{}-{n}-", std::process::id()))
    }

    /// The names of the containers podman has under this prefix.
    pub fn containers(&self) -> Vec<String> {
        let output = Command::new("podman")
            .args([
                "ps",
                "--all",
                "--format",
                "{{.Names}}",
                "--filter",
                &format!("name=^{}", self.0),
            ])
            .output()
            .expect("podman runs");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|name| name.starts_with(&self.0))
            .map(str::to_owned)
            .collect()
    }
}

impl Drop for RunPrefix {
    fn drop(&mut self) {
        for name in self.containers() {
            remove(&name);
        }
    }
}

/// Removes the container named `name`, if there is one.
pub fn remove(name: &str) {
    let _ = Command::new("podman")
        .args(["rm", "--force", "--time", "0", name])
        .output();
}

/// What podman says of the container named `name`.
pub fn status(root: &Path, name: &str) -> Option<ContainerStatus> {
    Podman::new(podman_config(), root).inspect(name).unwrap()
}

/// How many times podman started the container with this id (its `start` events).
pub fn starts(id: &str) -> usize {
    let output = Command::new("podman")
        .args([
            "events",
            "--stream=false",
            "--filter",
            &format!("container={id}"),
            "--filter",
            "event=start",
            "--format",
            "{{.Status}}",
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| l.trim() == "start")
        .count()
}

/// The host directories mounted into the container named `name`.
pub fn mount_sources(name: &str) -> Vec<String> {
    let output = Command::new("podman")
        .args([
            "container",
            "inspect",
            "--format",
            "{{range .Mounts}}{{.Source}}\n{{end}}",
            name,
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Runs a container the mesh did not make (no labels).
pub fn run_foreign(name: &str) -> String {
    let mut command = Command::new("podman");
    command.args(["run", "--detach", "--name", name]);
    command.args(
        std::env::var("MESH_PODMAN_ULIMITS")
            .unwrap()
            .split_whitespace(),
    );
    command.args([&image(), "sleep", "1000"]);
    let output = command.output().unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A container resource `<module>/container/<name>` running `sleep`.
pub fn container(module: &str, name: &str, machine_name: &str) -> Resource {
    Resource {
        id: resource_id(module, "container", name),
        module: module.to_owned(),
        together: None,
        after: Vec::new(),
        spec: Spec::Container(Box::new(ContainerSpec {
            name: machine_name.to_owned(),
            image: image(),
            command: vec!["sleep".to_owned(), "1000".to_owned()],
            env: Default::default(),
            mounts: Vec::new(),
            restart_on: Vec::new(),
            settle_ms: Some(SETTLE_MS),
            health: None,
            ..ContainerSpec::default()
        })),
    }
}

/// A job resource `<module>/job/<name>` running `sh -c SCRIPT` in the busybox image, as
/// `machine_name` while it runs.
pub fn job(module: &str, name: &str, machine_name: &str, script: &str) -> Resource {
    Resource {
        id: resource_id(module, "job", name),
        module: module.to_owned(),
        together: None,
        after: Vec::new(),
        spec: Spec::Job(Box::new(JobSpec {
            run: ContainerSpec {
                name: machine_name.to_owned(),
                image: image(),
                command: vec!["sh".to_owned(), "-c".to_owned(), script.to_owned()],
                ..ContainerSpec::default()
            },
            rerun_on: Vec::new(),
            timeout_secs: None,
        })),
    }
}

/// The job spec of `resource`, which must be a job.
pub fn job_mut(resource: &mut Resource) -> &mut JobSpec {
    match &mut resource.spec {
        Spec::Job(job) => job,
        other => panic!("not a job: {other:?}"),
    }
}

/// The container spec of `resource`, which must be a container.
pub fn spec_mut(resource: &mut Resource) -> &mut ContainerSpec {
    match &mut resource.spec {
        Spec::Container(spec) => spec,
        other => panic!("not a container: {other:?}"),
    }
}

/// `resource` with the place `data`'s `source` mounted at `at`.
pub fn with_mount(mut resource: Resource, source: &str, at: &str) -> Resource {
    spec_mut(&mut resource).mounts.push(Mount {
        place: "data".to_owned(),
        source: source.to_owned(),
        at: at.to_owned(),
        read_only: false,
    });
    resource
}

/// `resource` restarted when the file `file_id` changes (and after it).
pub fn restarting_on(mut resource: Resource, file_id: &str) -> Resource {
    spec_mut(&mut resource).restart_on.push(file_id.to_owned());
    resource.after.push(file_id.to_owned());
    resource
}
