//! Declarations that use secrets, as the tests and benches of the controller's and the host's
//! secrets send them: a file rendered from text and a sealed secret (`FileSpec::sealed`).

use mesh_model::declaration::{resource_id, FileSpec, Resource, Spec};
use mesh_model::secret::{SealedPiece, SecretValue};

/// The pieces of a file holding `app:` then the secret `password`, then a newline.
pub fn password_pieces(secret: SecretValue) -> Vec<SealedPiece> {
    vec![
        SealedPiece::Text("app:".into()),
        SealedPiece::Secret {
            key: "password".into(),
            value: secret,
        },
        SealedPiece::Text("\n".into()),
    ]
}

/// `module`'s file `name` at `path`, mode 0600, owned by root, rendered on its host from
/// `pieces`.
pub fn sealed_file(module: &str, name: &str, path: &str, pieces: Vec<SealedPiece>) -> Resource {
    let mut spec = FileSpec::inline(path, "", 0o600, "root", "root");
    spec.content = None;
    spec.sealed = Some(pieces);
    Resource {
        id: resource_id(module, "file", name),
        module: module.into(),
        together: None,
        after: Vec::new(),
        spec: Spec::File(spec),
    }
}
