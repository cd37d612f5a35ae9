//! Webhooks: a push event in each forge's documented format (Forgejo, Gitea, GitHub, GitLab),
//! posted by a real `curl` and signed by `openssl` (not by the code under test), to a real
//! `mesh-controller serve` over a real nats-server, makes one plan, rolled out to a real
//! `mesh-host serve`. What is unsigned, wrongly signed, malformed, for another branch, too
//! long or for no repository is refused as documented and announces nothing.
//!
//! The repositories are registered and listed, and the plans read, through the controller
//! library in process (`Bed::library`); `serve` is the binary, a daemon (its refusal to listen
//! in the clear off loopback is its exit code).

use crate::support;
use serde_json::json;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use support::daemon::{commit_base, plans, start_serve, wait_for_plan_done};
use support::fleet::Bed;
use support::Repo;

pub(crate) const SECRET: &str = "a webhook secret, 32 bytes long!";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forge {
    Forgejo,
    Gitea,
    GitHub,
    GitLab,
}

/// The hex HMAC-SHA256 of `file` keyed by `key`, as `openssl dgst` computes it.
fn hmac_hex(key: &str, file: &Path) -> String {
    let out = Command::new("openssl")
        .args(["dgst", "-sha256", "-hex", "-hmac", key])
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .last()
        .unwrap()
        .to_owned()
}

/// A push of `branch` from `before` to `after`, in the body `forge` documents.
fn push_body(forge: Forge, branch: &str, before: &str, after: &str) -> String {
    let reference = format!("refs/heads/{branch}");
    let author = json!({"name": "Test", "email": "test@example.internal", "username": "test"});
    let commit = json!({
        "id": after, "message": "change\n", "timestamp": "2026-12-03T10:00:00Z",
        "url": format!("https://forge.example/ops/cat/commit/{after}"),
        "author": author, "committer": author,
        "added": [], "removed": [], "modified": ["modules/base/files/hello"],
    });
    let body = match forge {
        Forgejo | Gitea => json!({
            "ref": reference, "before": before, "after": after,
            "compare_url": format!("https://forge.example/ops/cat/compare/{before}...{after}"),
            "commits": [commit], "total_commits": 1, "head_commit": commit,
            "repository": {
                "id": 7, "name": "cat", "full_name": "ops/cat", "private": true,
                "default_branch": "main",
                "clone_url": "https://forge.example/ops/cat.git",
                "owner": {"id": 1, "login": "ops", "username": "ops"},
            },
            "pusher": {"id": 1, "login": "test", "username": "test"},
            "sender": {"id": 1, "login": "test", "username": "test"},
        }),
        GitHub => json!({
            "ref": reference, "before": before, "after": after,
            "created": false, "deleted": false, "forced": false, "base_ref": null,
            "compare": format!("https://github.com/ops/cat/compare/{before}...{after}"),
            "commits": [commit], "head_commit": commit,
            "repository": {
                "id": 7, "node_id": "R_7", "name": "cat", "full_name": "ops/cat",
                "private": true, "default_branch": "main", "master_branch": "main",
                "owner": {"name": "ops", "login": "ops", "id": 1},
            },
            "pusher": {"name": "test", "email": "test@example.internal"},
            "sender": {"login": "test", "id": 1, "type": "User"},
        }),
        GitLab => json!({
            "object_kind": "push", "event_name": "push",
            "before": before, "after": after, "ref": reference, "ref_protected": true,
            "checkout_sha": after, "message": null,
            "user_id": 4, "user_name": "Test", "user_username": "test",
            "user_email": "", "user_avatar": null,
            "project_id": 15,
            "project": {
                "id": 15, "name": "cat", "path_with_namespace": "ops/cat",
                "default_branch": "main",
                "git_http_url": "https://gitlab.example/ops/cat.git",
                "git_ssh_url": "git@gitlab.example:ops/cat.git",
            },
            "commits": [commit], "total_commits_count": 1,
            "repository": {
                "name": "cat", "url": "git@gitlab.example:ops/cat.git",
                "homepage": "https://gitlab.example/ops/cat", "visibility_level": 0,
            },
        }),
    };
    serde_json::to_string_pretty(&body).unwrap()
}
use Forge::{Forgejo, GitHub, GitLab, Gitea};

