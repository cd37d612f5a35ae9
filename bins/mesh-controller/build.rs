//! Embeds the book's example mesh (`book/example`) so `init --example` and `demo` work from
//! the binary alone.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let example = manifest.join("../../book/example");
    println!("cargo:rerun-if-changed={}", example.display());
    let mut files = Vec::new();
    collect(&example, &example, &mut files);
    files.sort();
    let mut code = String::from("/// The example mesh: (path relative to the example, bytes).\npub(crate) const EXAMPLE: &[(&str, &[u8])] = &[\n");
    for (relative, absolute) in files {
        println!("cargo:rerun-if-changed={}", absolute.display());
        writeln!(
            code,
            "    ({relative:?}, include_bytes!({:?})),",
            absolute.display().to_string()
        )
        .expect("writing to a string");
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it")).join("example.rs");
    std::fs::write(out, code).expect("writing the embedded example");
}

fn collect(base: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    for entry in std::fs::read_dir(dir).expect("the example directory is readable") {
        let path = entry.expect("readable entry").path();
        if path.is_dir() {
            collect(base, &path, out);
        } else {
            let relative = path
                .strip_prefix(base)
                .expect("under the base")
                .to_str()
                .expect("UTF-8 names in the example")
                .to_owned();
            let absolute = path.canonicalize().expect("canonical path");
            out.push((relative, absolute));
        }
    }
}
