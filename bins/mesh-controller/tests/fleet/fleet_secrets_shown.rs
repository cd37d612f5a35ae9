//! Never shown (the rule “A secret is readable only where it is used”): with a secret set and
//! merged over a real nats-server to real `mesh-host serve` processes, everything a person
//! reads is captured and searched — `plan`, `plan --diff`, the merge preview, `status`, each as
//! text and `--output json`, the status page's `/metrics` and `/status.json`, and the
//! controller's logs at `MESH_LOG=debug` — and holds the keyed digest `<secret sha256:…>`,
//! never the value; a changed secret shows as changed in `--diff`. A hand edit of the file is
//! reported as drift without its content, put back, and kept in no filebucket.
//!
//! What a person reads is what the binary prints and logs, so those commands run the binary;
//! what the test only sets up or looks up — the repository registered, the plans listed, the
//! age key enrolled, the secret set — is called through the controller library in process
//! (`Bed::library`).

use crate::support;
use std::io::{Read as _, Write as _};
use std::process::Output;
use std::time::Duration;
use support::fleet::Bed;
use support::secrets::*;
use support::{wait_for, Repo};

/// What a command printed, both streams.
fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs the controller with `MESH_LOG=debug`, expecting exit `code`: standard output, and
/// both streams (the logs are on standard error).
fn run_logged(bed: &Bed, args: &[&str], code: i32) -> (String, String) {
    let out = bed.command(args).env("MESH_LOG", "debug").output().unwrap();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {}", said(&out));
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        said(&out),
    )
}

/// `GET path` from `base` (`http://ADDR/`): its body.
fn get(base: &str, path: &str) -> String {
    let addr = base
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
    answer
}

fn commit_db(repo: &Repo, creds: &str, message: &str) -> String {
    repo.write(&[
        ("modules/db/module.toml", DB_MODULE),
        ("modules/db/creds", creds),
    ]);
    repo.commit(message)
}