/// The headers `forge` sends with `body` (in `file`), signed with `secret`.
fn signed_headers(forge: Forge, secret: &str, file: &Path) -> Vec<String> {
    let mac = hmac_hex(secret, file);
    let delivery = "d2b6a2f4-5d7e-4a3c-9a51-0c9f8b1e2a77";
    match forge {
        // Forgejo sends its own headers and Gitea's.
        Forgejo => vec![
            format!("X-Forgejo-Delivery: {delivery}"),
            "X-Forgejo-Event: push".to_owned(),
            "X-Forgejo-Event-Type: push".to_owned(),
            format!("X-Forgejo-Signature: {mac}"),
            format!("X-Gitea-Delivery: {delivery}"),
            "X-Gitea-Event: push".to_owned(),
            format!("X-Gitea-Signature: {mac}"),
        ],
        Gitea => vec![
            format!("X-Gitea-Delivery: {delivery}"),
            "X-Gitea-Event: push".to_owned(),
            "X-Gitea-Event-Type: push".to_owned(),
            format!("X-Gitea-Signature: {mac}"),
        ],
        GitHub => vec![
            format!("X-GitHub-Delivery: {delivery}"),
            "X-GitHub-Event: push".to_owned(),
            "X-GitHub-Hook-ID: 42".to_owned(),
            format!("X-Hub-Signature-256: sha256={mac}"),
            "User-Agent: GitHub-Hookshot/0a1b2c3".to_owned(),
        ],
        GitLab => vec![
            "X-Gitlab-Event: Push Hook".to_owned(),
            format!("X-Gitlab-Token: {secret}"),
            format!("X-Gitlab-Event-UUID: {delivery}"),
            "User-Agent: GitLab/17.5.0".to_owned(),
        ],
    }
}

/// The CA `curl` trusts for the webhooks' HTTPS listener (the bed's).
static CA: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();

/// `curl` with the CA it trusts.
fn curl() -> Command {
    let mut curl = Command::new("curl");
    if let Some(ca) = CA.get() {
        curl.arg("--cacert").arg(ca);
    }
    curl
}

/// `curl` posts `body` with `headers` to `url`: the status code and the answer.
fn post(dir: &Path, url: &str, headers: &[String], body: &[u8]) -> (u16, String) {
    let file = dir.join("body");
    std::fs::write(&file, body).unwrap();
    let answer = dir.join("answer");
    let mut curl = curl();
    curl.args([
        "--silent",
        "--show-error",
        "--max-time",
        "60",
        "--request",
        "POST",
    ])
    .args(["--header", "Content-Type: application/json"])
    .arg("--output")
    .arg(&answer)
    .args(["--write-out", "%{http_code}"]);
    for header in headers {
        curl.args(["--header", header]);
    }
    let out = curl
        .arg("--data-binary")
        .arg(format!("@{}", file.display()))
        .arg(url)
        .output()
        .unwrap();
    assert!(out.status.success(), "curl: {out:?}");
    let code = String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (code, std::fs::read_to_string(answer).unwrap_or_default())
}

