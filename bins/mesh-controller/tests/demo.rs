//! The demo (issue 16): `mesh-controller demo` runs from nothing, in a temporary home, and each
//! step shows what it is there to show — the guards, not only the plain path.

use std::process::Command;

#[test]
fn the_demo_tells_the_story_step_by_step() {
    let out = Command::new(env!("CARGO_BIN_EXE_mesh-controller"))
        .arg("demo")
        .env_remove("MESH_HOME")
        .env_remove("MESH_BUS")
        .env_remove("MESH_STORE")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Each step's key line, in order.
    let steps = [
        ("== 1.", "node home: backup, base, media, storage, tls"),
        ("== 3.", "laptop: sent"),
        ("== 5.", "managed by mesh"),
        ("== 6.", "unchanged"),
        (
            "== 7.",
            "refused, nothing changed: the new layer would remove 1 key",
        ),
        ("== 8.", "the layer it replaced is kept as revision 1"),
        ("== 9.", "~ media/container/media (recreated)"),
        ("== 10.", "applied    base/file/mesh-conf (content)"),
        ("== 11.", "`hello`: sent `control` (first)"),
        ("== 12.", "stopped at `control`"),
        ("== 13.", "stopped rollouts:"),
        ("== 14.", "applied    base/file/motd (content)"),
        ("== 15.", "mesh-host window run --help"),
    ];
    let mut rest: &str = &text;
    for (step, key_line) in steps {
        let at = rest
            .find(step)
            .unwrap_or_else(|| panic!("no step {step} (in order):\n{text}"));
        let section = &rest[at..];
        let end = section[step.len()..]
            .find("\n== ")
            .map_or(section.len(), |i| i + step.len());
        assert!(
            section[..end].contains(key_line),
            "step {step} does not show `{key_line}`:\n{}",
            &section[..end]
        );
        rest = &section[end..];
    }
    // In the second merge the other nodes kept the first build: only `control` was sent it.
    let twelve = &text[text.find("== 12.").unwrap()..text.find("== 13.").unwrap()];
    assert!(!twelve.contains("sent `home`"), "{twelve}");
    assert!(!twelve.contains("sent `laptop`"), "{twelve}");
}
