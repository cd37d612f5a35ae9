//! `runtimes`: who answered on the bus, against the inventory.

use super::*;

/// Each runtime heard, those heard without their modules, the nodes not heard, and what is
/// missing or running elsewhere.
pub fn runtimes(found: &Runtimes) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for r in &found.runtimes {
        let _ = writeln!(
            out,
            "{} on {}: answered in {} ms, {} bytes, modules: {}",
            r.service,
            r.node.as_deref().unwrap_or("(no node)"),
            r.answer_ms,
            r.answer_bytes,
            if r.modules.is_empty() {
                "none".to_owned()
            } else {
                r.modules.join(", ")
            }
        );
    }
    for m in &found.missing {
        let _ = writeln!(
            out,
            "missing on {}: {} (assigned to it, not served there)",
            m.node,
            m.modules.join(", ")
        );
    }
    for e in &found.running_elsewhere {
        let _ = writeln!(
            out,
            "running elsewhere: {} on {} (assigned to {})",
            e.module,
            e.node,
            e.assigned_to.join(", ")
        );
    }
    for u in &found.not_heard {
        let _ = writeln!(
            out,
            "not heard: {} on {} (instance {}) said it is there after {} ms and not what it \
             serves; its modules are not known: none is said to be missing or running elsewhere",
            u.service,
            u.node.as_deref().unwrap_or("(no node)"),
            u.id,
            u.ping_ms
        );
    }
    for u in &found.unreadable {
        let _ = writeln!(
            out,
            "unreadable answer to {} from {}{}: {} (it begins `{}`)",
            u.asked,
            u.service.as_deref().unwrap_or("an unknown service"),
            match (&u.node, &u.id) {
                (Some(node), Some(id)) => format!(" on {node} (instance {id})"),
                (Some(node), None) => format!(" on {node}"),
                (None, Some(id)) => format!(" (instance {id})"),
                (None, None) => String::new(),
            },
            u.error,
            u.answer
        );
    }
    if !found.nodes_not_heard.is_empty() {
        let _ = writeln!(
            out,
            "nodes not heard: {}; their modules are not known",
            found.nodes_not_heard.join(", ")
        );
    }
    let _ = writeln!(
        out,
        "{} runtime(s) heard in {} ms",
        found.runtimes.len(),
        found.waited_ms
    );
    out
}

#[cfg(test)]
mod runtimes_tests {
    //! `runtimes` set against the inventory (the rule “Discovery waits for everyone who said they
    //! are there”): what is said of a heard node's modules, and that nothing is said of an unheard
    //! one's.

    use discovery::{RuntimeHeard, RuntimeUnheard};
    use mesh_bus::discovery::{self, Discovery};
    use mesh_controller::bus::compare_with_inventory;
    use mesh_controller::bus::Missing;
    use mesh_controller::bus::Runtimes;
    use mesh_model::inventory::Inventory;
    use mesh_model::inventory::InventoryFile;
    use std::time::Duration;

    /// Nodes `bus`, `a`, `b`, `c`: `base` everywhere, `agent` on `a`, `media` on `b`.
    fn inventory() -> Inventory {
        let file: InventoryFile = toml::from_str(
            r#"
            bus-node = "bus"
            [nodes.bus]
            [nodes.a]
            [nodes.b]
            [nodes.c]
            [assignments]
            base = ["bus", "a", "b", "c"]
            agent = ["a"]
            media = ["b"]
            "#,
        )
        .unwrap();
        Inventory {
            file,
            layers: Default::default(),
        }
    }

    fn heard(service: &str, node: &str, modules: &[&str], answer_ms: u64) -> RuntimeHeard {
        RuntimeHeard {
            service: service.into(),
            id: format!("id-{node}"),
            version: "0.1.0".into(),
            node: Some(node.into()),
            modules: modules.iter().map(|m| (*m).to_owned()).collect(),
            ping_time: Duration::from_millis(2),
            answer_time: Duration::from_millis(answer_ms),
            answer_size: 250,
        }
    }

    fn host(node: &str, modules: &[&str]) -> RuntimeHeard {
        heard(discovery::HOST_SERVICE, node, modules, 12)
    }

    fn unheard(node: Option<&str>) -> RuntimeUnheard {
        RuntimeUnheard {
            service: discovery::HOST_SERVICE.into(),
            id: "id-quiet".into(),
            node: node.map(str::to_owned),
            ping_time: Duration::from_millis(3),
        }
    }

    fn compare(runtimes: Vec<RuntimeHeard>, unheard: Vec<RuntimeUnheard>) -> Runtimes {
        compare_with_inventory(
            &inventory(),
            Discovery {
                runtimes,
                unheard,
                waited: Duration::from_millis(760),
            },
        )
    }

    #[test]
    fn every_node_serving_what_it_is_assigned_says_nothing_missing() {
        let found = compare(
            vec![
                host("bus", &["base", "mesh-bus"]),
                host("a", &["agent", "base"]),
                host("b", &["base", "media"]),
                host("c", &["base"]),
            ],
            vec![],
        );
        assert_eq!(found.missing, []);
        assert_eq!(found.running_elsewhere, []);
        assert!(found.nodes_not_heard.is_empty());
        assert_eq!(found.exit_code(), 0);
    }

    #[test]
    fn a_heard_node_lacking_a_module_has_it_missing_and_one_serving_anothers_runs_it_elsewhere() {
        let found = compare(
            vec![
                // The controller's machine is not a node, even when named like one.
                heard(discovery::CONTROLLER_SERVICE, "c", &[], 4),
                host("a", &["base"]),
                host("b", &["agent", "base", "media"]),
                host("bus", &["base", "mesh-bus"]),
                host("c", &["base"]),
            ],
            vec![],
        );
        assert_eq!(found.exit_code(), 3);
        insta::assert_snapshot!(super::runtimes(&found));
    }

    // The incident behind “Discovery waits for everyone who said they are there”: a runtime that
    // said it is there and not what it serves is never taken for one serving nothing.
    #[test]
    fn nothing_is_said_of_an_unheard_runtimes_modules() {
        let found = compare(
            vec![
                // `agent` is `a`'s: while `a` is unheard it is not called running elsewhere.
                host("b", &["agent", "base"]),
                host("bus", &["base", "mesh-bus"]),
            ],
            vec![unheard(Some("a"))],
        );
        // `b` is heard: its own missing module is still named; `c`, not heard, is not.
        assert_eq!(
            found.missing,
            [Missing {
                node: "b".into(),
                modules: vec!["media".into()]
            }]
        );
        assert_eq!(found.running_elsewhere, []);
        assert_eq!(found.nodes_not_heard, ["c"]);
        assert_eq!(found.exit_code(), 3);
        insta::assert_snapshot!(super::runtimes(&found));
    }

    #[test]
    fn an_unheard_runtime_naming_no_node_leaves_every_node_unknown() {
        let found = compare(
            vec![host("a", &[]), host("b", &["agent"])],
            vec![unheard(None)],
        );
        assert_eq!(found.missing, []);
        assert_eq!(found.running_elsewhere, []);
        assert_eq!(found.exit_code(), 3);
    }
}
