//! A declaration as its node is sent it: each secret it uses sealed again to that node's age
//! key alone (the rule “A secret is readable only where it is used”). The value is opened in
//! this process's memory only, with the mesh key, and zeroized once sealed again; the
//! declaration recorded as sent keeps the mesh key's ciphertext, and the same digest
//! (`Declaration::digest` counts a secret by its keyed digest).
//!
//! A node with no age key (none enrolled, and not a host of this process) is refused a
//! declaration that uses a secret, naming node and module.

use crate::error::{Error, Result};
use crate::fleet::Fleet;
use crate::home::Home;
use mesh_model::declaration::{Declaration, FileSpec, Spec};
use mesh_model::secret::SealedPiece;
use std::borrow::Cow;

/// `declaration` with its secrets sealed to its node's key alone; the declaration itself when
/// it uses none (nothing is read then).
///
/// # Errors
/// The node has no age key ([`Error::Node`], naming the modules whose secrets it would get);
/// a secret the mesh key cannot open; a key file that cannot be read.
pub(super) fn for_its_node<'d>(
    home: &Home,
    fleet: &dyn Fleet,
    mesh: &mut Option<mesh_secrets::MeshKey>,
    declaration: &'d Declaration,
) -> Result<Cow<'d, Declaration>> {
    if !declaration.holds_secrets() {
        return Ok(Cow::Borrowed(declaration));
    }
    let node = &declaration.node;
    let embedded = fleet.host_state_dir(node);
    let Some(recipient) = crate::secrets::node_recipient(home, node, embedded.as_deref())? else {
        let mut modules: Vec<&str> = declaration
            .resources
            .iter()
            .filter(|r| matches!(&r.spec, Spec::File(f) if f.sealed.is_some()))
            .map(|r| r.module.as_str())
            .collect();
        modules.dedup();
        return Err(Error::Node {
            node: node.clone(),
            doing: format!("sending `{node}` its declaration"),
            source: Box::new(Error::refused(format!(
                "`{node}` has no age key, and its declaration uses secrets of {}: enroll its \
                 key (`mesh-host keygen` on it, then `mesh-controller node enroll {node} … \
                 --age-key KEY`); nothing was sent",
                modules
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        });
    };
    if mesh.is_none() {
        *mesh = Some(crate::secrets::mesh_key(home)?);
    }
    let mesh = mesh.as_ref().expect("just read");
    let mut resealed = declaration.clone();
    for resource in &mut resealed.resources {
        let module = resource.module.clone();
        let Spec::File(FileSpec {
            sealed: Some(pieces),
            ..
        }) = &mut resource.spec
        else {
            continue;
        };
        for piece in pieces {
            if let SealedPiece::Secret { key, value } = piece {
                *value = mesh
                    .reseal(value, &recipient)
                    .map_err(|source| Error::Node {
                        node: node.clone(),
                        doing: format!(
                            "sealing the secret `{key}` of `{module}` to `{node}`'s key"
                        ),
                        source: Box::new(Error::Invalid {
                            what: "the secret cannot be sealed again".into(),
                            source: Some(Box::new(source)),
                        }),
                    })?;
            }
        }
    }
    Ok(Cow::Owned(resealed))
}