#[test]
fn a_secret_is_shown_only_by_its_keyed_digest_everywhere_a_person_reads() {
    let mut bed = Bed::new(&["a"]);
    for node in ["bus", "a"] {
        bed.start_host(node);
    }
    enroll_age_key(&bed, "a");
    let repo = Repo::new();
    commit_db(&repo, "{{ user }}:{{ password }}\n", "db");
    bed.library().repo_add("cat", repo.path()).unwrap();
    let inventory = "bus-node = \"bus\"\n\n[nodes.bus]\n[nodes.a]\n\n[assignments]\n\
                     base = [\"bus\", \"a\"]\nagent = [\"a\"]\ndb = [\"a\"]\n";
    bed.put_inventory(inventory);
    // Every output a person reads, with what made it.
    let mut outputs: Vec<(String, String)> = Vec::new();
    let (_, logs) = run_logged(&bed, &["merge", "cat"], 0);
    outputs.push(("merge (logs)".into(), logs));

    let password = unique("password-in-clear");
    set_secret(&bed, "db", "password", &password);
    let mesh_key = mesh_secrets::MeshKey::load(&bed.home.path().join("secrets/mesh.key")).unwrap();
    let shown = format!("<secret {}>", mesh_key.digest(password.as_bytes()));

    // The next version of the module, previewed, then rolled out.
    let v2 = commit_db(&repo, "# v2\n{{ user }}:{{ password }}\n", "db v2");
    let (preview, logs) = run_logged(&bed, &["merge", "cat", "--plan-only"], 0);
    assert!(preview.contains("db/file/creds"), "{preview}");
    outputs.push(("merge --plan-only (the preview)".into(), logs));
    let plans = bed.library().plans();
    let open = plans
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["commit"] == v2.as_str())
        .map(|p| p["id"].as_str().unwrap().to_owned())
        .unwrap_or_else(|| panic!("no plan of {v2}: {plans}"));
    for args in [
        vec!["plans", "show", &open, "--preview"],
        vec!["--output", "json", "plans", "show", &open, "--preview"],
        vec!["plan", "a"],
        vec!["plan", "a", "--diff"],
        vec!["--output", "json", "plan", "a"],
        vec!["--output", "json", "plan", "a", "--diff"],
    ] {
        let (_, out) = run_logged(&bed, &args, 0);
        outputs.push((args.join(" "), out));
    }
    let (_, logs) = run_logged(&bed, &["plans", "resume"], 0);
    outputs.push(("plans resume (logs)".into(), logs));
    let creds = bed.root("a").join("etc/db/creds");
    assert_eq!(
        std::fs::read_to_string(&creds).unwrap(),
        format!("# v2\napp:{password}\n")
    );

    // A changed secret: changed in --diff, old digest to new.
    let other = unique("other-password-in-clear");
    set_secret(&bed, "db", "password", &other);
    let changed = format!("<secret {}>", mesh_key.digest(other.as_bytes()));
    let (diff, logs) = run_logged(&bed, &["plan", "a", "--diff"], 0);
    assert!(diff.contains("~ db/file/creds"), "{diff}");
    assert!(diff.contains(&shown) && diff.contains(&changed), "{diff}");
    outputs.push(("plan a --diff, changed".into(), logs));
    let (_, logs) = run_logged(&bed, &["push", "a", "--timeout", "60"], 0);
    outputs.push(("push a (logs)".into(), logs));
    assert_eq!(
        std::fs::read_to_string(&creds).unwrap(),
        format!("# v2\napp:{other}\n")
    );

    // The status page and its metrics, the daemon logging at debug to a file.
    let daemon_log = tempfile::NamedTempFile::new().unwrap();
    let (daemon, url) = start_serve_logged(&bed, daemon_log.path());

    // A hand edit: drift, said without content, put back, kept in no filebucket.
    std::fs::write(&creds, "typed-by-hand\n").unwrap();
    wait_for(
        "the hand edit put back",
        Duration::from_secs(60),
        || match std::fs::read_to_string(&creds) {
            Ok(text) if text == format!("# v2\napp:{other}\n") => Ok(()),
            found => Err(format!("{found:?}")),
        },
    );
    let status = wait_for("drift in status", Duration::from_secs(60), || {
        let out = bed.run(&["--output", "json", "status"]);
        let text = said(&out);
        if text.contains("db/file/creds") && text.contains("not shown") {
            Ok(text)
        } else {
            Err(text)
        }
    });
    outputs.push(("status --output json, drift".into(), status));
    // Drift needs attention: status says so in its exit code.
    let out = bed
        .command(&["status"])
        .env("MESH_LOG", "debug")
        .output()
        .unwrap();
    assert!(said(&out).contains("not shown"), "{}", said(&out));
    outputs.push(("status".into(), said(&out)));
    outputs.push(("/metrics".into(), get(&url, "/metrics")));
    outputs.push(("/status.json".into(), get(&url, "/status.json")));
    outputs.push(("/".into(), get(&url, "/")));
    drop(daemon);
    let logs = std::fs::read_to_string(daemon_log.path()).unwrap();
    assert!(logs.contains("DEBUG"), "the daemon logged at debug: {logs}");
    outputs.push(("serve (logs)".into(), logs));

    for (what, out) in &outputs {
        for value in [&password, &other] {
            assert!(
                !out.contains(value.as_str()),
                "{what} holds a value:\n{out}"
            );
        }
        assert!(
            !out.contains("typed-by-hand"),
            "{what} holds the hand edit:\n{out}"
        );
    }
    let shown_by = |digest: &str| -> Vec<&str> {
        outputs
            .iter()
            .filter(|(_, out)| out.contains(digest))
            .map(|(what, _)| what.as_str())
            .collect()
    };
    for what in [
        "merge --plan-only (the preview)",
        "plan a",
        "plan a --diff",
        "--output json plan a",
    ] {
        assert!(
            shown_by(&shown).contains(&what),
            "{what}: {:?}",
            shown_by(&shown)
        );
    }
    assert!(
        shown_by(&changed).contains(&"status --output json, drift"),
        "{:?}",
        shown_by(&changed)
    );
    let state = bed.state_dir("a");
    assert_eq!(
        files_holding(&state, b"typed-by-hand"),
        Vec::<std::path::PathBuf>::new()
    );
    assert_eq!(
        files_holding(&state, other.as_bytes()),
        Vec::<std::path::PathBuf>::new()
    );
}

/// A child process killed (and reaped) when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `serve --http 127.0.0.1:0` logging at debug into `log`; returns once it says where its
/// page is, with that URL.
fn start_serve_logged(bed: &Bed, log: &std::path::Path) -> (Killed, String) {
    use std::io::BufRead as _;
    let mut child = bed
        .command(&["serve", "--http", "127.0.0.1:0"])
        .env("MESH_LOG", "debug")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let daemon = Killed(child);
    let mut stdout = std::io::BufReader::new(stdout);
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    // Whatever else it prints is read, so it is never told its standard output went away.
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let url = line
        .trim()
        .strip_prefix("serving the status page on ")
        .unwrap_or_else(|| panic!("serve did not say where its page is: {line:?}"))
        .to_owned();
    (daemon, url)
}
