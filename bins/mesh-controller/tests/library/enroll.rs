//! Enrolling a node's NKey (the rule “Secrets never leave their owner”): the users file the
//! controller composes names an enrolled node by its public key and permissions only, a node not
//! yet enrolled by its password; an enrolled node's password is dropped from the records;
//! re-enrolling replaces the key and says so; an unknown node or a malformed key (a seed given by
//! mistake too) is refused and changes nothing. The library in process, and the command line as a
//! person reads it: `node enroll`'s answers and refusals, and its exit codes, as a snapshot.

use crate::support;
use mesh_controller::bus;
use mesh_controller::bus::BusConfig;

use mesh_controller::Home;
use support::Mesh;

/// A public key that is the same on every run (its seed derived from a fixed text), so the
/// snapshots hold it.
fn fixed_key(name: &str) -> (String, String) {
    let seed = mesh_bus::keys::derived_user_seed(name, "enroll test");
    let key = mesh_bus::keys::public_key_of_seed(&seed).unwrap();
    (seed, key)
}

fn users(home: &Home) -> String {
    bus::users_text(home, &home.catalogue().unwrap(), &BusConfig::default()).unwrap()
}

/// The credential lines of `user`'s entry in a users file: (`nkey`, `password`).
fn credential_of(users: &str, user: &str) -> (Option<String>, Option<String>) {
    let lines: Vec<&str> = users.lines().map(str::trim).collect();
    let quoted = format!("\"{user}\"");
    let at = lines
        .iter()
        .position(|line| *line == format!("user: {quoted}") || *line == format!("# user: {quoted}"))
        .unwrap_or_else(|| panic!("no user {user} in\n{users}"));
    let value = |key: &str| {
        lines[at + 1]
            .strip_prefix(key)
            .map(|v| v.trim().trim_matches('"').to_owned())
    };
    (value("nkey:"), value("password:"))
}

#[test]
fn an_enrolled_node_is_in_the_users_file_by_its_key_and_its_password_is_dropped() {
    let mesh = Mesh::example();
    let home = Home::new(mesh.home());
    // Before: every node on a password, kept in the records.
    let before = users(&home);
    for node in ["control", "home", "laptop"] {
        let (nkey, password) = credential_of(&before, &format!("node-{node}"));
        assert!(nkey.is_none() && password.is_some(), "{node}:\n{before}");
    }
    let home_password = credential_of(&before, "node-home").1.unwrap();
    assert!(home.get("bus/passwords/home").unwrap().is_some());
    let inventory = home.inventory().unwrap();
    assert_eq!(
        bus::nodes_on_passwords(&home, &inventory).unwrap(),
        ["control", "home", "laptop"]
    );

    let (seed, key) = fixed_key("home");
    let enrolled = bus::enroll(&home, "home", &key).unwrap();
    assert_eq!(enrolled.public_key, key);
    assert_eq!(enrolled.replaced, None);
    assert!(enrolled.password_dropped);
    assert_eq!(home.get("bus/passwords/home").unwrap(), None);
    assert_eq!(
        home.get("bus/nkeys/home").unwrap(),
        Some(format!("{key}\n").into_bytes())
    );

    let after = users(&home);
    assert_eq!(
        credential_of(&after, "node-home"),
        (Some(key.clone()), None)
    );
    assert!(!after.contains(&home_password), "the dropped password");
    assert!(!after.contains(seed.trim()));
    for node in ["control", "laptop"] {
        let (nkey, password) = credential_of(&after, &format!("node-{node}"));
        assert!(nkey.is_none() && password.is_some(), "{node}:\n{after}");
    }
    // The same permissions as before: only the credential changed.
    let permissions = mesh_bus::grants::permissions_in_config;
    assert_eq!(
        permissions(&after)["node-home"],
        permissions(&before)["node-home"]
    );
    assert_eq!(
        bus::nodes_on_passwords(&home, &inventory).unwrap(),
        ["control", "laptop"]
    );
    // A node enrolled has no password to give out.
    let refused = bus::node_password(&home, "home").unwrap_err().to_string();
    assert!(refused.contains("enrolled with an NKey"), "{refused}");

    // Enrolled again with a new key: the old one is gone from the file, and said replaced.
    let (_, new_key) = fixed_key("home, again");
    let again = bus::enroll(&home, "home", &new_key).unwrap();
    assert_eq!(again.replaced.as_deref(), Some(key.as_str()));
    assert!(!again.password_dropped);
    let replaced = users(&home);
    assert_eq!(credential_of(&replaced, "node-home"), (Some(new_key), None));
    assert!(!replaced.contains(&key));
}

#[test]
fn an_unknown_node_or_a_malformed_key_is_refused_and_changes_nothing() {
    let mesh = Mesh::example();
    let home = Home::new(mesh.home());
    users(&home); // every node's password made, as a first push would
    let before = Mesh::snapshot_tree(mesh.home());
    let (seed, key) = fixed_key("nobody");

    let unknown = bus::enroll(&home, "nobody", &key).unwrap_err().chain_line();
    assert!(
        unknown.contains("`nobody` is not a node of this mesh"),
        "{unknown}"
    );
    let malformed = bus::enroll(&home, "home", "UNOTAKEY")
        .unwrap_err()
        .chain_line();
    assert!(
        malformed.contains("enrolling `home`")
            && malformed.contains("is not an NKey user public key"),
        "{malformed}"
    );
    let a_seed = bus::enroll(&home, "home", &seed).unwrap_err().chain_line();
    assert!(a_seed.contains("that is an NKey seed"), "{a_seed}");
    assert!(
        !a_seed.contains(seed.trim()),
        "a seed is never echoed: {a_seed}"
    );
    assert!(
        Mesh::snapshot_tree(mesh.home()) == before,
        "a refused enrollment changed the home"
    );
}

#[test]
fn node_enroll_as_a_person_reads_it() {
    let mesh = Mesh::example();
    users(&Home::new(mesh.home())); // every node's password made, as `broker users` makes them
    let (_, key) = fixed_key("laptop");
    let (_, other) = fixed_key("laptop, again");
    let first = mesh.expect(&["node", "enroll", "laptop", &key], 0);
    let again = mesh.expect(&["node", "enroll", "laptop", &key], 0);
    let replaced = mesh.expect(&["node", "enroll", "laptop", &other], 0);
    let json = mesh.expect(&["node", "enroll", "laptop", &key, "--output", "json"], 0);
    let unknown = mesh.run(&["node", "enroll", "nobody", &key]);
    let bad = mesh.run(&["node", "enroll", "laptop", "UNOTAKEY"]);
    assert_eq!((unknown.code, bad.code), (1, 1));
    insta::assert_snapshot!(format!(
        "$ node enroll laptop KEY\n{first}\n$ node enroll laptop KEY (again)\n{again}\n\
         $ node enroll laptop OTHER\n{replaced}\n$ node enroll laptop KEY --output json\n{json}\n\
         $ node enroll nobody KEY\n{}\n$ node enroll laptop UNOTAKEY\n{}",
        unknown.stderr, bad.stderr
    ));
}
