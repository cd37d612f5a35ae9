//! Plans over time: a newer merge's plan supersedes older open ones (the rule “A newer merge takes
//! over an older plan” ), and what "behind" means (the rule “Behind means an open plan has not done
//! it yet”).
//!
//! Start at [`supersede`]: given a new plan (its changed modules in `modules`) and every plan the
//! mesh keeps, it says which older plans end `superseded{by}` and which of their modules join
//! the new plan before its tiers are computed. [`behind`] lists the modules open plans have yet
//! to build or roll out — the one answer to "behind", with no second comparison of commits.

use mesh_model::plan::{Plan, PlanState, RolloutOutcome};
use serde::Serialize;
use std::collections::BTreeSet;

/// An older plan the new one takes over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct SupersededPlan {
    /// The older plan's id.
    pub id: String,
    /// When it was made.
    pub made_at: u64,
    /// Its modules not yet built: they join the new plan.
    pub unbuilt: Vec<String>,
    /// Its modules built but not yet rolled out to the end: they join the new plan too, so no
    /// decided rollout is lost (a byte-identical rebuild is not redeployed where it runs).
    pub unsent: Vec<String>,
    /// The state it ends in: [`PlanState::Superseded`] naming the new plan.
    pub state: PlanState,
}

/// What superseding decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Supersession {
    /// The new plan's modules: its own changed modules and those folded in, before tiers.
    pub modules: BTreeSet<String>,
    /// The older plans it takes over, oldest first.
    pub superseded: Vec<SupersededPlan>,
}

/// Where a plan stands in the order plans were made: by `made_at` (never by commit), a tie
/// broken by the id's number (`plan-9` before `plan-10`: its trailing digits, compared as a
/// number), and then by the id itself.
fn made_order(plan: &Plan) -> (u64, Option<u64>, &str) {
    (plan.made_at, id_number(&plan.id), &plan.id)
}

/// The number an id ends with (`plan-10` → 10), if it ends with one.
fn id_number(id: &str) -> Option<u64> {
    let digits = id.len() - id.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    id[id.len() - digits..].parse().ok()
}

/// Whether `plan` was made before `newer`.
fn made_before(plan: &Plan, newer: &Plan) -> bool {
    made_order(plan) < made_order(newer)
}

/// The modules of `plan` not yet built, and those built and not rolled out to the end, each in
/// the plan's order.
fn unfinished(plan: &Plan) -> (Vec<&String>, Vec<&String>) {
    let mut unbuilt = Vec::new();
    let mut unsent = Vec::new();
    for module in &plan.modules {
        match plan.rollouts.get(module) {
            None => unbuilt.push(module),
            Some(rollout) => match (&rollout.build, &rollout.outcome) {
                (None, _) => unbuilt.push(module),
                (Some(_), None) => unsent.push(module),
                (Some(_), Some(RolloutOutcome::Done | RolloutOutcome::Stopped { .. })) => {}
            },
        }
    }
    (unbuilt, unsent)
}

/// Decides what `newer` takes over from the older open plans for the same repository and branch.
///
/// Plans of another repository or branch, plans that are not open (done, stopped, superseded,
/// closed) and plans made after `newer` are left alone. A module whose rollout stopped in an
/// older plan is not folded in: a person decides about it.
///
/// # Guarantees
/// Pure; the result's `modules` always contains `newer.modules`.
pub fn supersede(newer: &Plan, plans: &[Plan]) -> Supersession {
    let mut older: Vec<&Plan> = plans
        .iter()
        .filter(|p| {
            p.id != newer.id
                && p.repository == newer.repository
                && p.branch == newer.branch
                && p.state.is_open()
                && made_before(p, newer)
        })
        .collect();
    older.sort_by(|a, b| made_order(a).cmp(&made_order(b)));
    // Names gathered by reference, sorted once, and made owned once each (a name folded in
    // from two plans is not copied twice).
    let mut modules: Vec<&str> = newer.modules.iter().map(String::as_str).collect();
    let superseded = older
        .into_iter()
        .map(|plan| {
            let (unbuilt, unsent) = unfinished(plan);
            modules.extend(unbuilt.iter().map(|m| m.as_str()));
            modules.extend(unsent.iter().map(|m| m.as_str()));
            SupersededPlan {
                id: plan.id.clone(),
                made_at: plan.made_at,
                unbuilt: unbuilt.into_iter().cloned().collect(),
                unsent: unsent.into_iter().cloned().collect(),
                state: PlanState::Superseded {
                    by: newer.id.clone(),
                },
            }
        })
        .collect();
    modules.sort_unstable();
    modules.dedup();
    Supersession {
        modules: modules.into_iter().map(str::to_owned).collect(),
        superseded,
    }
}

