//! A plan's preview (`merge --plan-only`, `plans show --preview`).

/// What a plan's rollouts would do across the fleet (`merge --plan-only`, `plans show
/// --preview`): per tier and module, the first machine, then every node by what would happen
/// to it.
pub fn preview(preview: &mesh_controller::Preview) -> String {
    use std::fmt::Write as _;
    let mut out = format!("preview of {}: nothing is built or sent\n", preview.plan);
    for tier in &preview.tiers {
        for module in &tier.modules {
            let _ = writeln!(out, "tier {}: `{}`", tier.tier, module.module);
            if let Some(refused) = &module.refused {
                let _ = writeln!(out, "  not built: it does not validate:");
                for line in refused.lines() {
                    let _ = writeln!(out, "    {line}");
                }
                continue;
            }
            match &module.first {
                Some(first) => {
                    let _ = writeln!(out, "  first machine: {first}");
                }
                None => {
                    let _ = writeln!(out, "  first machine: none (no node would be sent)");
                }
            }
            out.push_str(&changes(&module.changes));
            if let Some(orphans) = &module.orphans {
                out.push_str(&orphaned(orphans, &module.orphaned_nodes));
            }
            for held in &module.held {
                let _ = writeln!(
                    out,
                    "  held {}: {} (send it with --move {})",
                    held.node,
                    held.moves.join("; "),
                    module.module
                );
            }
            for held in &module.unset {
                let _ = writeln!(
                    out,
                    "  held {}: {} (a layer setting it sends it)",
                    held.node,
                    held.unset
                        .iter()
                        .map(|unset| format!("{unset} is required and no layer sets it"))
                        .collect::<Vec<_>>()
                        .join("; ")
                );
            }
            for window in &module.in_window {
                let _ = writeln!(
                    out,
                    "  in a window {}: {} (left alone until it closes)",
                    window.node,
                    window.windows.join("; ")
                );
            }
            if !module.unchanged.is_empty() {
                let _ = writeln!(out, "  unchanged: {}", module.unchanged.join(", "));
            }
            if !module.not_running.is_empty() {
                let _ = writeln!(
                    out,
                    "  not running (not sent): {}",
                    module.not_running.join(", ")
                );
            }
        }
    }
    out
}

/// A module's orphaned settings, nodes that would lose the same settings named together (the
/// first five, then a count).
fn orphaned(orphans: &mesh_plan::Orphans, nodes: &[String]) -> String {
    use std::fmt::Write as _;
    let mut groups: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
    for node in nodes {
        let text = orphans.render_text(&orphans.for_node(node), "    ");
        groups.entry(text).or_default().push(node);
    }
    let mut out = String::new();
    for (text, nodes) in groups {
        let named = match nodes.len() {
            0..=5 => nodes.join(", "),
            n => format!("{} and {} more", nodes[..5].join(", "), n - 5),
        };
        let _ = writeln!(
            out,
            "  orphaned settings on {named} (dropped by this version):"
        );
        out.push_str(&text);
    }
    out
}

/// Each node's changes as `plan NODE --diff` shows them, resources by id; nodes whose changes
/// are the same as an earlier node's named together after it ("same as …").
fn changes(changes: &[mesh_controller::NodeChange]) -> String {
    use std::fmt::Write as _;
    // The diff's lines but its first (which names the node), by what they say.
    let body = |change: &mesh_controller::NodeChange| -> String {
        change
            .diff
            .render_text()
            .lines()
            .skip(1)
            .map(|line| format!("    {line}\n"))
            .collect()
    };
    let mut groups: Vec<(String, String, Vec<&str>)> = Vec::new();
    for change in changes {
        let counts = if change.first_send {
            format!("first send, {} resource(s)", change.added)
        } else {
            format!(
                "{} added, {} changed, {} removed",
                change.added, change.changed, change.removed
            )
        };
        let text = body(change);
        match groups
            .iter_mut()
            .find(|(c, t, _)| *c == counts && *t == text)
        {
            Some((_, _, nodes)) => nodes.push(&change.node),
            None => groups.push((counts, text, vec![&change.node])),
        }
    }
    let mut out = String::new();
    for (counts, text, nodes) in groups {
        let _ = writeln!(out, "  changes {}: {counts}", nodes[0]);
        out.push_str(&text);
        let same = &nodes[1..];
        let named = match same.len() {
            0 => continue,
            1..=5 => same.join(", "),
            n => format!("{}, … {} ({n} nodes)", same[0], same[n - 1]),
        };
        let _ = writeln!(out, "  changes {named}: same as {}", nodes[0]);
    }
    out
}
