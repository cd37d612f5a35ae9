//! A module assigned by a selector, as a person runs it: `backup = { select = "role=edge" }`
//! sends the module to every node labelled `role = "edge"` and to no other; a node added to the
//! inventory with that label is pending with the module (`status` exits 3, `plan --all --diff`
//! names it) until the next `push --all` sends it, with no list to edit. A selector naming a
//! label no node has is refused, naming it. The book's example, the binary run on it.

use crate::plan_all::{edit_inventory, expect, run};
use std::path::Path;

fn has_backup(home: &Path, node: &str) -> bool {
    home.join("roots")
        .join(node)
        .join("usr/local/bin/mesh-backup")
        .is_file()
}

#[test]
fn a_module_assigned_by_selector_reaches_every_labelled_node_and_a_node_added_with_the_label() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    expect(&home, &["init", "--example"], 0);
    // Without the example's container module: its fixed host port is the one machine's.
    edit_inventory(&home, |text| {
        text.replace("media = [\"home\"]\n", "")
            .replace(
                "[nodes.control]\n[nodes.home]\n",
                "[nodes.control]\nlabels = { role = \"edge\" }\n[nodes.home]\n",
            )
            .replace(
                "backup = [\"control\", \"home\"]",
                "backup = { select = \"role=edge\" }",
            )
    });
    expect(&home, &["check"], 0);
    expect(&home, &["push", "--all"], 0);
    assert!(has_backup(&home, "control"));
    assert!(!has_backup(&home, "home"), "home has no label role=edge");
    expect(&home, &["status"], 0);

    // A node added with the label: pending with the module until the next push sends it.
    edit_inventory(&home, |text| {
        text.replace(
            "[nodes.laptop]\n",
            "[nodes.laptop]\n[nodes.spare]\nlabels = { role = \"edge\" }\n",
        )
        .replace(
            "base = [\"control\", \"home\", \"laptop\"]",
            "base = [\"control\", \"home\", \"laptop\", \"spare\"]",
        )
    });
    let status = expect(&home, &["status"], 3);
    assert!(status.contains("spare"), "{status}");
    let diff = expect(
        &home,
        &["plan", "--all", "--diff", "--detailed-exitcode"],
        2,
    );
    let spare: Vec<&str> = diff
        .lines()
        .skip_while(|line| !line.starts_with("spare: "))
        .collect();
    assert!(
        spare.iter().any(|line| line.contains("backup")),
        "spare's diff names no backup resource:\n{diff}"
    );
    expect(&home, &["push", "--all"], 0);
    assert!(has_backup(&home, "spare"));
    assert!(!has_backup(&home, "home"));
    expect(&home, &["status"], 0);

    // A selector naming a label no node has: refused, naming it; nothing is sent.
    edit_inventory(&home, |text| {
        text.replace(
            "backup = { select = \"role=edge\" }",
            "backup = { select = \"rack=r7\" }",
        )
    });
    let out = run(&home, &["check"], b"");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("rack"), "{said}");
}