/// Why a plan cannot be closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloseError {
    /// Only an open plan is closed; this one has ended.
    #[error("plan `{id}` is not open (it is {state})")]
    NotOpen {
        /// The plan.
        id: String,
        /// The state it is in, in a word.
        state: &'static str,
    },
}

/// A plan state in a word, as status prints it.
pub fn state_word(state: &PlanState) -> &'static str {
    match state {
        PlanState::Building => "building",
        PlanState::RollingOut => "rolling-out",
        PlanState::Done => "done",
        PlanState::Stopped { .. } => "stopped",
        PlanState::Superseded { .. } => "superseded",
        PlanState::Closed { .. } => "closed",
    }
}

/// The state a person's `plans close ID [--note TEXT]` gives an open plan; a closed plan is
/// never resumed.
///
/// # Errors
/// [`CloseError::NotOpen`] for a plan that has already ended.
pub fn close(plan: &Plan, note: &str) -> Result<PlanState, CloseError> {
    if plan.state.is_open() {
        Ok(PlanState::Closed {
            note: note.to_owned(),
        })
    } else {
        Err(CloseError::NotOpen {
            id: plan.id.clone(),
            state: state_word(&plan.state),
        })
    }
}

/// What a module that is behind waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Waiting {
    /// Its build.
    Build,
    /// Its rollout (built, not yet applied everywhere).
    RollOut,
}

/// A module an open plan decided to rebuild or roll out and has not yet.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub struct Behind {
    /// The module.
    pub module: String,
    /// The open plan that decided it.
    pub plan: String,
    /// What it waits for.
    pub waiting: Waiting,
}

