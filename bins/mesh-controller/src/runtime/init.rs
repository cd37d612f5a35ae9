//! A new mesh home (`mesh-controller init`), empty or holding the book's example mesh (six
//! modules, three nodes and their settings, with sandbox roots under `<home>/roots`).

use crate::error::{file_error, Error, Result};
use crate::home::{write_atomic, Home};
use mesh_model::inventory::{InventoryFile, Node, INVENTORY_FILE};
use std::collections::BTreeMap;

mod example {
    include!(concat!(env!("OUT_DIR"), "/example.rs"));
}
use example::EXAMPLE;

/// Makes a mesh home at `home`, refusing one that already holds an inventory. With
/// `example`, the home holds the book's example mesh; otherwise one node, `control`, holding
/// the bus, and no module.
///
/// # Errors
/// [`Error::Refused`] when the home already holds a mesh (nothing was changed); when a file
/// cannot be written.
pub fn init(home: &Home, example: bool) -> Result<()> {
    if home.root().join(INVENTORY_FILE).exists() {
        return Err(Error::Refused {
            reason: format!(
                "{} already holds a mesh ({INVENTORY_FILE}); nothing was changed",
                home.root().display()
            ),
        });
    }
    if example {
        for (path, bytes) in EXAMPLE {
            if *path == "README.md" {
                continue;
            }
            write_atomic(&home.root().join(path), bytes)?;
        }
        // The example's secret files are in clear in the book: sealed now, to this home's key.
        crate::secrets::secret_files::encrypt_clear_secret_files(home)?;
        let inventory = home.inventory()?;
        for node in inventory.file.nodes.keys() {
            sandbox_accounts(&home.node_root(node, &inventory))?;
        }
    } else {
        let mut nodes = BTreeMap::new();
        nodes.insert("control".to_owned(), Node::default());
        home.write_inventory(&InventoryFile {
            bus_node: "control".to_owned(),
            nodes,
            assignments: BTreeMap::new(),
            ..InventoryFile::default()
        })?;
        let modules = home.modules_dir();
        std::fs::create_dir_all(&modules).map_err(file_error("creating", &modules))?;
    }
    Ok(())
}

/// Gives a sandbox root the account files shadow-utils needs, with `root`, the example's
/// operator `alice`, and the groups the example uses; files already there are kept.
///
/// # Errors
/// When a file cannot be written.
pub(crate) fn sandbox_accounts(root: &std::path::Path) -> Result<()> {
    let etc = root.join("etc");
    let files: [(&str, &str, u32); 4] = [
        (
            "passwd",
            "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000:Alice:/home/alice:/bin/sh\n",
            0o644,
        ),
        (
            "group",
            "root:x:0:\nvideo:x:44:\nwheel:x:10:alice\nalice:x:1000:\n",
            0o644,
        ),
        (
            "gshadow",
            "root:*::\nvideo:*::\nwheel:*::alice\nalice:!::\n",
            0o640,
        ),
        (
            "shadow",
            "root:*:19000:0:99999:7:::\nalice:!:19000:0:99999:7:::\n",
            0o640,
        ),
    ];
    for (name, content, mode) in files {
        let path = etc.join(name);
        if !path.exists() {
            write_atomic(&path, content.as_bytes())?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                .map_err(file_error("setting the mode of", &path))?;
        }
    }
    Ok(())
}
