//! Templates of secrets rendered only when an apply needs what they hold.
//!
//! A file rendered from secrets (`FileSpec::sealed`) declares no content: its host opens each
//! secret with its own key (one X25519 agreement each) and puts the value in. Most applies
//! change nothing, so the host hands the engine a [`Deferred`] per such file — what the file
//! is rendered from, and how to render it — and the engine opens its secrets only when the
//! file must be compared byte for byte or written:
//!
//! - the stat cache ([`crate::stamps`]) keeps, beside the digest of what the mesh last left at
//!   a path, what that was rendered from ([`Deferred::from`]: the template's pieces as sent,
//!   ciphertexts included, and the key that opened them);
//! - when the file is rendered from the same, the digest of its rendering is known without
//!   opening anything, and the file is compared with it (by its stamp, or else by the digest
//!   of its bytes), as a file of declared content is;
//! - anything else — no record, other pieces (a changed secret, a secret sealed again, a
//!   corrupted ciphertext), a hand edit, a mode to change — renders it first, as before.
//!
//! What it must never do: say a file is as rendered without having rendered those very pieces
//! with that key before; keep or show a rendered value anywhere but the file and memory (zeroized
//! when let go).

use mesh_model::secret::SealedPiece;
use std::sync::{Arc, OnceLock};

/// Renders a host's templates of secrets with the host's key (mesh-host's age identity).
pub trait RenderSecrets: Send + Sync {
    /// The template's text with each secret opened and put in; or why it cannot be (naming
    /// `module` and the secret's key, never a value).
    ///
    /// # Errors
    /// A sentence for the file's failure.
    fn render(&self, module: &str, pieces: &[SealedPiece]) -> Result<String, String>;
}

/// A template of secrets its host can render, rendered at most once, when first needed.
pub struct Deferred {
    /// What the file is rendered from, as its host identifies it (a digest of the pieces as
    /// sent, ciphertexts included, and of the key that opens them): a file the mesh last left
    /// rendered from the same holds the same bytes.
    pub from: String,
    renderer: Arc<dyn RenderSecrets>,
    rendered: OnceLock<Result<String, String>>,
}

impl Deferred {
    /// A template rendered from `from`, by `renderer` when needed.
    pub fn new(from: String, renderer: Arc<dyn RenderSecrets>) -> Deferred {
        Deferred {
            from,
            renderer,
            rendered: OnceLock::new(),
        }
    }

    /// Whether its secrets were opened (it was rendered, or tried).
    pub fn opened(&self) -> bool {
        self.rendered.get().is_some()
    }

    /// Its text once rendered (`None` before, or when it could not be).
    pub(crate) fn text(&self) -> Option<&str> {
        match self.rendered.get() {
            Some(Ok(text)) => Some(text),
            _ => None,
        }
    }

    /// Renders it (once): its text, or why not.
    pub(crate) fn render(&self, module: &str, pieces: &[SealedPiece]) -> &Result<String, String> {
        self.rendered
            .get_or_init(|| self.renderer.render(module, pieces))
    }
}

/// Shows what it is rendered from and whether it was, never its text.
impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deferred")
            .field("from", &self.from)
            .field("opened", &self.opened())
            .finish_non_exhaustive()
    }
}

impl Clone for Deferred {
    fn clone(&self) -> Self {
        Deferred {
            from: self.from.clone(),
            renderer: Arc::clone(&self.renderer),
            rendered: self.rendered.clone(),
        }
    }
}

/// Two are the same template when they are rendered from the same.
impl PartialEq for Deferred {
    fn eq(&self, other: &Self) -> bool {
        self.from == other.from
    }
}

impl Eq for Deferred {}

/// What was rendered holds secrets in clear: zeroized when let go.
impl Drop for Deferred {
    fn drop(&mut self) {
        use zeroize::Zeroize as _;
        if let Some(Ok(text)) = self.rendered.get_mut() {
            text.zeroize();
        }
    }
}