/// Every module behind: those the open plans have yet to build or roll out, sorted by module.
///
/// This is the only answer to "behind" (`status`, `build --behind`, `push --behind`): a module
/// no open plan names is never behind, whatever commit it was built from. A module whose
/// rollout stopped is not listed: status lists stopped rollouts with their node and reason.
pub fn behind(plans: &[Plan]) -> Vec<Behind> {
    let mut out = Vec::new();
    for plan in plans.iter().filter(|p| p.state.is_open()) {
        let (unbuilt, unsent) = unfinished(plan);
        out.extend(unbuilt.into_iter().map(|module| Behind {
            module: module.clone(),
            plan: plan.id.clone(),
            waiting: Waiting::Build,
        }));
        out.extend(unsent.into_iter().map(|module| Behind {
            module: module.clone(),
            plan: plan.id.clone(),
            waiting: Waiting::RollOut,
        }));
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_model::build::ArchiveRef;
    use mesh_model::plan::ModuleRollout;
    use std::collections::BTreeMap;

    /// A plan from a line: `id repository branch made_at state module[:built|:done|:stopped]...`.
    fn plan(line: &str) -> Plan {
        let mut words = line.split_whitespace();
        let mut next = || words.next().unwrap().to_owned();
        let (id, repository, branch) = (next(), next(), next());
        let made_at = next().parse().unwrap();
        let state = match next().as_str() {
            "building" => PlanState::Building,
            "rolling-out" => PlanState::RollingOut,
            "done" => PlanState::Done,
            "closed" => PlanState::Closed {
                note: "by hand".into(),
            },
            other => panic!("state {other}"),
        };
        let mut modules = Vec::new();
        let mut rollouts = BTreeMap::new();
        for word in words {
            let (module, progress) = word.split_once(':').unwrap_or((word, ""));
            modules.push(module.to_owned());
            let archive = ArchiveRef {
                digest: format!("sha256:{module}"),
                size: 1,
            };
            let rollout = match progress {
                "" => continue,
                "built" => ModuleRollout {
                    build: Some(archive),
                    ..ModuleRollout::default()
                },
                "done" => ModuleRollout {
                    build: Some(archive),
                    outcome: Some(RolloutOutcome::Done),
                    ..ModuleRollout::default()
                },
                "stopped" => ModuleRollout {
                    build: Some(archive),
                    outcome: Some(RolloutOutcome::Stopped {
                        node: "n1".into(),
                        reason: "no report".into(),
                    }),
                    ..ModuleRollout::default()
                },
                other => panic!("progress {other}"),
            };
            rollouts.insert(module.to_owned(), rollout);
        }
        Plan {
            id,
            repository,
            branch,
            commit: "c0ffee".into(),
            made_at,
            modules,
            tiers: Vec::new(),
            rollouts,
            state,
        }
    }

    /// Supersedes with the first line as the new plan and the rest as the kept plans.
    fn check(lines: &str) -> String {
        let plans: Vec<Plan> = lines
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(plan)
            .collect();
        let result = supersede(&plans[0], &plans[1..]);
        serde_json::to_string_pretty(&result).unwrap()
    }

    /// The incident behind “A newer merge takes over an older plan”: three merges within four
    /// minutes made three plans that all ran; the middle one sat "building" for hours. The newest
    /// takes over both older plans' unbuilt work.
    #[test]
    fn a_newer_plan_folds_in_the_unbuilt_modules_of_older_open_plans() {
        insta::assert_snapshot!(check(
            "p3 catalogue main 300 building web
             p1 catalogue main 100 rolling-out base:done net:built agent
             p2 catalogue main 200 building media:built tools
             px other main 150 building elsewhere
             pb catalogue dev 150 building branchy
             pd catalogue main 50 done old:done
             pc catalogue main 60 closed forgotten
             p4 catalogue main 400 building later"
        ));
    }

    /// Plans were ordered by id as a string, so `plan-10` came before
    /// `plan-9` — hidden while `made_at` was forced to increase. Two plans made in one second
    /// are ordered by their number.
    #[test]
    fn plans_made_in_one_second_are_ordered_by_number_not_by_id_as_text() {
        let newer = plan("plan-10 catalogue main 100 building b");
        let older = plan("plan-9 catalogue main 100 building a");
        let taken = supersede(&newer, std::slice::from_ref(&older));
        assert_eq!(
            taken.superseded.iter().map(|p| &p.id).collect::<Vec<_>>(),
            ["plan-9"]
        );
        assert_eq!(
            taken.modules.iter().collect::<Vec<_>>(),
            ["a", "b"],
            "plan-10 takes over plan-9's unbuilt module"
        );
        // And plan-9 does not take over plan-10, which was made after it.
        assert!(supersede(&older, std::slice::from_ref(&newer))
            .superseded
            .is_empty());
        // Oldest first, by number within a second, by time across seconds.
        let newest = plan("plan-11 catalogue main 101 building c");
        let kept = [
            plan("plan-10 catalogue main 100 building b"),
            plan("plan-2 catalogue main 100 building x"),
            plan("plan-9 catalogue main 100 building a"),
            plan("plan-1 catalogue main 99 building y"),
        ];
        assert_eq!(
            supersede(&newest, &kept)
                .superseded
                .iter()
                .map(|p| p.id.as_str())
                .collect::<Vec<_>>(),
            ["plan-1", "plan-2", "plan-9", "plan-10"]
        );
        // When plans were made wins over their numbers.
        let made_later = plan("plan-3 catalogue main 200 building z");
        assert!(
            supersede(&plan("plan-4 catalogue main 150 building w"), &[made_later])
                .superseded
                .is_empty()
        );
    }

    #[test]
    fn a_superseded_or_closed_plan_is_not_open_and_cannot_be_closed_again() {
        let mut p = plan("p1 catalogue main 100 building a");
        assert_eq!(
            close(&p, "waits on nothing").unwrap(),
            PlanState::Closed {
                note: "waits on nothing".into()
            }
        );
        p.state = supersede(&plan("p2 catalogue main 200 building b"), &[p.clone()]).superseded[0]
            .state
            .clone();
        assert!(!p.state.is_open());
        assert_eq!(
            close(&p, "").unwrap_err().to_string(),
            "plan `p1` is not open (it is superseded)"
        );
        p.state = PlanState::Closed { note: "x".into() };
        assert!(!p.state.is_open());
    }

    /// The incident behind “Behind means an open plan has not done it yet”: status called 69
    /// modules behind when 11 had changed. Behind is only what open plans have yet to do.
    #[test]
    fn behind_lists_exactly_what_open_plans_have_not_finished() {
        let plans = [
            plan("p1 catalogue main 100 rolling-out a:done b:built c d:stopped"),
            plan("p2 other main 100 building e"),
            plan("p0 catalogue main 50 done f:done"),
            plan("px catalogue main 60 closed g"),
        ];
        insta::assert_json_snapshot!(behind(&plans));
    }
}
