//! Held moves: a push that gives a running container a different host directory at a mount it
//! already has is held for that node until the person says `--move <module>` (the rule “A moved
//! mount is held” The incident behind “A settings layer is read before it is replaced”).
//!
//! Start at [`decide_push`]. What the node was last sent stands for what runs there: a container
//! in the sent declaration is a running container.
//!
//! A move is data moving, or — as in the seed's incident — a container about to run on an empty
//! directory because a placement was lost. These are **not** moves and are never held: a first
//! send to a node, a new container, a mount added or removed, and a changed image on its own.
//! A changed image together with a mount whose source changed is still a move: the data does not
//! follow either way.

use mesh_model::declaration::{Declaration, Spec};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A running container's mount whose host directory would change.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Move {
    /// The module.
    pub module: String,
    /// The container's resource id.
    pub container: String,
    /// The mount's path inside the container.
    pub at: String,
    /// The host directory it was sent with.
    pub from: String,
    /// The host directory it would be sent with.
    pub to: String,
}

impl fmt::Display for Move {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "module `{}`, container `{}`, mount `{}`: from `{}` to `{}`",
            self.module, self.container, self.at, self.from, self.to
        )
    }
}

/// Whether a push of `new` could hold a move at all, whatever its node was sent: only a
/// container with a mount can move. When this is false, [`moves`] is empty for every `sent`,
/// so a caller need not read what was sent (a rollout over a fleet reads nothing per node).
pub fn could_move(new: &Declaration) -> bool {
    // Nothing but a container mounts places (a job's container is gone once it has run).
    new.resources.iter().any(
        |resource| matches!(&resource.spec, Spec::Container(container) if !container.mounts.is_empty()),
    )
}

/// Every move in a push of `new` to a node that was last sent `sent` (`None`: never).
///
/// # Guarantees
/// Empty for a first send, for containers the sent declaration does not hold, for mounts added
/// or removed (a mount is matched by its path inside the container), and for a changed image
/// whose mounts keep their sources.
pub fn moves(sent: Option<&Declaration>, new: &Declaration) -> Vec<Move> {
    let Some(sent) = sent else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for resource in &new.resources {
        let Some(before) = sent.resource(&resource.id) else {
            continue;
        };
        // Only a container that was sent as one can move: nothing else mounts places.
        let (Spec::Container(container), Spec::Container(old)) = (&resource.spec, &before.spec)
        else {
            continue;
        };
        let old_sources: BTreeMap<&str, &str> = old
            .mounts
            .iter()
            .map(|m| (m.at.as_str(), m.source.as_str()))
            .collect();
        for mount in &container.mounts {
            match old_sources.get(mount.at.as_str()) {
                Some(from) if *from != mount.source => out.push(Move {
                    module: resource.module.clone(),
                    container: resource.id.clone(),
                    at: mount.at.clone(),
                    from: (*from).to_owned(),
                    to: mount.source.clone(),
                }),
                Some(_) | None => {}
            }
        }
    }
    out.sort();
    out
}

/// Whether a node's push goes ahead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "kebab-case")]
pub enum PushDecision {
    /// Send the declaration; `acknowledged` lists the moves `--move` allowed.
    Send {
        /// Moves made because their module was named with `--move`.
        acknowledged: Vec<Move>,
    },
    /// Hold this node's push: it would move data no one acknowledged. Other nodes go ahead.
    Hold {
        /// The moves not acknowledged.
        moves: Vec<Move>,
    },
}

/// Decides one node's push: held while any move's module is not in `allowed_moves`
/// (`push … --move MODULE`).
pub fn decide_push(
    sent: Option<&Declaration>,
    new: &Declaration,
    allowed_moves: &BTreeSet<String>,
) -> PushDecision {
    let (acknowledged, held): (Vec<Move>, Vec<Move>) = moves(sent, new)
        .into_iter()
        .partition(|m| allowed_moves.contains(&m.module));
    if held.is_empty() {
        PushDecision::Send { acknowledged }
    } else {
        PushDecision::Hold { moves: held }
    }
}

