//! Line resources, the whole kind: one line the mesh keeps in a file it did not make (as Puppet's
//! `file_line` and Ansible's `lineinfile`). What is in the file before the line is taken (the
//! line already there, a line it replaces, or nothing), adding or replacing it, giving it back
//! (removed, or the line it replaced put back), and its drift (the line gone by hand).
//!
//! What it must never do: make or remove the file, or change any line of it but its own.

use super::super::look::{Look, Say};
use super::super::{Attempt, Engine};
use crate::fsops::{self, Wanted};
use crate::state::Origin;
use crate::ApplyError;
use mesh_model::declaration::{LineSpec, Resource};
use std::fs;

/// A file's text, line by line.
struct Text {
    /// Its lines, without their newlines.
    lines: Vec<String>,
    /// Whether its last line ends with a newline (an empty file: true).
    ends_with_newline: bool,
}

impl Text {
    fn read(bytes: Vec<u8>, path: &str) -> Result<Text, String> {
        let text =
            String::from_utf8(bytes).map_err(|_| format!("`{path}` is not a text file (UTF-8)"))?;
        Ok(Text {
            ends_with_newline: text.is_empty() || text.ends_with('\n'),
            lines: text.lines().map(str::to_owned).collect(),
        })
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = self.lines.join("\n");
        if self.ends_with_newline && !self.lines.is_empty() {
            out.push('\n');
        }
        out.into_bytes()
    }

    /// Whether it holds `line`.
    fn holds(&self, line: &str) -> bool {
        self.lines.iter().any(|l| l == line)
    }

    /// The first line that starts with `start`, if any.
    fn starting_with(&self, start: &str) -> Option<usize> {
        self.lines.iter().position(|l| l.starts_with(start))
    }
}

/// A file a line is kept in, as read.
struct Held {
    /// Its path under the root.
    full: std::path::PathBuf,
    text: Text,
    /// Its mode, uid and gid, which a write keeps.
    mode_owner: (u32, u32, u32),
}

/// The file at machine path `path` under the root. The mesh never makes it: a missing file
/// fails the line.
fn read_file(paths: &mut crate::paths::RootPaths, path: &str) -> Result<Held, String> {
    let resolved = paths.resolve(path)?;
    match &resolved.meta {
        None => Err(format!(
            "`{path}` is not there: a line is kept only in a file that is"
        )),
        Some(meta) if meta.is_file() => {
            let bytes =
                fs::read(&resolved.full).map_err(|e| format!("cannot read `{path}`: {e}"))?;
            let text = Text::read(bytes, path)?;
            Ok(Held {
                full: resolved.full,
                text,
                mode_owner: fsops::mode_owner(meta),
            })
        }
        Some(_) => Err(format!("`{path}` is not a regular file")),
    }
}

impl<'a> Engine<'a, '_> {
    /// What is at a declared line now, as an origin; `None` when its file cannot hold it (the
    /// apply fails it and says why).
    pub(super) fn observe_line(&mut self, spec: &LineSpec) -> Option<Origin> {
        let text = read_file(&mut self.paths, &spec.path).ok()?.text;
        Some(if text.holds(&spec.line) {
            Origin::FoundLine
        } else if let Some(at) = spec.replaces.as_deref().and_then(|s| text.starting_with(s)) {
            Origin::ReplacedLine {
                was: text.lines[at].clone(),
            }
        } else {
            Origin::Made
        })
    }

    /// Brings a line to what is declared: added at the end of its file, or put in place of the
    /// first line that starts with its `match`. The file's other lines, mode and owner stay.
    pub(super) fn apply_line(
        &mut self,
        resource: &Resource,
        spec: &LineSpec,
    ) -> Result<Attempt, ApplyError> {
        let Held {
            full,
            mut text,
            mode_owner: (mode, uid, gid),
        } = match read_file(&mut self.paths, &spec.path) {
            Ok(file) => file,
            Err(reason) => return Ok(Attempt::Failed(reason)),
        };
        if text.holds(&spec.line) {
            return Ok(Attempt::Took(Vec::new()));
        }
        // What was there is recorded before the file changes.
        self.ensure_record(resource)?;
        let changed = match spec.replaces.as_deref().and_then(|s| text.starting_with(s)) {
            Some(at) => {
                text.lines[at].clone_from(&spec.line);
                "replaced"
            }
            None => {
                text.lines.push(spec.line.clone());
                text.ends_with_newline = true;
                "added"
            }
        };
        let wanted = Wanted {
            bytes: &text.bytes(),
            mode,
            uid,
            gid,
        };
        if let Err(e) = fsops::write_atomic(&full, &wanted) {
            return Ok(Attempt::Failed(format!(
                "cannot write `{}`: {e}",
                spec.path
            )));
        }
        self.touched(&full);
        Ok(Attempt::Took(vec![changed.to_owned()]))
    }

    /// Gives back the line `line` of the file at `path`: removed when the mesh added it, the
    /// line it replaced put back in its place, kept when it was there before the mesh. The
    /// file's other lines stay; a file gone, or the line gone from it, leaves nothing to give.
    pub(super) fn release_line(
        &mut self,
        path: &str,
        line: &str,
        origin: &Origin,
    ) -> Result<String, String> {
        let put_back = match origin {
            Origin::Made => None,
            Origin::ReplacedLine { was } => Some(was),
            Origin::FoundLine => {
                return Ok(format!(
                    "kept the line `{line}` in `{path}`: it was there before the mesh"
                ))
            }
            other => return Ok(super::super::release::forgot("line", path, other)),
        };
        let Held {
            full,
            mut text,
            mode_owner: (mode, uid, gid),
        } = match read_file(&mut self.paths, path) {
            Ok(file) => file,
            Err(reason) => return Ok(format!("nothing to give back: {reason}")),
        };
        let Some(at) = text.lines.iter().position(|l| l == line) else {
            return Ok(format!("the line `{line}` was already gone from `{path}`"));
        };
        let detail = match put_back {
            Some(was) => {
                text.lines[at].clone_from(was);
                format!("put back the line `{was}` in `{path}`, which the mesh replaced")
            }
            None => {
                text.lines.remove(at);
                format!("removed the line `{line}` from `{path}`, which the mesh added")
            }
        };
        let wanted = Wanted {
            bytes: &text.bytes(),
            mode,
            uid,
            gid,
        };
        fsops::write_atomic(&full, &wanted)
            .map_err(|e| format!("cannot give back the line in `{path}`: {e}"))?;
        self.touched(&full);
        Ok(detail)
    }
}

/// How the line `spec` differs from what the host left there: its file gone, or the line gone
/// from it (the file's other lines are not the mesh's to look at).
pub(super) fn drift(spec: &LineSpec, look: &mut Look<'_>, say: &mut Say<'_>) {
    match read_file(&mut look.paths, &spec.path) {
        Ok(held) if held.text.holds(&spec.line) => {}
        Ok(_) => say("line", spec.line.clone(), "absent".into()),
        Err(problem) => say("exists", format!("`{}`", spec.path), problem),
    }
}
