//! What the filebucket keeps ([`mesh_apply::filebucket`]), for people: `mesh-host drift list`
//! and `mesh-host drift show ID`, which prints how a kept hand edit differs from the file now.
//!
//! Start at [`render_list`] and [`render_show`].

use mesh_apply::filebucket::{BucketIndex, Kept};
use std::fmt::Write as _;
use std::path::Path;

/// `drift list` for people: one line per kept hand edit, newest first.
pub fn render_list(index: &BucketIndex) -> String {
    if index.entries.is_empty() {
        return "the filebucket keeps no hand edit\n".to_owned();
    }
    let mut out = String::new();
    for kept in index.entries.iter().rev() {
        let _ = writeln!(
            out,
            "{}  {}  {} bytes  kept {}  ({})",
            kept.id,
            kept.path,
            kept.size,
            mesh_store::clock::rfc3339(kept.kept_at),
            kept.resource
        );
    }
    out
}

/// What is at a kept file's path now, read to compare it with what was kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Now {
    /// A regular file, with these bytes.
    File(Vec<u8>),
    /// Nothing is there.
    Missing,
    /// Something that is not a regular file, or that cannot be read (why).
    Other(String),
}

/// What is at machine path `path` under `root` now; a symbolic link is never followed.
pub fn read_now(root: &Path, path: &str) -> Now {
    let full = root.join(path.trim_start_matches('/'));
    match std::fs::symlink_metadata(&full) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Now::Missing,
        Err(e) => Now::Other(format!("cannot be read: {e}")),
        Ok(meta) if !meta.is_file() => Now::Other("is not a regular file".to_owned()),
        Ok(_) => match std::fs::read(&full) {
            Ok(bytes) => Now::File(bytes),
            Err(e) => Now::Other(format!("cannot be read: {e}")),
        },
    }
}

/// `drift show ID` for people: what was kept, and a unified diff from it to the file now
/// (the lines starting `-` are the hand edit's, those starting `+` what the file holds now).
pub fn render_show(kept: &Kept, bytes: &[u8], now: &Now) -> String {
    let mut out = format!(
        "{id}: what {path} held at {at}, before the mesh put it back ({resource})\n\
         kept {size} bytes, {digest}; put back as {by}\n",
        id = kept.id,
        path = kept.path,
        at = mesh_store::clock::rfc3339(kept.kept_at),
        resource = kept.resource,
        size = kept.size,
        digest = kept.digest,
        by = kept.replaced_by,
    );
    let Ok(old) = std::str::from_utf8(bytes) else {
        let _ = writeln!(
            out,
            "its content is not text: not shown (`--raw` writes it to standard output)"
        );
        return out;
    };
    let current = match now {
        Now::File(current) => match std::str::from_utf8(current) {
            Ok(current) => current,
            Err(_) => {
                let _ = writeln!(out, "{} now holds what is not text: no diff", kept.path);
                return out;
            }
        },
        Now::Missing => {
            let _ = writeln!(out, "{} is not there now: no diff", kept.path);
            return out;
        }
        Now::Other(why) => {
            let _ = writeln!(out, "{} {why}: no diff", kept.path);
            return out;
        }
    };
    if old == current {
        let _ = writeln!(out, "{} holds the same now: no difference", kept.path);
        return out;
    }
    let diff = similar::TextDiff::from_lines(old, current);
    let _ = write!(
        out,
        "{}",
        diff.unified_diff()
            .context_radius(3)
            .header(&format!("kept {}", kept.id), &format!("{} now", kept.path))
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept() -> Kept {
        Kept {
            id: "0123456789ab-1700000000".to_owned(),
            resource: "web/file/conf".to_owned(),
            path: "/etc/web.conf".to_owned(),
            digest: "sha256:0123456789ab".to_owned(),
            size: 24,
            kept_at: 1_700_000_000,
            replaced_by: "sha256:fedcba".to_owned(),
        }
    }

    #[test]
    fn a_hand_edit_is_shown_as_a_diff_to_the_file_now() {
        insta::assert_snapshot!(render_show(
            &kept(),
            b"port = 9090\nworkers = 8\n",
            &Now::File(b"port = 8080\nworkers = 8\n".to_vec()),
        ));
    }

    #[test]
    fn the_list_is_newest_first() {
        let mut newer = kept();
        newer.id = "ba9876543210-1700000100".to_owned();
        newer.kept_at = 1_700_000_100;
        insta::assert_snapshot!(render_list(&BucketIndex {
            format: 1,
            entries: vec![kept(), newer],
        }));
    }

    #[test]
    fn content_that_is_not_text_or_a_file_that_is_gone_is_said_so() {
        let shown = render_show(&kept(), &[0xff, 0xfe], &Now::Missing);
        assert!(shown.contains("is not text"), "{shown}");
        let shown = render_show(&kept(), b"a\n", &Now::Missing);
        assert!(shown.contains("/etc/web.conf is not there now"), "{shown}");
    }
}