/// `curl` gets `url`: the status code.
fn get(url: &str) -> u16 {
    let out = curl()
        .args([
            "--silent",
            "--output",
            "/dev/null",
            "--write-out",
            "%{http_code}",
        ])
        .arg(url)
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// `forge`'s push of `branch` to `after`, rightly signed, posted to `url`.
pub(crate) fn deliver(
    dir: &Path,
    url: &str,
    forge: Forge,
    branch: &str,
    before: &str,
    after: &str,
) -> (u16, String) {
    let body = push_body(forge, branch, before, after);
    let file = dir.join("to-sign");
    std::fs::write(&file, &body).unwrap();
    post(
        dir,
        url,
        &signed_headers(forge, SECRET, &file),
        body.as_bytes(),
    )
}

/// The sequence of the last merge announced on the bus (0: none).
fn last_merge(rt: &tokio::runtime::Runtime, bus: &mesh_bus::NatsBus) -> u64 {
    rt.block_on(async {
        let stream = bus
            .jetstream()
            .get_stream(mesh_bus::subjects::EVENTS_STREAM)
            .await
            .unwrap();
        stream
            .get_last_raw_message_by_subject(mesh_bus::subjects::MERGES)
            .await
            .map_or(0, |message| message.sequence)
    })
}

#[test]
fn a_push_from_each_forge_is_planned_once_and_what_is_refused_announces_nothing() {
    let mut bed = Bed::new(&[]);
    bed.start_host("bus");
    let repo = Repo::new();
    let mut before = commit_base(&repo, "v0\n");
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path();

    // A secret file others may read is refused, and nothing is registered.
    let secret_file = dir.join("cat.secret");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o644)).unwrap();
    // `repo add cat PATH --hook-secret-file FILE`, through the library (it exits 1 refused).
    let add = || {
        bed.library().repo_add_with(
            "cat",
            repo.path(),
            &mesh_controller::catalogue::AddOptions {
                modules_dir: "modules".to_owned(),
                hook_secret_file: Some(secret_file.clone()),
                ..Default::default()
            },
        )
    };
    let Err(said) = add() else {
        panic!("a secret file others may read was taken");
    };
    assert!(
        said.contains("readable by others") && !said.contains(SECRET),
        "{said}"
    );
    assert_eq!(bed.library().repo_list().unwrap(), json!([]));
    std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    add().unwrap();

    // Not on a non-loopback address in the clear: refused, naming it, before anything runs.
    let refused = bed.run(&["serve", "--hooks", "0.0.0.0:0"]);
    assert_eq!(
        refused.status.code(),
        Some(64),
        "a usage error: {refused:?}"
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("--hooks 0.0.0.0:0: not a loopback address, and no TLS given"),
        "{said}"
    );

    // A repository registered by URL: the daemon fetches what a webhook names into its clone.
    let upstream = Repo::new();
    commit_base(&upstream, "upstream\n");
    let url = format!("file://{}", upstream.path().display());
    bed.library()
        .repo_add_with(
            "far",
            Path::new(&url),
            &mesh_controller::catalogue::AddOptions {
                branch: Some("main".to_owned()),
                modules_dir: "modules".to_owned(),
                hook_secret_file: Some(secret_file.clone()),
                ..Default::default()
            },
        )
        .unwrap();

    // The webhooks' own listener over HTTPS, with the bed's certificate.
    CA.set(bed.pki.ca_file.clone()).unwrap();
    let (_daemon, lines) = start_serve(
        &bed,
        &[
            "--http",
            "127.0.0.1:0",
            "--hooks",
            "127.0.0.1:0",
            "--hooks-cert",
            bed.pki.server_cert.to_str().unwrap(),
            "--hooks-key",
            bed.pki.server_key.to_str().unwrap(),
        ],
        |lines| lines.len() == 2,
    );
    let page = lines[0]
        .strip_prefix("serving the status page on ")
        .unwrap_or_else(|| panic!("{lines:?}"))
        .to_owned();
    let hooks = lines[1]
        .strip_prefix("serving the webhooks on ")
        .and_then(|url| url.strip_suffix("hooks/NAME"))
        .unwrap_or_else(|| panic!("{lines:?}"))
        .to_owned();
    let rt = support::fleet::runtime();
    let bus = bed.controller_bus(&rt);
    support::fleet::wait_for_merge_consumer(&rt, &bus);

    // The webhooks' own listener serves nothing else.
    for path in ["", "metrics", "status.json"] {
        assert_eq!(get(&format!("{hooks}{path}")), 404, "{path}");
    }
    assert_eq!(get(&format!("{page}metrics")), 200);
    assert!(hooks.starts_with("https://127.0.0.1:"), "{hooks}");

    // Each forge's push, rightly signed, to either listener: one plan each.
    let deliveries = [
        (Forgejo, &hooks),
        (Gitea, &page),
        (GitHub, &hooks),
        (GitLab, &hooks),
    ];
    let mut last = None;
    for (made, (forge, base)) in deliveries.into_iter().enumerate() {
        let after = commit_base(&repo, &format!("pushed through {forge:?}\n"));
        let url = format!("{base}hooks/cat");
        let (code, answer) = deliver(dir, &url, forge, "main", &before, &after);
        assert_eq!(code, 202, "{forge:?}: {answer}");
        assert!(
            answer.starts_with("announced: `cat` main at "),
            "{forge:?}: {answer}"
        );
        let done = wait_for_plan_done(&bed, &after);
        assert_eq!(done.len(), made + 1, "{forge:?}: {done:?}");
        last = Some((url, before, after.clone()));
        before = after;
    }
    assert_eq!(
        std::fs::read_to_string(bed.root("bus").join("etc/mesh/hello")).unwrap(),
        "pushed through GitLab\n"
    );

    // The same event delivered again: answered, and no new plan.
    let merges = last_merge(&rt, &bus);
    let (url, last_before, last_after) = last.unwrap();
    let (code, answer) = deliver(dir, &url, GitLab, "main", &last_before, &last_after);
    assert_eq!(code, 202, "{answer}");
    assert!(
        answer.starts_with("already announced: `cat` main at "),
        "{answer}"
    );
    assert_eq!(last_merge(&rt, &bus), merges);
    assert_eq!(plans(&bed).len(), 4);

    // A new commit, refused every way: nothing is announced.
    let next = commit_base(&repo, "refused\n");
    let body = push_body(GitHub, "main", &before, &next);
    let file = dir.join("to-sign");
    std::fs::write(&file, &body).unwrap();
    let wrong = signed_headers(GitHub, "another secret", &file);
    let (code, answer) = post(dir, &url, &wrong, body.as_bytes());
    assert_eq!(code, 401, "wrongly signed: {answer}");
    assert!(
        answer.contains("GitHub signature does not match"),
        "{answer}"
    );
    let unsigned = ["X-GitHub-Event: push".to_owned()];
    let (code, answer) = post(dir, &url, &unsigned, body.as_bytes());
    assert_eq!(code, 401, "unsigned: {answer}");
    assert!(answer.starts_with("unsigned"), "{answer}");
    let gitlab = push_body(GitLab, "main", &before, &next);
    let wrong_token = [
        "X-Gitlab-Event: Push Hook".to_owned(),
        "X-Gitlab-Token: not it".to_owned(),
    ];
    assert_eq!(post(dir, &url, &wrong_token, gitlab.as_bytes()).0, 401);
    let (code, answer) = deliver(dir, &url, Forgejo, "dev", &before, &next);
    assert_eq!((code, answer.trim()), (202, "ignored: branch dev"));
    std::fs::write(&file, "{\"ref\": \"refs/heads/main\"").unwrap();
    let headers = signed_headers(Gitea, SECRET, &file);
    let (code, answer) = post(dir, &url, &headers, b"{\"ref\": \"refs/heads/main\"");
    assert_eq!(code, 400, "malformed: {answer}");
    assert!(answer.starts_with("malformed"), "{answer}");
    // 10 MiB: a push padded with blanks, rightly signed; refused for its length alone.
    let mut long = body.clone().into_bytes();
    long.resize(10 * 1024 * 1024, b' ');
    std::fs::write(&file, &long).unwrap();
    let headers = signed_headers(GitHub, SECRET, &file);
    let (code, answer) = post(dir, &url, &headers, &long);
    assert_eq!(code, 413, "10 MiB: {answer}");
    let (code, answer) = deliver(
        dir,
        &format!("{hooks}hooks/nothing"),
        GitHub,
        "main",
        &before,
        &next,
    );
    assert_eq!(code, 404, "no such repository: {answer}");
    assert!(
        !answer.contains("cat"),
        "the answer lists no repository: {answer}"
    );
    assert_eq!(
        last_merge(&rt, &bus),
        merges,
        "a refused webhook announced a merge"
    );
    assert_eq!(plans(&bed).len(), 4);

    // The same commit, rightly signed: planned.
    let (code, answer) = deliver(dir, &url, GitHub, "main", &before, &next);
    assert_eq!(code, 202, "{answer}");
    assert_eq!(wait_for_plan_done(&bed, &next).len(), 5);

    // A push to the repository registered by URL: its commit is fetched, then planned.
    let pushed = commit_base(&upstream, "upstream, pushed\n");
    let far = format!("{hooks}hooks/far");
    let (code, answer) = deliver(dir, &far, Forgejo, "main", &"0".repeat(40), &pushed);
    assert_eq!(code, 202, "{answer}");
    assert_eq!(wait_for_plan_done(&bed, &pushed).len(), 6);
}
