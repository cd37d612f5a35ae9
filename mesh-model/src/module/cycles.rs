//! Dependency cycles among modules (or any named graph).

use std::collections::{BTreeMap, BTreeSet};

/// Every elementary cycle's members, each reported once (starting at its smallest name).
pub fn find_cycles(graph: &BTreeMap<&str, Vec<&str>>) -> Vec<Vec<String>> {
    // Tarjan's strongly connected components; a component of more than one node, or a node
    // depending on itself, is a cycle.
    struct State<'g> {
        index: usize,
        indices: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        components: Vec<Vec<String>>,
    }
    fn connect<'g>(node: &'g str, graph: &BTreeMap<&'g str, Vec<&'g str>>, s: &mut State<'g>) {
        s.indices.insert(node, s.index);
        s.low.insert(node, s.index);
        s.index += 1;
        s.stack.push(node);
        s.on_stack.insert(node);
        for &next in graph.get(node).map(Vec::as_slice).unwrap_or(&[]) {
            if !graph.contains_key(next) {
                continue;
            }
            if !s.indices.contains_key(next) {
                connect(next, graph, s);
                let low = s.low[node].min(s.low[next]);
                s.low.insert(node, low);
            } else if s.on_stack.contains(next) {
                let low = s.low[node].min(s.indices[next]);
                s.low.insert(node, low);
            }
        }
        if s.low[node] == s.indices[node] {
            let mut component = Vec::new();
            while let Some(member) = s.stack.pop() {
                s.on_stack.remove(member);
                component.push(member.to_owned());
                if member == node {
                    break;
                }
            }
            let self_loop = graph.get(node).is_some_and(|deps| deps.contains(&node));
            if component.len() > 1 || self_loop {
                s.components.push(cycle_order(component, graph));
            }
        }
    }
    let mut state = State {
        index: 0,
        indices: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for &node in graph.keys() {
        if !state.indices.contains_key(node) {
            connect(node, graph, &mut state);
        }
    }
    state.components.sort();
    state.components
}

/// Orders a strongly connected component as a cycle: from its smallest member, following
/// dependency edges inside the component, the shortest way back.
fn cycle_order(mut component: Vec<String>, graph: &BTreeMap<&str, Vec<&str>>) -> Vec<String> {
    component.sort();
    let members: BTreeSet<&str> = component.iter().map(String::as_str).collect();
    let start = component[0].as_str();
    // Breadth-first from start's dependencies back to start.
    let mut previous: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for &next in graph.get(node).map(Vec::as_slice).unwrap_or(&[]) {
            if !members.contains(next) {
                continue;
            }
            if next == start {
                let mut path = vec![node];
                while let Some(&before) = previous.get(path[path.len() - 1]) {
                    path.push(before);
                }
                if path.last() != Some(&start) {
                    path.push(start);
                }
                path.reverse();
                return path.into_iter().map(str::to_owned).collect();
            }
            if !previous.contains_key(next) {
                previous.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    component
}
