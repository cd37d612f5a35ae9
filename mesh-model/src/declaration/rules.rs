//! The rules a declaration keeps across its resources and kinds (two containers taking one
//! port, a container joining a network not declared, a job's problems, archives, accounts),
//! and the rules of a path and an account's name; [`super::Declaration::problems`] says them
//! all.

use super::*;

/// Whether `name` is one of podman's own networks a container names without declaring it.
pub(super) fn is_builtin_network(name: &str) -> bool {
    matches!(name, NETWORK_BRIDGE | NETWORK_HOST | "none" | "podman")
}

impl Declaration {
    /// What is wrong with the network a container names, if anything: one that is not
    /// podman's own must be a network the declaration holds, and the container comes after it.
    pub(super) fn network_problem(
        &self,
        resource: &Resource,
        spec: &ContainerSpec,
    ) -> Option<String> {
        let name = spec.network.as_deref().filter(|n| !is_builtin_network(n))?;
        let Some(network) = self
            .resources
            .iter()
            .find(|r| matches!(&r.spec, Spec::Network(n) if n.name == name))
        else {
            return Some(format!(
                "`{}`: joins the network `{name}`, which is not declared",
                resource.id
            ));
        };
        (!resource.after.contains(&network.id)).then(|| {
            format!(
                "`{}`: joins the network of `{}` and must come after it",
                resource.id, network.id
            )
        })
    }

    /// What is wrong with a job, if anything: its own fields, its mounts and network as a
    /// container's, and each file it runs again on is declared and comes before it.
    pub(super) fn job_problems(&self, resource: &Resource, job: &JobSpec) -> Vec<String> {
        let id = &resource.id;
        let mut out: Vec<String> = job
            .problems()
            .into_iter()
            .map(|problem| format!("`{id}`: {problem}"))
            .collect();
        for m in &job.run.mounts {
            if let Some(problem) = path_problem(&m.source) {
                out.push(format!("`{id}`: mount source {problem}"));
            }
        }
        out.extend(self.network_problem(resource, &job.run));
        for file in &job.rerun_on {
            if !matches!(self.resource(file).map(|r| &r.spec), Some(Spec::File(_))) {
                out.push(format!(
                    "`{id}`: runs again on `{file}`, which is not a declared file"
                ));
            } else if !resource.after.contains(file) {
                out.push(format!(
                    "`{id}`: runs again on `{file}` and must come after it"
                ));
            }
        }
        out
    }

    /// Two containers or jobs of one name on the machine, each pair said once, naming both.
    pub(super) fn container_name_collisions(&self) -> Vec<String> {
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        let mut out = Vec::new();
        for r in &self.resources {
            let name = match &r.spec {
                Spec::Container(c) => &c.name,
                Spec::Job(j) => &j.run.name,
                _ => continue,
            };
            if let Some(other) = seen.insert(name, &r.id) {
                out.push(format!(
                    "`{other}` and `{}` both run a container named `{name}`",
                    r.id
                ));
            }
        }
        out
    }

    /// Two accounts of one name, or asking one uid or gid, each pair said once, naming both.
    pub(super) fn account_collisions(&self) -> Vec<String> {
        let accounts: Vec<(&str, &AccountSpec)> = self
            .resources
            .iter()
            .filter_map(|r| match &r.spec {
                Spec::Account(a) => Some((r.id.as_str(), a)),
                _ => None,
            })
            .collect();
        let mut out = Vec::new();
        for (i, (id, a)) in accounts.iter().enumerate() {
            for (other, b) in &accounts[..i] {
                if a.name == b.name {
                    out.push(format!(
                        "`{other}` and `{id}` both declare account `{}`",
                        a.name
                    ));
                }
                if a.uid.is_some() && a.uid == b.uid {
                    out.push(format!(
                        "`{other}` and `{id}` both ask uid {}",
                        a.uid.unwrap_or_default()
                    ));
                }
                if a.gid.is_some() && a.gid == b.gid {
                    out.push(format!(
                        "`{other}` and `{id}` both ask gid {}",
                        a.gid.unwrap_or_default()
                    ));
                }
            }
        }
        out
    }

    /// Two containers that would take one host port, each pair said once, naming both.
    pub(super) fn port_collisions(&self) -> Vec<String> {
        let published: Vec<(&str, &PortMapping)> = self
            .resources
            .iter()
            .filter_map(|r| match &r.spec {
                Spec::Container(c) => Some((r.id.as_str(), &c.ports)),
                // Nothing else publishes a port.
                _ => None,
            })
            .flat_map(|(id, ports)| ports.iter().map(move |port| (id, port)))
            .collect();
        let mut out = Vec::new();
        for (i, (id, port)) in published.iter().enumerate() {
            for (other, other_port) in &published[..i] {
                if other != id && port.collides_with(other_port) {
                    out.push(format!(
                        "`{other}` and `{id}` both publish host port {} (`{other_port}` and \
                         `{port}`)",
                        port.host_side()
                    ));
                }
            }
        }
        out
    }

