//! Nothing in clear (the rule “A secret is readable only where it is used”): a secret setting
//! and a secret file rolled out over a real nats-server to real `mesh-host serve` processes,
//! the catalogue a real git repository. A byte search for each value finds it nowhere in the
//! home, in the git repository and its history, in the records bucket, the declarations
//! stream or the reports stream — the bus read with an independent client, nats-py — and in
//! the applied files on the hosts' roots. Node B cannot open the ciphertext sent to node A; a
//! corrupted one, or one sealed to another key, fails its file naming module and key and
//! changes nothing; a node with no age key is refused by name.
//!
//! The controller is called as a library in process on the bed's bus (`support::in_process`,
//! `Bed::library`): the secret file encrypted, the age keys enrolled, the secret set, the
//! pushes.

use crate::support;
use mesh_model::declaration::{Declaration, FileSpec, Spec};
use mesh_model::report::{MachineState, Outcome, Report};
use mesh_model::secret::{SealedPiece, SecretValue};
use std::process::Command;
use std::time::Duration;
use support::fleet::{runtime, write, Bed};
use support::git;
use support::secrets::*;

/// The secret `key` of the file `resource` of `declaration`.
fn secret_of(declaration: &Declaration, resource: &str) -> SecretValue {
    let Spec::File(FileSpec {
        sealed: Some(pieces),
        ..
    }) = &declaration.resource(resource).unwrap().spec
    else {
        panic!("{resource} is a file of secrets");
    };
    pieces
        .iter()
        .find_map(|piece| match piece {
            SealedPiece::Secret { value, .. } => Some(value.clone()),
            SealedPiece::Text(_) => None,
        })
        .unwrap()
}

/// `declaration` with the secret of `resource` replaced by `secret`.
fn with_secret(declaration: &Declaration, resource: &str, secret: SecretValue) -> Declaration {
    let mut changed = declaration.clone();
    for r in &mut changed.resources {
        if r.id != resource {
            continue;
        }
        if let Spec::File(FileSpec {
            sealed: Some(pieces),
            ..
        }) = &mut r.spec
        {
            for piece in pieces {
                if let SealedPiece::Secret { value, .. } = piece {
                    *value = secret.clone();
                }
            }
        }
    }
    changed
}

/// Sends `declaration` to its node over the bus and answers the report of it.
fn send_and_hear(bed: &Bed, declaration: &Declaration) -> Report {
    let rt = runtime();
    let bus = bed.controller_bus(&rt);
    let node = declaration.node.clone();
    let digest = declaration.digest();
    rt.block_on(async {
        let mut reports = bus
            .client()
            .subscribe(mesh_bus::subjects::report(&node))
            .await
            .unwrap();
        bus.flush().await.unwrap();
        mesh_bus::jetstream::publish_declaration(
            &bus.jetstream(),
            &node,
            declaration.canonical_json(),
            &unique("crafted"),
        )
        .await
        .unwrap();
        let hear = async {
            use futures_util::StreamExt as _;
            while let Some(message) = reports.next().await {
                if let Ok(report) = Report::from_json(&message.payload) {
                    // The applied report, not the one saying it is under way.
                    if report.declaration == digest && report.machine != MachineState::MidChange {
                        return report;
                    }
                }
            }
            panic!("the reports of `{node}` ended");
        };
        tokio::time::timeout(Duration::from_secs(60), hear)
            .await
            .expect("the host reports the declaration within 60 s")
    })
}

fn failure(report: &Report, resource: &str) -> String {
    let Some(outcome) = report.resources.get(resource) else {
        panic!("{resource} not in {report:?}");
    };
    match outcome {
        Outcome::Failed { reason, .. } => reason.clone(),
        Outcome::Stuck { last_reason, .. } => last_reason.clone(),
        other => panic!("{resource}: {other:?}"),
    }
}

