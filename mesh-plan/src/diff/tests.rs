//! The diff's tests: the text a person reads, snapshotted, and the data.

use super::*;
use crate::compose::compose;
use crate::fixture;
use mesh_model::inventory::LayerScope;

/// Diffs two declarations and shows the text a person reads and the data.
fn check(sent: Option<&Declaration>, new: &Declaration) -> String {
    let d = diff(sent, new);
    format!(
        "{}---\n{}",
        d.render_text(),
        serde_json::to_string_pretty(&d).unwrap()
    )
}

const MESH: &str = r#"
    //- modules/app/module.toml
    name = "app"
    [settings]
    image = "localhost/app:1"
    port = 80
    level = "info"
    [places.data]
    default = "/srv/app/data"
    [files.config]
    source = "config"
    path = "/etc/app/config"
    template = true
    [files.note]
    source = "note"
    path = "/etc/app/note"
    [containers.server]
    image = "{{ image }}"
    command = ["serve", "--port", "{{ port }}"]
    env = { LEVEL = "{{ level }}" }
    mounts = [{ place = "data", at = "/data" }]
    restart-on = ["config"]
    //- modules/app/config
    port = {{ port }}
    level = {{ level }}
    //- modules/app/note
    a note
    //- inventory.toml
    bus-node = "n"
    [nodes.n]
    [assignments]
    app = ["n"]
"#;

fn composed(layer: Option<Value>) -> Declaration {
    let (catalogue, mut inventory) = fixture::mesh(MESH);
    if let Some(layer) = layer {
        inventory
            .layers
            .set("app", LayerScope::Node("n".into()), layer);
    }
    compose(&catalogue, &inventory, "n").unwrap()
}

/// [`MESH`] with `app` coming from a build whose `note` is `note` (its archive named by a
/// digest made up from the note).
fn archived(note: &str) -> Declaration {
    use mesh_model::build::ArchiveRef;
    use mesh_model::module::EntryKind;
    let (mut catalogue, inventory) = fixture::mesh(MESH);
    let app = catalogue.modules.get_mut("app").unwrap();
    app.tree.entries.insert(
        "note".into(),
        EntryKind::File {
            bytes: note.as_bytes().to_vec(),
            executable: false,
        },
    );
    app.archive = Some(ArchiveRef {
        digest: mesh_model::sha256_digest(format!("archive of {note}").as_bytes()),
        size: 1000 + note.len() as u64,
    });
    compose(&catalogue, &inventory, "n").unwrap()
}

#[test]
fn an_archived_files_content_change_shows_its_digests() {
    let sent = archived("a note\n");
    let new = archived("another note\n");
    let d = diff(Some(&sent), &new);
    assert_eq!(
        d.changed.iter().map(|c| c.id.as_str()).collect::<Vec<_>>(),
        ["app/file/note"]
    );
    insta::assert_snapshot!(check(Some(&sent), &new));
    // The same bytes in another build's archive: nothing to say.
    assert!(diff(Some(&sent), &archived("a note\n")).is_empty());
}

#[test]
fn a_file_moving_into_its_archive_shows_where_it_is_read_from_not_a_content_change() {
    let sent = composed(None);
    let new = archived("a note\n");
    insta::assert_snapshot!(check(Some(&sent), &new));
}

#[test]
fn an_unchanged_node_has_an_empty_diff() {
    let d = composed(None);
    let result = diff(Some(&d), &d);
    assert!(result.is_empty());
    assert_eq!(result.render_text(), "");
}

#[test]
fn a_first_send_adds_everything() {
    insta::assert_snapshot!(check(None, &composed(None)));
}

#[test]
fn every_field_a_serving_container_changes_is_named_and_recreates_it() {
    let sent = composed(None);
    let mut new = sent.clone();
    for resource in &mut new.resources {
        if let Spec::Container(c) = &mut resource.spec {
            c.ports = vec![
                mesh_model::declaration::PortMapping::parse("127.0.0.1:8080:80").expect("a port"),
            ];
            c.network = Some("bridge".into());
            c.user = Some("2345:2345".into());
            c.limits.memory = Some("64m".into());
            c.limits.cpus = Some("0.5".into());
            c.limits.pids = Some(100);
            c.cap_add = vec!["NET_BIND_SERVICE".into()];
            c.cap_drop = vec!["ALL".into()];
            c.read_only_root = true;
            c.workdir = Some("/srv".into());
            c.entrypoint = Some(vec!["/bin/busybox".into()]);
            c.labels = [("team".into(), "media".into())].into();
            c.stop_timeout = Some(20);
            c.restart = Some("on-failure".into());
        }
    }
    let d = diff(Some(&sent), &new);
    for change in &d.changed {
        assert!(change.fields.iter().all(|f| f.recreates), "{change:?}");
    }
    insta::assert_snapshot!(d.render_text());
}

