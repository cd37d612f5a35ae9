//! The ten modules a fleet at scale rolls out, `m00` to `m09`, three small files each: shared
//! by `tests/fleet_scale.rs` and the benches (`benches/support` includes it by `#[path]`).

/// How many modules.
pub const MODULES: usize = 10;

/// The modules' names: `m00` to `m09`.
pub fn names() -> Vec<String> {
    (0..MODULES).map(|m| format!("m{m:02}")).collect()
}

/// The ten modules' files (`modules/mNN/…`, paths and texts), three small files each saying
/// `version`: `/etc/mNN/one`, `two` and `three` on a node.
pub fn module_files(version: &str) -> Vec<(String, String)> {
    let mut files = Vec::new();
    for module in names() {
        let mut definition = format!("name = \"{module}\"\n");
        for file in ["one", "two", "three"] {
            definition.push_str(&format!(
                "\n[files.{file}]\nsource = \"files/{file}\"\npath = \"/etc/{module}/{file}\"\n"
            ));
            files.push((
                format!("modules/{module}/files/{file}"),
                format!("{module} {file} {version}\n"),
            ));
        }
        files.push((format!("modules/{module}/module.toml"), definition));
    }
    files
}
