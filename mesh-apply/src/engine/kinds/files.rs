//! File resources: what applying one would change (read through the stat cache when its stamp
//! allows), and bringing a lone file to what is declared with an atomic write.

use super::super::discover::Prepared;
use super::super::{ArchivedContents, Attempt, Engine};
use crate::filebucket::{self, Keeping, Limits};
use crate::fsops::{self, Wanted};
use crate::paths::{Opened, Resolved};
use crate::state::Origin;
use crate::ApplyError;
use mesh_model::declaration::{FileSpec, Resource, Spec};
use mesh_model::report::Finding;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::PathBuf;

/// How a file resource's path is read to compare it with what is declared.
pub(in crate::engine) enum FileRead {
    /// One open that never follows a link, compared as it is read through the engine's buffer:
    /// a lone file, the no-op apply's path.
    Opened,
    /// An lstat, then the whole file read by its path: a together group's member.
    ByPath,
}

/// What applying a file resource would change, found before anything changes.
pub(in crate::engine) struct FileChange<'c> {
    /// The path under the root.
    pub(in crate::engine) full: PathBuf,
    /// Ancestors (machine paths) that do not exist yet.
    pub(in crate::engine) missing_parents: Vec<String>,
    /// The content, mode and owner declared.
    pub(in crate::engine) wanted: Wanted<'c>,
    /// Whether a regular file is there now.
    pub(in crate::engine) existed: bool,
    /// What differs (`created` when nothing is there); empty when it is as declared.
    pub(in crate::engine) changed: Vec<String>,
}

