//! Parsing and validation of module definitions and catalogues: every problem at once, each
//! naming file, module and key.

use mesh_model::module::{load_catalogue, CatalogueSource, EntryKind};

/// A catalogue from a multi-file fixture: `//- <module>/<path>` starts a file;
/// `//- <module>/<path> -> <target>` is a symbolic link.
fn fixture(text: &str) -> CatalogueSource {
    let mut source = CatalogueSource {
        prefix: "modules".into(),
        ..CatalogueSource::default()
    };
    let mut current: Option<(String, String, String)> = None;
    let flush = |current: &mut Option<(String, String, String)>, source: &mut CatalogueSource| {
        if let Some((module, path, body)) = current.take() {
            source.modules.entry(module).or_default().entries.insert(
                path,
                EntryKind::File {
                    bytes: body.into_bytes(),
                    executable: false,
                },
            );
        }
    };
    for line in text.lines() {
        if let Some(header) = line.strip_prefix("//- ") {
            flush(&mut current, &mut source);
            let (path, link) = match header.split_once(" -> ") {
                Some((path, target)) => (path, Some(target)),
                None => (header, None),
            };
            let (module, rest) = path.split_once('/').expect("module/path");
            let tree = source.modules.entry(module.to_owned()).or_default();
            match link {
                Some(target) => {
                    tree.entries.insert(
                        rest.to_owned(),
                        EntryKind::Symlink {
                            target: target.to_owned(),
                        },
                    );
                }
                None => current = Some((module.to_owned(), rest.to_owned(), String::new())),
            }
        } else if let Some((_, _, body)) = current.as_mut() {
            body.push_str(line);
            body.push('\n');
        }
    }
    flush(&mut current, &mut source);
    source
}

/// Loads a fixture and renders the modules accepted and every diagnostic.
fn check(text: &str) -> String {
    let (catalogue, diagnostics) = load_catalogue(&fixture(text));
    let mut out = format!(
        "accepted: [{}]\n",
        catalogue
            .modules
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    );
    for d in diagnostics {
        out.push_str(&format!("{d}\n"));
    }
    out
}

#[test]
fn a_sound_catalogue_has_no_diagnostics() {
    insta::assert_snapshot!(check(
        r#"
//- base/module.toml
name = "base"
[settings]
motd = "hello"
[files.motd]
source = "files/motd"
path = "/etc/motd"
template = true
//- base/files/motd
{{ motd }}
//- media/module.toml
name = "media"
depends = ["base"]
upgrade = "together"
[settings]
port = 8096
[places.media]
default = "/srv/media"
[files.conf]
source = "conf"
path = "/etc/media.conf"
[containers.media]
image = "localhost/busybox"
command = ["httpd", "-p", "{{port}}"]
mounts = [{ place = "media", at = "/media" }]
restart-on = ["conf"]
[together]
pair = ["file/conf", "container/media"]
//- media/conf
port
"#
    ), @"accepted: [base, media]");
}

#[test]
fn every_problem_of_a_bad_module_is_reported_at_once() {
    insta::assert_snapshot!(check(
        r#"
//- media/module.toml
name = "media"
[settings]
port = 8096
[places.media]
default = "srv/media"
[files.conf]
source = "files/missing.conf"
path = "/etc/media.conf"
mode = "0999"
[files.tmpl]
source = "files/media.tmpl"
path = "/etc/{{ nope }}/media"
template = true
[containers.media]
image = "localhost/busybox"
command = ["httpd", "-p", "{{ prot }}"]
mounts = [{ place = "previews", at = "/previews" }, { place = "media", at = "/previews" }]
restart-on = ["config"]
[memberships.video]
account = "{{ operator }}"
group = "video"
[together]
lonely = ["file/conf"]
//- media/files/media.tmpl
{{ port }} {{ accesses.library }}
//- media/files/link -> /etc/shadow
"#
    ));
}

