//! A declaration as a host keeps it ([`Sealed`]), and what an apply takes ([`Declared`]).

use super::{Declaration, Resource, Spec};

/// A declaration as a host keeps it once received: what an apply and every look for drift
/// compute of it — its digest, the digest of each file's declared content, the rules it
/// breaks — computed **once**, when it is sealed, not on every apply or reconcile (
/// at 10,000 files they cost more than a stat of every file).
///
/// It cannot be changed once sealed (the declaration is reached through
/// [`Sealed::declaration`] or `Deref` only), so what was computed stays its own.
#[derive(Debug, Clone)]
pub struct Sealed {
    declaration: Declaration,
    digest: String,
    /// Per resource, in the declaration's order: the digest of a file's declared content.
    contents: Vec<Option<String>>,
    problems: Vec<String>,
    /// What a consumer derived of it once (the apply keeps its order of units here): set once;
    /// a copy carries what was set before it was made ([`Declared::derived`]).
    derived: std::sync::OnceLock<std::sync::Arc<dyn std::any::Any + Send + Sync>>,
}

impl Sealed {
    /// Seals `declaration`: hashes it and each file's content, and checks its rules.
    pub fn new(declaration: Declaration) -> Sealed {
        let digest = declaration.digest();
        let contents = declaration
            .resources
            .iter()
            .map(|r| match &r.spec {
                Spec::File(f) => f.content_digest(),
                // No other kind has content of its own.
                _ => None,
            })
            .collect();
        let problems = declaration.problems();
        Sealed {
            declaration,
            digest,
            contents,
            problems,
            derived: std::sync::OnceLock::new(),
        }
    }

    /// The declaration.
    pub fn declaration(&self) -> &Declaration {
        &self.declaration
    }

    /// The declaration, unsealed.
    pub fn into_declaration(self) -> Declaration {
        self.declaration
    }
}

impl std::ops::Deref for Sealed {
    type Target = Declaration;
    fn deref(&self) -> &Declaration {
        &self.declaration
    }
}

impl From<Declaration> for Sealed {
    fn from(declaration: Declaration) -> Sealed {
        Sealed::new(declaration)
    }
}

/// A declaration with what is computed of it: a plain [`Declaration`] computes each on every
/// call, a [`Sealed`] one answers what it computed once. What an apply or a look for drift
/// takes, so that either can be given.
pub trait Declared: Sync {
    /// The declaration.
    fn declaration(&self) -> &Declaration;
    /// Its digest ([`Declaration::digest`]).
    fn digest(&self) -> std::borrow::Cow<'_, str>;
    /// The digest of the declared content of file `resource` (one of this declaration's, or of
    /// a copy of it with the same files)
    /// ([`FileSpec::content_digest`](super::FileSpec::content_digest)); `None` for a resource that
    /// is not a file with content (or not declared).
    fn content_digest(&self, resource: &Resource) -> Option<std::borrow::Cow<'_, str>>;
    /// Every rule it breaks ([`Declaration::problems`]).
    fn problems(&self) -> std::borrow::Cow<'_, [String]>;
    /// A slot where a consumer keeps what it derives of this declaration once (a pure function
    /// of it, such as the apply's order of units), when it is kept sealed; `None` for a plain
    /// declaration, whose consumers derive it again on every call.
    fn derived(
        &self,
    ) -> Option<&std::sync::OnceLock<std::sync::Arc<dyn std::any::Any + Send + Sync>>> {
        None
    }
}

impl Declared for Declaration {
    fn declaration(&self) -> &Declaration {
        self
    }
    fn digest(&self) -> std::borrow::Cow<'_, str> {
        Declaration::digest(self).into()
    }
    fn content_digest(&self, resource: &Resource) -> Option<std::borrow::Cow<'_, str>> {
        match &self.resource(&resource.id)?.spec {
            Spec::File(f) => f.content_digest().map(Into::into),
            // No other kind has content of its own.
            _ => None,
        }
    }
    fn problems(&self) -> std::borrow::Cow<'_, [String]> {
        Declaration::problems(self).into()
    }
}

impl Declared for Sealed {
    fn declaration(&self) -> &Declaration {
        &self.declaration
    }
    fn digest(&self) -> std::borrow::Cow<'_, str> {
        self.digest.as_str().into()
    }
    fn content_digest(&self, resource: &Resource) -> Option<std::borrow::Cow<'_, str>> {
        let resources = &self.declaration.resources;
        // One of its own resources is found by where it is (no search); a copy's by its id.
        let offset = (resource as *const Resource as usize)
            .wrapping_sub(resources.as_ptr() as usize)
            / std::mem::size_of::<Resource>().max(1);
        let index = if resources
            .get(offset)
            .is_some_and(|own| std::ptr::eq(own, resource))
        {
            offset
        } else {
            resources
                .binary_search_by(|r| r.id.as_str().cmp(&resource.id))
                .ok()?
        };
        self.contents[index].as_deref().map(Into::into)
    }
    fn problems(&self) -> std::borrow::Cow<'_, [String]> {
        self.problems.as_slice().into()
    }
    fn derived(
        &self,
    ) -> Option<&std::sync::OnceLock<std::sync::Arc<dyn std::any::Any + Send + Sync>>> {
        Some(&self.derived)
    }
}