impl<'a> Engine<'a, '_> {
    /// What is at a declared file now, as an origin: nothing (made), or a regular file whose
    /// bytes are kept to be given back (found); `None` when something else is there.
    pub(super) fn observe_file(&mut self, f: &FileSpec) -> Result<Option<Origin>, ApplyError> {
        let Ok(resolved) = self.paths.resolve(&f.path) else {
            return Ok(None);
        };
        match &resolved.meta {
            None => Ok(Some(Origin::Made)),
            Some(meta) if meta.is_file() => {
                let Ok(bytes) = fs::read(&resolved.full) else {
                    return Ok(None);
                };
                let content = self.dir.keep_found(&bytes)?;
                let (mode, uid, gid) = fsops::mode_owner(meta);
                Ok(Some(Origin::FoundFile {
                    content,
                    mode,
                    uid,
                    gid,
                }))
            }
            Some(_) => Ok(None),
        }
    }

    /// Gives back the file at `path`: removed when the mesh made it, written back as it was
    /// found when it found one.
    pub(super) fn release_file(&mut self, path: &str, origin: &Origin) -> Result<String, String> {
        self.stamps.forget(path);
        match origin {
            Origin::Made => {
                let resolved = self.paths.resolve(path)?;
                match &resolved.meta {
                    None => Ok(format!("`{path}` the mesh made was already gone")),
                    Some(meta) if meta.is_file() => {
                        fs::remove_file(&resolved.full)
                            .map_err(|e| format!("cannot remove `{path}`: {e}"))?;
                        self.touched(&resolved.full);
                        Ok(format!("removed `{path}`, which the mesh made"))
                    }
                    Some(_) => Ok(format!(
                        "left `{path}` alone: it is no longer the file the mesh made"
                    )),
                }
            }
            Origin::FoundFile {
                content,
                mode,
                uid,
                gid,
            } => {
                let resolved = self.paths.resolve(path)?;
                if !resolved.missing_parents.is_empty() {
                    return Err(format!("cannot give back `{path}`: its directory is gone"));
                }
                if resolved.meta.as_ref().is_some_and(|m| !m.is_file()) {
                    return Err(format!(
                        "cannot give back `{path}`: something other than a file is there now"
                    ));
                }
                let bytes = self.dir.found(content).map_err(|e| {
                    format!("cannot give back `{path}`: the copy kept when it was found is unreadable: {e}")
                })?;
                fsops::write_atomic(
                    &resolved.full,
                    &Wanted {
                        bytes: &bytes,
                        mode: *mode,
                        uid: *uid,
                        gid: *gid,
                    },
                )
                .map_err(|e| format!("cannot give back `{path}`: {e}"))?;
                self.touched(&resolved.full);
                Ok(format!("gave back `{path}` as the mesh found it"))
            }
            other => Ok(super::super::release::forgot("file", path, other)),
        }
    }

    /// What applying a file resource would change, read from the machine; a reason when it
    /// cannot be applied (an unknown owner, a path that is not a regular file, an unreadable
    /// file). Both a lone file and a together member start here.
    pub(in crate::engine) fn examine_file<'r>(
        &mut self,
        resource: &Resource,
        spec: &'r FileSpec,
        read: FileRead,
    ) -> Result<FileChange<'r>, String>
    where
        'a: 'r,
    {
        let (uid, gid) = self.owner_ids(&spec.owner, &spec.group)?;
        if let Some(change) = self.as_rendered_before(resource, spec, (spec.mode, uid, gid))? {
            return Ok(change);
        }
        let wanted = Wanted {
            bytes: self.content_of(resource, spec)?,
            mode: spec.mode,
            uid,
            gid,
        };
        let path = &spec.path;
        if let Some((full, missing_parents, changed)) =
            self.unchanged_by_stamp(resource, spec, &wanted)?
        {
            return Ok(FileChange {
                full,
                missing_parents,
                wanted,
                existed: true,
                changed,
            });
        }
        let cannot_read = |e: io::Error| format!("cannot read `{path}`: {e}");
        let (full, missing_parents, found) = match read {
            FileRead::Opened => {
                let Opened {
                    full,
                    missing_parents,
                    current,
                } = self.paths.open_file(path)?;
                let found = match current {
                    None => None,
                    Some((mut file, meta)) => {
                        regular_file(path, &meta)?;
                        let changed = differences_of_open_file(
                            &mut file,
                            &meta,
                            &wanted,
                            &mut self.read_buffer,
                        )
                        .map_err(cannot_read)?;
                        self.note_read(resource, spec, &meta, &changed);
                        Some(changed)
                    }
                };
                (full, missing_parents, found)
            }
            FileRead::ByPath => {
                let Resolved {
                    full,
                    missing_parents,
                    meta,
                } = self.paths.resolve(path)?;
                let found = match &meta {
                    None => None,
                    Some(meta) => {
                        regular_file(path, meta)?;
                        let changed =
                            file_differences(&full, meta, &wanted).map_err(cannot_read)?;
                        self.note_read(resource, spec, meta, &changed);
                        Some(changed)
                    }
                };
                (full, missing_parents, found)
            }
        };
        Ok(FileChange {
            full,
            missing_parents,
            wanted,
            existed: found.is_some(),
            changed: found.unwrap_or_else(|| vec!["created".to_owned()]),
        })
    }

    /// The bytes a file should hold: its content, what was read from its archive, or its
    /// template of secrets rendered (now, if it was not yet: its secrets are opened). A file
    /// with none is blocked before it is attempted ([`super::super::unreadable_files`]), so this is
    /// never asked; a template that cannot be rendered is the file's failure.
    fn content_of<'r>(&self, resource: &Resource, spec: &'r FileSpec) -> Result<&'r [u8], String>
    where
        'a: 'r,
    {
        let contents: &'a ArchivedContents = self.contents;
        if let Some(content) = &spec.content {
            return Ok(content.as_bytes());
        }
        if let Some(read) = contents.read.get(&resource.id) {
            return Ok(read.as_bytes());
        }
        match (contents.deferred.get(&resource.id), &spec.sealed) {
            (Some(deferred), Some(pieces)) => match deferred.render(&resource.module, pieces) {
                Ok(text) => Ok(text.as_bytes()),
                Err(reason) => Err(reason.clone()),
            },
            _ => Ok(&[]),
        }
    }

    /// Renders now every template of secrets this host has no record of rendering from the
    /// same pieces and key ([`crate::sealed`]); one that cannot be is blocked, naming why,
    /// before anything is examined or changed (nothing of it is written). The others are
    /// rendered only if their file turns out to need it.
    pub(in crate::engine) fn render_unknown_templates(&mut self) {
        let (declaration, contents) = (self.declaration, self.contents);
        for resource in &declaration.resources {
            let Spec::File(spec) = &resource.spec else {
                continue;
            };
            let (Some(deferred), Some(pieces)) =
                (contents.deferred.get(&resource.id), &spec.sealed)
            else {
                continue;
            };
            if self.blocked.contains_key(&resource.id)
                || self
                    .stamps
                    .rendered_digest(&spec.path, &deferred.from)
                    .is_some()
            {
                continue;
            }
            if let Err(reason) = deferred.render(&resource.module, pieces) {
                self.blocked.insert(resource.id.clone(), reason.clone());
            }
        }
    }

    /// The change a file rendered from secrets needs when it is not rendered yet and the mesh
    /// last left it rendered from the same pieces with the same key: none, when the file is
    /// still what was left there (its stamp says so, or else the digest of its bytes) and its
    /// mode and owner are as declared. `None` when it must be rendered to be compared or
    /// written (or is not such a file).
    fn as_rendered_before(
        &mut self,
        resource: &Resource,
        spec: &FileSpec,
        (mode, uid, gid): (u32, u32, u32),
    ) -> Result<Option<FileChange<'static>>, String> {
        let contents: &'a ArchivedContents = self.contents;
        let Some(deferred) = contents.deferred.get(&resource.id) else {
            return Ok(None);
        };
        if spec.content.is_some() || deferred.opened() {
            return Ok(None);
        }
        let Some((left, stamp)) = self.stamps.rendered(&spec.path, &deferred.from) else {
            return Ok(None);
        };
        let unchanged = |meta: &fs::Metadata| {
            meta.is_file() && mode_owner_differences(meta, (mode, uid, gid)).is_empty()
        };
        let unchanged_file = |full, missing_parents| FileChange {
            full,
            missing_parents,
            wanted: Wanted {
                bytes: &[],
                mode,
                uid,
                gid,
            },
            existed: true,
            changed: Vec::new(),
        };
        // By its stamp (one lstat), when one is kept of these very bytes.
        if let Some(stamp) = stamp.filter(|stamp| stamp.digest == left) {
            let Resolved {
                full,
                missing_parents,
                meta,
            } = self.paths.resolve(&spec.path)?;
            let Some(meta) = meta else {
                return Ok(None);
            };
            if stamp.same_file(&meta) {
                return Ok(unchanged(&meta).then(|| unchanged_file(full, missing_parents)));
            }
        }
        let left = left.to_owned();
        // Else by the digest of its bytes, read through one open that follows no link; the
        // stamp kept is of what was read.
        let Opened {
            full,
            missing_parents,
            current,
        } = self.paths.open_file(&spec.path)?;
        let Some((mut file, meta)) = current.filter(|(_, meta)| unchanged(meta)) else {
            return Ok(None);
        };
        let found = digest_of_open_file(&mut file, &mut self.read_buffer)
            .map_err(|e| format!("cannot read `{}`: {e}", spec.path))?;
        if found != left {
            return Ok(None);
        }
        self.stamps
            .record_rendered(&spec.path, &meta, &left, &deferred.from, self.now);
        Ok(Some(unchanged_file(full, missing_parents)))
    }

    /// The change a file resource needs when the stat cache says its content is as declared
    /// (its stamp unchanged since it was last read or written so): its mode and owner alone,
    /// from one lstat; `None` when its content must be read.
    #[allow(clippy::type_complexity)]
    fn unchanged_by_stamp(
        &mut self,
        resource: &Resource,
        spec: &FileSpec,
        wanted: &Wanted<'_>,
    ) -> Result<Option<(PathBuf, Vec<String>, Vec<String>)>, String> {
        // One look-up of the stamp serves both questions: is there one, and is it this file's.
        let Some(stamp) = self.stamps.stamp(&spec.path) else {
            return Ok(None);
        };
        let Some(declared) = self.stamp_digest(resource, spec) else {
            return Ok(None);
        };
        let Resolved {
            full,
            missing_parents,
            meta,
        } = self.paths.resolve(&spec.path)?;
        let Some(meta) = meta.filter(|meta| meta.is_file()) else {
            return Ok(None);
        };
        if !stamp.same_file(&meta) || stamp.digest != *declared {
            return Ok(None);
        }
        let changed = mode_owner_differences(&meta, (wanted.mode, wanted.uid, wanted.gid));
        Ok(Some((full, missing_parents, changed)))
    }

    /// Keeps the stamp of a file whose content was just read and found as declared.
    fn note_read(
        &mut self,
        resource: &Resource,
        spec: &FileSpec,
        meta: &fs::Metadata,
        changed: &[String],
    ) {
        if changed.iter().any(|c| c == "content") {
            return;
        }
        if let Some(declared) = self.stamp_digest(resource, spec) {
            self.keep_stamp(resource, spec, meta, &declared);
        }
    }

    /// Keeps `meta` as the stamp of a file holding bytes of `digest`, and for a file rendered
    /// from secrets what it was rendered from.
    fn keep_stamp(
        &mut self,
        resource: &Resource,
        spec: &FileSpec,
        meta: &fs::Metadata,
        digest: &str,
    ) {
        let contents: &'a ArchivedContents = self.contents;
        match contents.deferred.get(&resource.id) {
            Some(deferred) if spec.content.is_none() => {
                self.stamps
                    .record_rendered(&spec.path, meta, digest, &deferred.from, self.now);
            }
            _ => self.stamps.record(&spec.path, meta, digest, self.now),
        }
    }

    /// The digest a file's stamp keeps: of its declared content, or — for a file rendered
    /// from a secret, which declares no content — of what this host rendered (or, not
    /// rendered yet, of what it rendered from the same before: [`crate::sealed`]). That one
    /// stays in the state directory of the machine that holds the value anyway, and is never
    /// reported: drift of such a file is said without it ([`crate::drift`]).
    fn stamp_digest(
        &self,
        resource: &Resource,
        spec: &FileSpec,
    ) -> Option<std::borrow::Cow<'a, str>> {
        let (sent, contents): (
            &'a dyn mesh_model::declaration::Declared,
            &'a ArchivedContents,
        ) = (self.sent, self.contents);
        match sent.content_digest(resource) {
            Some(declared) => Some(declared),
            None if spec.sealed.is_some() => {
                if let Some(text) = contents.read.get(&resource.id) {
                    return Some(crate::stamps::digest_of_bytes(text.as_bytes()).into());
                }
                let deferred = contents.deferred.get(&resource.id)?;
                match deferred.text() {
                    Some(text) => Some(crate::stamps::digest_of_bytes(text.as_bytes()).into()),
                    None if deferred.opened() => None,
                    None => self
                        .stamps
                        .rendered_digest(&spec.path, &deferred.from)
                        .map(|digest| digest.to_owned().into()),
                }
            }
            None => None,
        }
    }

    /// Keeps the stamp of a file just written (or given its mode and owner) as declared.
    fn note_written(&mut self, resource: &Resource, spec: &FileSpec, full: &std::path::Path) {
        match (
            fs::symlink_metadata(full),
            self.stamp_digest(resource, spec),
        ) {
            (Ok(meta), Some(declared)) if meta.is_file() => {
                self.keep_stamp(resource, spec, &meta, &declared);
            }
            _ => self.stamps.forget(&spec.path),
        }
    }

    /// Keeps the content at `full` in the filebucket ([`crate::filebucket`]) before declared
    /// content is written over it, when someone changed it by hand: it is not what the mesh
    /// last left there (its stamp, or else its digest, says so). (What was found at a newly
    /// declared path is kept as found instead, and given back when it is undeclared.) The
    /// report's findings say what was kept, or that it was too large to keep.
    ///
    /// # Errors
    /// The content could not be read or kept: then it must not be written over, and the
    /// reason says so.
    pub(in crate::engine) fn keep_hand_edit(
        &mut self,
        resource: &Resource,
        spec: &FileSpec,
        full: &std::path::Path,
    ) -> Result<(), String> {
        // What a file rendered from a secret held is never kept (the rule “A secret is
        // readable only where it is used”).
        if spec.sealed.is_some() {
            return Ok(());
        }
        let Ok(meta) = fs::symlink_metadata(full) else {
            return Ok(());
        };
        if !meta.is_file()
            || self
                .stamps
                .stamp(&spec.path)
                .is_some_and(|stamp| stamp.same_file(&meta))
        {
            return Ok(());
        }
        let path = &spec.path;
        let left = "so it is left as found";
        let bytes = fs::read(full)
            .map_err(|e| format!("cannot read `{path}` to keep its hand edit, {left}: {e}"))?;
        let digest = crate::stamps::digest_of_bytes(&bytes);
        if self.stamps.left_by_the_mesh(path) == Some(digest.as_str()) {
            return Ok(());
        }
        let found_here = self
            .state
            .resources
            .get(&resource.id)
            .is_some_and(|record| match &record.origin {
                Origin::FoundFile { content, .. } => {
                    digest.strip_prefix("sha256:") == Some(content.as_str())
                }
                _ => false,
            });
        if found_here {
            return Ok(());
        }
        let replaced_by = self
            .sent
            .content_digest(resource)
            .map(|digest| digest.into_owned())
            .unwrap_or_default();
        let message = match filebucket::keep(
            &self.config.state_dir,
            Limits::default(),
            (&resource.id, path),
            &bytes,
            &replaced_by,
            self.now,
        ) {
            Ok(Keeping::Kept(kept)) => format!(
                "what `{path}` held before it was put back is kept as {id} \
                 (`mesh-host drift show {id}`)",
                id = kept.id
            ),
            Ok(Keeping::TooLarge { size, limit }) => format!(
                "what `{path}` held before it was put back ({size} bytes) is not kept: the \
                 filebucket keeps files of at most {limit} bytes"
            ),
            Err(e) => {
                return Err(format!(
                    "cannot keep the hand edit of `{path}`, {left}: {e}"
                ))
            }
        };
        self.findings.push(Finding {
            resource: resource.id.clone(),
            message,
        });
        Ok(())
    }

    /// Brings a lone file resource to what is declared.
    pub(in crate::engine) fn apply_file(
        &mut self,
        resource: &Resource,
        spec: &FileSpec,
    ) -> Result<Attempt, ApplyError> {
        let change = match self.examine_file(resource, spec, FileRead::Opened) {
            Ok(change) => change,
            Err(reason) => return Ok(Attempt::Failed(reason)),
        };
        if change.changed.is_empty() {
            return Ok(Attempt::Took(change.changed));
        }
        if let Prepared::Failed(reason) = self.prepare_change(resource, &change.missing_parents)? {
            return Ok(Attempt::Failed(reason));
        }
        self.owe_restarts([resource.id.as_str()])?;
        let FileChange {
            full,
            wanted,
            existed,
            changed,
            ..
        } = change;
        let path = &spec.path;
        let result = if !existed {
            fsops::write_atomic(&full, &wanted).map(|()| self.touched(&full))
        } else if changed.iter().any(|c| c == "content") {
            if let Err(reason) = self.keep_hand_edit(resource, spec, &full) {
                return Ok(Attempt::Failed(reason));
            }
            self.touched(&full);
            fsops::write_atomic(&full, &wanted)
        } else {
            fsops::set_mode_owner(&full, wanted.mode, wanted.uid, wanted.gid)
        };
        if let Err(e) = result {
            self.stamps.forget(path);
            return Ok(Attempt::Failed(format!("cannot write `{path}`: {e}")));
        }
        self.note_written(resource, spec, &full);
        Ok(Attempt::Took(changed))
    }
}
/// A reason when what is at a file resource's path is not a regular file.
fn regular_file(path: &str, meta: &fs::Metadata) -> Result<(), String> {
    if meta.is_file() {
        Ok(())
    } else if meta.is_dir() {
        Err(format!("`{path}` is a directory, not a file"))
    } else {
        Err(format!("`{path}` is not a regular file"))
    }
}