    /// The rules of the format and of [`Declaration::archives`].
    pub(super) fn archive_problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let archived = |module: &str| {
            self.resources.iter().any(|r| {
                r.module == module && matches!(&r.spec, Spec::File(f) if f.source.is_some())
            })
        };
        match self.format {
            DECLARATION_FORMAT if !self.archives.is_empty() => out.push(format!(
                "format {DECLARATION_FORMAT} names no archive; a declaration that does is format \
                 {DECLARATION_FORMAT_ARCHIVES}"
            )),
            DECLARATION_FORMAT_ARCHIVES if self.archives.is_empty() => out.push(format!(
                "format {DECLARATION_FORMAT_ARCHIVES} names at least one archive; a declaration \
                 that names none is format {DECLARATION_FORMAT}"
            )),
            DECLARATION_FORMAT_SECRETS if !self.holds_secrets() => out.push(format!(
                "format {DECLARATION_FORMAT_SECRETS} has a template of secrets; a declaration \
                 that has none is format {DECLARATION_FORMAT} or {DECLARATION_FORMAT_ARCHIVES}"
            )),
            DECLARATION_FORMAT | DECLARATION_FORMAT_ARCHIVES | DECLARATION_FORMAT_SECRETS => {}
            other => out.push(format!("format {other} is not a declaration format")),
        }
        for (module, archive) in &self.archives {
            if !is_sha256_digest(&archive.digest) {
                out.push(format!(
                    "the archive of `{module}`: `{}` is not a sha256 digest",
                    archive.digest
                ));
            }
            if !archived(module) {
                out.push(format!(
                    "the archive of `{module}` is named but no file of `{module}` is read from it"
                ));
            }
        }
        out
    }

    /// What is wrong with where a file's content comes from, if anything.
    pub(super) fn file_source_problem(
        &self,
        resource: &Resource,
        file: &FileSpec,
    ) -> Option<String> {
        let id = &resource.id;
        if let Some(pieces) = &file.sealed {
            if file.content.is_some() || file.source.is_some() {
                return Some(format!(
                    "`{id}`: a template of secrets carries neither content nor source"
                ));
            }
            return pieces.iter().find_map(|piece| match piece {
                crate::secret::SealedPiece::Secret { key, value } => value
                    .problem()
                    .map(|problem| format!("`{id}`: the secret `{key}`: {problem}")),
                crate::secret::SealedPiece::Text(_) => None,
            });
        }
        let Some(source) = &file.source else {
            return file
                .content
                .is_none()
                .then(|| format!("`{id}`: a file carries its content or names its source"));
        };
        if file.content.is_some() {
            return Some(format!(
                "`{id}`: a file carries its content or names its source, not both"
            ));
        }
        if !self.archives.contains_key(&resource.module) {
            return Some(format!(
                "`{id}`: its content is in the archive of `{}`, which the declaration does not name",
                resource.module
            ));
        }
        if source.path.is_empty()
            || source.path.starts_with('/')
            || source
                .path
                .split('/')
                .any(|s| s.is_empty() || s == "." || s == "..")
        {
            return Some(format!(
                "`{id}`: `{}` is not a plain relative path in an archive",
                source.path
            ));
        }
        if !is_sha256_digest(&source.sha256) {
            return Some(format!(
                "`{id}`: `{}` is not a sha256 digest",
                source.sha256
            ));
        }
        None
    }
}

/// Why `name` cannot be a system account's name, if it cannot: `[a-z_][a-z0-9_-]*`, at most 32
/// characters.
pub fn account_name_problem(name: &str) -> Option<String> {
    let sound = name.len() <= 32
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    (!sound).then(|| format!("`{name}` is not an account name ([a-z_][a-z0-9_-]*, at most 32)"))
}

/// Why a declared machine path is unacceptable, if it is.
pub fn path_problem(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return Some(format!("`{path}` is not an absolute path"));
    }
    if path.split('/').any(|s| s == ".." || s == ".") {
        return Some(format!("`{path}` has a `.` or `..` segment"));
    }
    if path == "/" {
        return Some("`/` cannot be a resource".to_owned());
    }
    if path.contains('\0') {
        return Some(format!("`{}` holds a NUL byte", path.escape_debug()));
    }
    None
}