#[test]
fn malformed_toml_and_unknown_keys_name_the_file() {
    insta::assert_snapshot!(check(
        r#"
//- broken/module.toml
name = "broken
//- typo/module.toml
name = "typo"
[containers.web]
image = "x"
mount = []
//- nodef/README
no module.toml here
//- renamed/module.toml
name = "other"
"#
    ));
}

#[test]
fn unknown_dependencies_and_cycles_are_named() {
    insta::assert_snapshot!(check(
        r#"
//- a/module.toml
name = "a"
depends = ["b"]
//- b/module.toml
name = "b"
depends = ["c"]
//- c/module.toml
name = "c"
depends = ["a"]
//- d/module.toml
name = "d"
depends = ["ghost"]
//- e/module.toml
name = "e"
depends = ["d"]
"#
    ));
}

#[test]
fn a_cycle_is_named_in_the_order_of_its_edges() {
    insta::assert_snapshot!(check(
        r#"
//- a/module.toml
name = "a"
depends = ["c"]
//- b/module.toml
name = "b"
depends = ["a"]
//- c/module.toml
name = "c"
depends = ["b"]
//- self/module.toml
name = "self"
depends = ["self"]
"#
    ));
}

#[test]
fn a_containers_settle_and_health_are_checked_and_drift_is_a_policy() {
    // The rule “A container is applied only when it runs”: `settle` and `health.within` are
    // durations; a health command names a program. The rule “Drift is seen, and reported even when
    // corrected”: `drift` is `correct` or `report`.
    insta::assert_snapshot!(check(
        r#"
//- web/module.toml
name = "web"
drift = "report"
[containers.web]
image = "x"
settle = "2 seconds"
health = { command = [], within = "soon" }
[containers.ok]
image = "x"
settle = "500ms"
health = { command = ["true"], within = "1m" }
//- odd/module.toml
name = "odd"
drift = "ignore"
"#
    ));
}

#[test]
fn a_serving_containers_problems_are_each_said_against_its_key() {
    let said = check(
        r#"
//- web/module.toml
name = "web"
[settings]
port = 8080
[containers.site]
image = "localhost/mesh-busybox:latest"
ports = ["127.0.0.1:{{ port }}:80", "80", "8081:81/sctp", "9000:9001", "9000:9002", "{{ nope }}:80"]
network = "overlay"
user = "Root"
memory = "lots"
cpus = "-1"
pids = 0
cap-add = ["net_admin"]
cap-drop = ["ALL"]
workdir = "srv"
entrypoint = []
labels = { "io.mesh.spec" = "mine" }
stop-timeout = "soon"
restart = "sometimes"
//- host/module.toml
name = "host"
[containers.own]
image = "localhost/mesh-busybox:latest"
network = "host"
ports = ["8096:80"]
cpus = 0.5
"#,
    );
    insta::assert_snapshot!(said);
}

#[test]
fn a_network_is_one_the_module_declares_never_podmans_own_and_never_in_a_together_group() {
    let said = check(
        r#"
//- app/module.toml
name = "app"
[networks.backend]
[networks.host]
[containers.db]
image = "localhost/mesh-busybox:latest"
network = "frontend"
[containers.api]
image = "localhost/mesh-busybox:latest"
network = "backend"
[together]
pair = ["network/backend", "container/api"]
"#,
    );
    for says in [
        "`containers.db.network`: `frontend` is not a network: `bridge`, `host`, or one the module \
         declares",
        "`networks.host`: `host` is podman's own network",
        "`together.pair`: `network/backend`: a network cannot be in a together group",
    ] {
        assert!(said.contains(says), "{says}\n{said}");
    }
    assert!(!said.contains("containers.api"), "{said}");
}

#[test]
fn an_accounts_name_and_ids_are_checked_naming_their_keys() {
    let said = check(
        r#"
//- app/module.toml
name = "app"
[settings]
uid = 2345
[accounts.svc]
uid = "{{ uid }}"
gid = "many"
home = "srv/svc"
[accounts.Bad]
uid = "{{ nope }}"
"#,
    );
    for says in [
        "`accounts.svc.gid`: `many` is not a number",
        "`accounts.svc.home`: `srv/svc` is not an absolute path",
        "`accounts.Bad`: `Bad` is not an account name",
        "`accounts.Bad.uid`: refers to the unknown setting `nope`",
    ] {
        assert!(said.contains(says), "{says}\n{said}");
    }
    assert!(!said.contains("accounts.svc.uid"), "{said}");
}

