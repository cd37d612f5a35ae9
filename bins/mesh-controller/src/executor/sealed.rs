//! A declaration as its node is sent it: each secret it uses sealed again to that node's age
//! key alone (the rule “A secret is readable only where it is used”). The value is opened in
//! this process's memory only, with the mesh key (or the next key of a rotation under way, or
//! a key a rotation retired: a deployed build keeps the secret files of its commit,
//! `crate::secrets::retired`), and zeroized once sealed again; the
//! declaration recorded as sent keeps the mesh key's ciphertext, and the same digest
//! (`Declaration::digest` counts a secret by its keyed digest).
//!
//! A node with no age key (none enrolled, and not a host of this process) is refused a
//! declaration that uses a secret, naming node and module.

use crate::error::{Error, Result};
use crate::home::Home;
use mesh_model::declaration::{Outgoing, Spec};
use std::borrow::Cow;
use std::path::PathBuf;

/// Where a node's host keeps its state when it runs in this process (the embedded fleet's
/// `Fleet::host_state_dir`): its age key is there. `None` for a host elsewhere.
pub(crate) type HostStateDir<'f> = &'f dyn Fn(&str) -> Option<PathBuf>;

/// `declaration` with its secrets sealed to its node's key alone; the declaration itself when
/// it uses none (nothing is read then).
///
/// # Errors
/// The node has no age key ([`Error::Node`], naming the modules whose secrets it would get);
/// a secret no key of the mesh opens; a key file that cannot be read.
pub(super) fn for_its_node<'d>(
    home: &Home,
    host_state_dir: HostStateDir<'_>,
    keys: &mut Option<mesh_secrets::Keyring>,
    outgoing: &'d Outgoing,
) -> Result<Cow<'d, Outgoing>> {
    let declaration = outgoing.declaration();
    if !declaration.holds_secrets() {
        return Ok(Cow::Borrowed(outgoing));
    }
    let node = &declaration.node;
    let embedded = host_state_dir(node);
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
                 key (`mesh-host keygen` on it, then `mesh-controller node enroll {node}` with \
                 its age key); nothing was sent",
                modules
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        });
    };
    if keys.is_none() {
        *keys = Some(crate::secrets::keyring(home)?);
    }
    let keys = keys.as_ref().expect("just read");
    let mut resealed = declaration.clone();
    for (module, key, value) in resealed.secrets_mut() {
        *value = keys
            .reseal(value, &recipient)
            .map_err(|source| Error::Node {
                node: node.clone(),
                doing: format!("sealing the secret `{key}` of `{module}` to `{node}`'s key"),
                source: Box::new(Error::Invalid {
                    what: "the secret cannot be sealed again".into(),
                    source: Some(Box::new(source)),
                }),
            })?;
    }
    Ok(Cow::Owned(outgoing.resealed(resealed)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_model::declaration::Declaration;
    use mesh_model::secret::SealedPiece;
    use mesh_test_support::sealed::{password_pieces, sealed_file};

    /// A host elsewhere: no state directory in this process.
    fn elsewhere(_: &str) -> Option<PathBuf> {
        None
    }

    fn declaration(home: &Home) -> Outgoing {
        let secret = crate::secrets::seal(home, b"hunter2").unwrap();
        Outgoing::new(Declaration::new(
            "far",
            vec![sealed_file(
                "db",
                "creds",
                "/etc/creds",
                password_pieces(secret),
            )],
        ))
    }

    #[test]
    fn a_node_with_no_age_key_is_refused_by_name_and_an_enrolled_one_gets_its_own_ciphertext() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::new(dir.path());
        let sent = declaration(&home);
        let refused = for_its_node(&home, &elsewhere, &mut None, &sent).unwrap_err();
        let said = format!("{:#}", anyhow::Error::from(refused));
        assert!(
            said.contains("`far` has no age key") && said.contains("secrets of `db`"),
            "{said}"
        );

        let far = mesh_secrets::Identity::generate();
        let other = mesh_secrets::Identity::generate();
        crate::secrets::enroll_age_key(&home, "far", &far.recipient().to_string()).unwrap();
        let resealed = for_its_node(&home, &elsewhere, &mut None, &sent).unwrap();
        assert_eq!(resealed.digest(), sent.digest(), "the same digest");
        assert_eq!(
            resealed.declaration().digest(),
            sent.digest(),
            "the same digest, made again"
        );
        let Spec::File(file) = &resealed.declaration().resources[0].spec else {
            panic!("a file")
        };
        let Some([_, SealedPiece::Secret { value, .. }, _]) = file.sealed.as_deref() else {
            panic!("a secret")
        };
        assert_eq!(far.open(value).unwrap().as_slice(), b"hunter2");
        assert!(
            other.open(value).is_err(),
            "another node's key cannot open it"
        );
        let mesh = crate::secrets::mesh_key(&home).unwrap();
        assert!(mesh.open(value).is_err(), "sealed to the node alone");
    }
}