#[test]
fn a_job_names_what_runs_it_again_and_what_does_not() {
    use crate::compose::compose;
    let (catalogue, mut inventory) = fixture::mesh(crate::compose::JOBS_FIXTURE);
    let sent = compose(&catalogue, &inventory, "a").unwrap();
    inventory
        .layers
        .set("svc", LayerScope::Mesh, json!({"level": "debug"}));
    let mut new = compose(&catalogue, &inventory, "a").unwrap();
    for resource in &mut new.resources {
        match &mut resource.spec {
            Spec::Job(job) => {
                job.run.image = "localhost/mesh-busybox:2".into();
                job.run.limits.memory = Some("64m".into());
                job.timeout_secs = Some(30);
            }
            Spec::File(file) => file.content = Some("a = 2\n".into()),
            _ => {}
        }
    }
    let d = diff(Some(&sent), &new);
    let job = d
        .changed
        .iter()
        .find(|c| c.id == "svc/job/migrate")
        .unwrap();
    assert!(job.reruns && !job.recreates, "{job:?}");
    let reruns: Vec<&str> = job
        .fields
        .iter()
        .filter(|f| f.reruns)
        .map(|f| f.field.as_str())
        .collect();
    assert_eq!(reruns, ["env.LEVEL", "image", "rerun-on[svc/file/conf]"]);
    insta::assert_snapshot!(check(Some(&sent), &new));
    // Only its file changed: it runs again, and says why.
    let mut only_file = sent.clone();
    for resource in &mut only_file.resources {
        if let Spec::File(file) = &mut resource.spec {
            file.content = Some("a = 2\n".into());
        }
    }
    let d = diff(Some(&sent), &only_file);
    let job = d
        .changed
        .iter()
        .find(|c| c.id == "svc/job/migrate")
        .unwrap();
    assert_eq!(job.fields.len(), 1);
    assert!(job.reruns, "{job:?}");
}

#[test]
fn a_changed_container_names_the_fields_that_recreate_it() {
    let old = composed(None);
    let new = composed(Some(json!({
        "image": "localhost/app:2",
        "level": "debug",
        "places": {"data": "/tank/app"}
    })));
    insta::assert_snapshot!(check(Some(&old), &new));
}

#[test]
fn resources_added_and_removed_by_id() {
    let old = composed(None);
    let mut new = old.clone();
    new.resources.retain(|r| r.id != "app/file/note");
    let mut extra = old.resource("app/file/note").unwrap().clone();
    extra.id = "app/file/extra".into();
    if let Spec::File(f) = &mut extra.spec {
        f.path = "/etc/app/extra".into();
    }
    let new = Declaration::new("n", {
        let mut r = new.resources;
        r.push(extra);
        r
    });
    insta::assert_snapshot!(check(Some(&old), &new));
}

#[test]
fn a_big_file_change_is_summarised_not_printed() {
    let old: String = (0..10_000).map(|i| format!("line {i}\n")).collect();
    let new = old.replace("line 5000\n", "line five thousand\n")
        + &(0..20).map(|i| format!("extra {i}\n")).collect::<String>();
    let summary = summarise_text(&old, &new);
    insta::assert_json_snapshot!(summary);
}

#[test]
fn texts_that_share_nothing_are_counted_whole() {
    let old: String = (0..5_000).map(|i| format!("old {i}\n")).collect();
    let new: String = (0..5_000).map(|i| format!("new {i}\n")).collect();
    let summary = summarise_text(&old, &new);
    assert_eq!((summary.lines_removed, summary.lines_added), (5_000, 5_000));
    assert_eq!(summary.lines_not_shown, 10_000 - 12);
}

#[test]
fn an_edit_script_keeps_common_lines() {
    let summary = summarise_text("a\nb\nc\nd\n", "a\nx\nc\nd\ne\n");
    assert_eq!(
        summary.excerpt,
        ["@@ -2 +2 @@", "- b", "+ x", "@@ -5 +5 @@", "+ e"]
    );
    assert_eq!((summary.lines_removed, summary.lines_added), (1, 1 + 1));
}