#[test]
fn a_secret_rolled_out_over_the_bus_is_in_clear_only_in_its_applied_files() {
    let mut bed = Bed::new(&["a", "b"]);
    for node in ["bus", "a", "b"] {
        bed.start_host(node);
    }
    enroll_age_key(&bed, "a");

    // The catalogue, a git repository: a template using a secret setting, and a secret file
    // encrypted before its first commit.
    let modules = bed.home.path().join("catalogue/modules");
    let token = unique("token-in-clear");
    write(&modules.join("db/module.toml"), DB_MODULE);
    write(&modules.join("db/creds"), "{{ user }}:{{ password }}\n");
    write(&modules.join("vault/module.toml"), VAULT_MODULE);
    write(&modules.join("vault/token"), &token);
    let token_file = modules.join("vault/token");
    mesh_controller::secrets::encrypt_file(bed.library().home(), &token_file).unwrap();
    let catalogue = bed.home.path().join("catalogue");
    git(&catalogue, &["init", "-q", "-b", "main"]);
    git(&catalogue, &["add", "-A"]);
    git(&catalogue, &["commit", "-q", "-m", "db and vault"]);
    bed.put_inventory(
        "bus-node = \"bus\"\n\n[nodes.bus]\n[nodes.a]\n[nodes.b]\n\n[assignments]\n\
         base = [\"bus\", \"a\", \"b\"]\nagent = [\"a\"]\ndb = [\"a\", \"b\"]\nvault = [\"a\"]\n",
    );

    let password = unique("password-in-clear");
    set_secret(&bed, "db", "password", &password);

    // b has no age key: refused by name, node and module, and sent nothing.
    // (`push` exits 1 with the error.)
    let Err(said) = bed
        .library()
        .push_within(&["b"], &[], Duration::from_secs(60))
    else {
        panic!("b, with no age key, was pushed to");
    };
    assert!(
        said.contains("`b` has no age key") && said.contains("`db`"),
        "{said}"
    );
    assert!(!bed.root("b").join("etc/db/creds").exists());

    enroll_age_key(&bed, "b");
    let results = bed.push_all(120, 0);
    for (node, result) in &results {
        assert!(support::fleet::converged(result), "{node}: {result}");
    }
    let creds = |node: &str| bed.root(node).join("etc/db/creds");
    let token_applied = bed.root("a").join("etc/vault/token");
    for node in ["a", "b"] {
        assert_eq!(
            std::fs::read_to_string(creds(node)).unwrap(),
            format!("app:{password}\n")
        );
    }
    assert_eq!(std::fs::read_to_string(&token_applied).unwrap(), token);

    // The home (the hosts' roots and state directories are under it): the applied files alone.
    let home = bed.home.path();
    assert_eq!(
        files_holding(home, password.as_bytes()),
        vec![creds("a"), creds("b")]
    );
    assert_eq!(
        files_holding(home, token.as_bytes()),
        vec![token_applied.clone()]
    );
    // The git repository and its history, every object read back whole.
    let history = git(&catalogue, &["log", "-p", "--all"]);
    let objects = Command::new("git")
        .arg("-C")
        .arg(&catalogue)
        .args(["cat-file", "--batch-all-objects", "--batch"])
        .output()
        .unwrap();
    assert!(history.contains("$secret"), "{history}");
    for value in [&password, &token] {
        assert!(!history.contains(value.as_str()));
        assert!(!holds(&objects.stdout, value.as_bytes()));
    }

    // The bus, read with nats-py: the records' buckets (the top's and every directory's), the
    // declarations and reports streams; the records' streams read as one.
    let records_streams: Vec<String> =
        std::iter::once(mesh_bus::subjects::RECORDS_BUCKET.to_owned())
            .chain(
                mesh_controller::records::top_directories()
                    .into_iter()
                    .map(mesh_bus::records::directory_bucket),
            )
            .map(|bucket| mesh_bus::subjects::bucket_stream_name(&bucket))
            .collect();
    let dump = tempfile::tempdir().unwrap();
    let mut named: Vec<&str> = vec![
        mesh_bus::subjects::DECLARATIONS_STREAM,
        mesh_bus::subjects::REPORTS_STREAM,
    ];
    named.extend(records_streams.iter().map(String::as_str));
    let mut read = read_streams(&bed, dump.path(), &named).into_iter();
    let (declarations, reports) = (read.next().unwrap(), read.next().unwrap());
    let records = read.fold(
        ("records".to_owned(), Vec::new(), Vec::new()),
        |mut all, (_, whole, messages)| {
            all.1.extend(whole);
            all.2.extend(messages);
            all
        },
    );
    let streams = [records, declarations, reports];
    let mesh_key = mesh_secrets::MeshKey::load(&home.join("secrets/mesh.key")).unwrap();
    let digest = mesh_key.digest(password.as_bytes());
    for (stream, whole, _) in &streams {
        assert!(
            !holds(whole, password.as_bytes()) && !holds(whole, token.as_bytes()),
            "{stream} holds a value in clear"
        );
    }
    // …and what it holds is what the test looks for: the digest, the files' reports.
    assert!(holds(&streams[0].1, digest.as_bytes()), "records");
    assert!(holds(&streams[1].1, digest.as_bytes()), "declarations");
    assert!(holds(&streams[2].1, b"db/file/creds"), "reports");

    // Only a's key opens what a was sent: b's, trying, cannot.
    let sent_to_a = streams[1]
        .2
        .iter()
        .filter_map(|bytes| Declaration::from_json(bytes).ok())
        .rfind(|d| d.node == "a")
        .expect("a's declaration is in the stream");
    let sealed = secret_of(&sent_to_a, "db/file/creds");
    assert_eq!(
        identity(&bed, "a").open(&sealed).unwrap().as_slice(),
        password.as_bytes()
    );
    assert!(identity(&bed, "b").open(&sealed).is_err());
    let token_sealed = secret_of(&sent_to_a, "vault/file/token");
    assert!(identity(&bed, "b").open(&token_sealed).is_err());

    // A corrupted ciphertext, then one sealed to b's key: the file fails naming module and
    // key, and what a holds is unchanged.
    let mut corrupted = sealed.ciphertext.clone().into_bytes();
    let middle = corrupted.len() / 2;
    corrupted[middle] = if corrupted[middle] == b'A' {
        b'B'
    } else {
        b'A'
    };
    let other = mesh_secrets::MeshKey::generate();
    let to_b = SecretValue {
        digest: other.digest(b"another"),
        ciphertext: mesh_secrets::seal::encrypt(&[identity(&bed, "b").recipient()], b"another")
            .unwrap(),
    };
    let bad = [
        SecretValue {
            digest: other.digest(b"corrupted"),
            ciphertext: String::from_utf8(corrupted).unwrap(),
        },
        to_b,
    ];
    for secret in bad {
        let crafted = with_secret(&sent_to_a, "db/file/creds", secret);
        let report = send_and_hear(&bed, &crafted);
        let reason = failure(&report, "db/file/creds");
        assert!(
            reason.contains("`password`") && reason.contains("`db`"),
            "{reason}"
        );
        assert!(!reason.contains(&password), "{reason}");
        assert_eq!(
            std::fs::read_to_string(creds("a")).unwrap(),
            format!("app:{password}\n")
        );
        assert_eq!(std::fs::read_to_string(&token_applied).unwrap(), token);
    }
}