pub(in crate::engine) fn mode_owner_differences(
    meta: &fs::Metadata,
    (mode, uid, gid): (u32, u32, u32),
) -> Vec<String> {
    let mut changed = Vec::new();
    if meta.mode() & 0o7777 != mode {
        changed.push("mode".to_owned());
    }
    if meta.uid() != uid {
        changed.push("owner".to_owned());
    }
    if meta.gid() != gid {
        changed.push("group".to_owned());
    }
    changed
}

/// What differs between an open file and what is wanted; reads through `buffer`, comparing as
/// it goes, so nothing is allocated per file.
fn differences_of_open_file(
    file: &mut fs::File,
    meta: &fs::Metadata,
    wanted: &Wanted<'_>,
    buffer: &mut [u8],
) -> io::Result<Vec<String>> {
    let mut changed = Vec::new();
    if meta.len() != wanted.bytes.len() as u64 || !same_bytes(file, wanted.bytes, buffer)? {
        changed.push("content".to_owned());
    }
    changed.extend(mode_owner_differences(
        meta,
        (wanted.mode, wanted.uid, wanted.gid),
    ));
    Ok(changed)
}

/// `sha256:<hex>` of what an open file holds, read through `buffer`.
fn digest_of_open_file(file: &mut fs::File, buffer: &mut [u8]) -> io::Result<String> {
    use sha2::Digest as _;
    let mut hasher = sha2::Sha256::new();
    loop {
        match io::Read::read(file, buffer) {
            Ok(0) => break,
            Ok(read) => hasher.update(&buffer[..read]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(mesh_model::sha256_text(hasher.finalize().into()))
}

/// Whether what `reader` holds is exactly `expected`.
fn same_bytes(reader: &mut impl io::Read, expected: &[u8], buffer: &mut [u8]) -> io::Result<bool> {
    let mut offset = 0;
    loop {
        let read = match reader.read(buffer) {
            Ok(read) => read,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if read == 0 {
            return Ok(offset == expected.len());
        }
        if expected.len() - offset < read || buffer[..read] != expected[offset..offset + read] {
            return Ok(false);
        }
        offset += read;
        if offset == expected.len() {
            // The length was checked against the file's metadata: no read for the end.
            return Ok(true);
        }
    }
}

/// What differs between the file at `full` and what is wanted.
fn file_differences(
    full: &std::path::Path,
    meta: &fs::Metadata,
    wanted: &Wanted<'_>,
) -> io::Result<Vec<String>> {
    let mut changed = Vec::new();
    let same_content = meta.len() == wanted.bytes.len() as u64 && fs::read(full)? == wanted.bytes;
    if !same_content {
        changed.push("content".to_owned());
    }
    changed.extend(mode_owner_differences(
        meta,
        (wanted.mode, wanted.uid, wanted.gid),
    ));
    Ok(changed)
}

/// How the file `spec` (of `resource`) differs from what the host left there: that it is a
/// regular file, its mode and owner, and its content (read only when its stamp changed).
pub(in crate::engine) fn drift(
    resource: &Resource,
    spec: &FileSpec,
    declared: &dyn mesh_model::declaration::Declared,
    look: &mut super::super::look::Look<'_>,
    say: &mut super::super::look::Say<'_>,
) {
    let resolved = match look.paths.resolve(&spec.path) {
        Ok(resolved) => resolved,
        Err(problem) => {
            say("exists", "a regular file".into(), problem);
            return;
        }
    };
    let Some(meta) = resolved.meta else {
        say("exists", "a regular file".into(), "nothing".into());
        return;
    };
    if !meta.is_file() {
        say(
            "exists",
            "a regular file".into(),
            "not a regular file".into(),
        );
        return;
    }
    super::super::look::drift_of_mode_owner(
        &meta,
        (spec.mode, &spec.owner, &spec.group),
        &look.accounts,
        say,
    );
    // A file rendered from a secret is compared with what this host last
    // wrote there, and its drift said without its content or its digest (the
    // rule “A secret is readable only where it is used”).
    let (declared, shown) = match (declared.content_digest(resource), &spec.sealed) {
        (Some(declared), _) => (declared.into_owned(), None),
        (None, Some(pieces)) => match look.cache.left_by_the_mesh(&spec.path) {
            Some(left) => (
                left.to_owned(),
                Some(mesh_model::secret::describe_sealed(pieces)),
            ),
            None => return,
        },
        (None, None) => return,
    };
    if !look.full && look.cache.known_digest(&spec.path, &meta) == Some(&*declared) {
        return;
    }
    let found = look.digest_of(&spec.path, &resolved.full, &meta);
    match (found, shown) {
        (Ok(found), _) if found == declared => {}
        (Ok(_), Some(shown)) => say(
            "content",
            shown,
            "other content (not shown: the file holds a secret)".into(),
        ),
        (Ok(found), None) => say("content", declared, found),
        (Err(error), shown) => say(
            "content",
            shown.unwrap_or(declared),
            format!("unreadable: {error}"),
        ),
    }
}