#[test]
fn a_jobs_problems_are_each_said_against_its_key_and_a_sound_job_is_accepted() {
    let said = check(
        r#"
//- app/module.toml
name = "app"
[files.conf]
source = "conf"
path = "/etc/app/conf"
[jobs.migrate]
image = "localhost/mesh-busybox:latest"
command = ["sh", "-c", "echo {{ nope }}"]
rerun-on = ["conf", "file/absent"]
after = ["job/nothing"]
timeout = "soon"
memory = "lots"
[containers.web]
image = "localhost/mesh-busybox:latest"
after = ["job/migrate", "job/absent"]
//- app/conf
x
//- bad/module.toml
name = "bad"
[jobs.serve]
image = "localhost/mesh-busybox:latest"
ports = ["8080:80"]
stop-timeout = "5s"
[containers.web]
image = "localhost/mesh-busybox:latest"
rerun-on = ["file/conf"]
"#,
    );
    for says in [
        "`jobs.migrate.command[2]`: refers to the unknown setting `nope`",
        "`jobs.migrate.rerun-on[0]`: runs again on `conf`, which is not a file of this module \
         (file/NAME)",
        "`jobs.migrate.rerun-on[1]`: runs again on `file/absent`",
        "`jobs.migrate.after[0]`: `job/nothing` is not a resource of this module",
        "`jobs.migrate.timeout`: `soon` is not a duration",
        "`jobs.migrate.memory`: `lots` is not a memory limit",
        // A job and a container say how they run with the same keys; what only one of them
        // says is named on the other.
        "`jobs.serve.ports`: a job publishes no port",
        "`jobs.serve.stop-timeout`: a job is stopped at its `timeout`",
        "`containers.web.rerun-on`: only a job says this",
        "`containers.web.after[1]`: `job/absent` is not a resource of this module",
    ] {
        assert!(said.contains(says), "{says}\n{said}");
    }
    assert!(!said.contains("containers.web.after[0]"), "{said}");
    let sound = check(
        r#"
//- app/module.toml
name = "app"
[files.conf]
source = "conf"
path = "/etc/app/conf"
[jobs.migrate]
image = "localhost/mesh-busybox:latest"
command = ["sh", "-c", "echo migrated"]
rerun-on = ["file/conf"]
timeout = "30s"
[containers.web]
image = "localhost/mesh-busybox:latest"
after = ["job/migrate"]
[together]
release = ["job/migrate", "container/web"]
//- app/conf
x
"#,
    );
    assert_eq!(sound, "accepted: [app]\n");
}

#[test]
fn a_required_setting_is_one_the_module_declares_and_is_named_once() {
    let said = check(
        r#"
//- db/module.toml
name = "db"
required = ["password", "pasword", "password"]
[settings]
password = ""
"#,
    );
    for says in [
        "`required`: `pasword` is not a setting of the module",
        "`required`: `password` is named twice",
    ] {
        assert!(said.contains(says), "{says}\n{said}");
    }
    let sound = check(
        r#"
//- db/module.toml
name = "db"
required = ["password"]
[settings]
password = ""
"#,
    );
    assert!(sound.starts_with("accepted: [db]\n"), "{sound}");
}

#[test]
fn a_container_or_job_without_an_image_is_named_with_every_other_problem() {
    let said = check(
        r#"
//- app/module.toml
name = "app"
[containers.web]
command = ["httpd"]
memory = "lots"
[jobs.migrate]
command = ["migrate"]
"#,
    );
    for says in [
        "`containers.web.image`: an image is required",
        "`containers.web.memory`: `lots` is not a memory limit",
        "`jobs.migrate.image`: an image is required",
    ] {
        assert!(said.contains(says), "{says}\n{said}");
    }
}