impl PushDecision {
    /// What a person reads for `node`: nothing for a plain send, the moves for a hold.
    pub fn render_text(&self, node: &str) -> String {
        match self {
            PushDecision::Send { acknowledged } => acknowledged
                .iter()
                .map(|m| format!("{node}: moving as told by --move: {m}\n"))
                .collect(),
            PushDecision::Hold { moves } => {
                let mut out = format!(
                    "{node}: held: this push would give a running container another host \
                     directory\n"
                );
                for m in moves {
                    out.push_str(&format!("  {m}\n"));
                }
                let modules: BTreeSet<&str> = moves.iter().map(|m| m.module.as_str()).collect();
                out.push_str(&format!(
                    "  to send it: push {node} {}\n",
                    modules
                        .iter()
                        .map(|m| format!("--move {m}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                ));
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compose::compose;
    use crate::fixture;
    use mesh_model::inventory::LayerScope;
    use serde_json::{json, Value};

    const MESH: &str = r#"
        //- modules/media/module.toml
        name = "media"
        [settings]
        image = "localhost/media:1"
        [places.config]
        default = "/srv/media/config"
        [places.previews]
        default = "/srv/media/previews"
        [containers.server]
        image = "{{ image }}"
        mounts = [{ place = "config", at = "/config" }, { place = "previews", at = "/previews" }]
        //- modules/other/module.toml
        name = "other"
        [places.data]
        default = "/srv/other"
        [containers.app]
        image = "localhost/other:1"
        mounts = [{ place = "data", at = "/data" }]
        //- inventory.toml
        bus-node = "home"
        [nodes.home]
        [assignments]
        media = ["home"]
        other = ["home"]
    "#;

    fn composed(media: Option<Value>, other: Option<Value>) -> Declaration {
        let (catalogue, mut inventory) = fixture::mesh(MESH);
        let node = LayerScope::Node("home".into());
        if let Some(layer) = media {
            inventory.layers.set("media", node.clone(), layer);
        }
        if let Some(layer) = other {
            inventory.layers.set("other", node, layer);
        }
        compose(&catalogue, &inventory, "home").unwrap()
    }

    /// Decides the push and shows what a person reads and the data.
    fn check(sent: Option<&Declaration>, new: &Declaration, allowed: &[&str]) -> String {
        let allowed = allowed.iter().map(|m| (*m).to_owned()).collect();
        let decision = decide_push(sent, new, &allowed);
        format!(
            "{}---\n{}",
            decision.render_text("home"),
            serde_json::to_string_pretty(&decision).unwrap()
        )
    }

    /// The rules “A settings layer is read before it is replaced” and “A moved mount is held”: a
    /// set of one placement dropped the node's other placements, and the next plan mounted the
    /// media server's configuration from an empty default directory. The push must be held, naming
    /// module, mount and both directories.
    #[test]
    fn push_holds_a_running_containers_moved_mount() {
        let sent = composed(
            Some(json!({"places": {"config": "/tank/media/config", "previews": "/tank/previews"}})),
            None,
        );
        let lost_placement = composed(
            Some(json!({"places": {"previews": "/fast/previews"}})),
            None,
        );
        insta::assert_snapshot!(check(Some(&sent), &lost_placement, &[]));
    }

    /// A declaration without a mounted container moves nothing, whatever was sent; one with
    /// one may.
    #[test]
    fn only_a_mounted_container_could_move() {
        let with_mounts = composed(None, None);
        assert!(could_move(&with_mounts));
        let mut files_only = with_mounts.clone();
        files_only
            .resources
            .retain(|r| !matches!(r.spec, Spec::Container(_)));
        assert!(!could_move(&files_only));
        assert!(moves(Some(&with_mounts), &files_only).is_empty());
    }

    #[test]
    fn move_module_sends_only_that_modules_moves() {
        let sent = composed(None, None);
        let both = composed(
            Some(json!({"places": {"config": "/tank/config"}})),
            Some(json!({"places": {"data": "/tank/other"}})),
        );
        insta::assert_snapshot!("one_module_allowed", check(Some(&sent), &both, &["media"]));
        insta::assert_snapshot!(
            "both_modules_allowed",
            check(Some(&sent), &both, &["media", "other"])
        );
    }

    #[test]
    fn what_is_not_a_move_is_sent() {
        let sent = composed(None, None);
        let nothing = BTreeSet::new();
        let send = PushDecision::Send {
            acknowledged: Vec::new(),
        };
        // A first send.
        assert_eq!(decide_push(None, &sent, &nothing), send);
        // A changed image alone.
        let new_image = composed(Some(json!({"image": "localhost/media:2"})), None);
        assert_eq!(decide_push(Some(&sent), &new_image, &nothing), send);
        // A new container.
        let mut without_other = sent.clone();
        without_other.resources.retain(|r| r.module != "other");
        assert_eq!(decide_push(Some(&without_other), &sent, &nothing), send);
        // A mount added, and a mount removed.
        let mut fewer_mounts = sent.clone();
        for r in &mut fewer_mounts.resources {
            if let Spec::Container(c) = &mut r.spec {
                c.mounts.retain(|m| m.at != "/previews");
            }
        }
        assert_eq!(decide_push(Some(&fewer_mounts), &sent, &nothing), send);
        assert_eq!(decide_push(Some(&sent), &fewer_mounts, &nothing), send);
        // Nothing changed.
        assert_eq!(decide_push(Some(&sent), &sent, &nothing), send);
    }

    #[test]
    fn a_changed_image_with_a_moved_mount_is_still_a_move() {
        let sent = composed(None, None);
        let both = composed(
            Some(json!({"image": "localhost/media:2", "places": {"config": "/tank/config"}})),
            None,
        );
        let decision = decide_push(Some(&sent), &both, &BTreeSet::new());
        assert!(matches!(decision, PushDecision::Hold { moves } if moves.len() == 1));
    }
}
