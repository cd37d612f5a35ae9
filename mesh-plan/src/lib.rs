//! mesh-plan: the mesh's decisions, as pure functions of values.
//!
//! **mesh-plan performs no IO**: it reads no files, opens no sockets, spawns nothing and reads
//! no clock. Time, when a decision needs it, is an argument (`now`); catalogues, inventories,
//! declarations, reports and plans arrive as [`mesh_model`] values. The binaries carry out what
//! it decides.
//!
//! # Where to start
//! - [`compose()`](compose::compose): a node's declaration from the catalogue and the
//!   inventory (module defaults, then the mesh layer, then the node layer).
//! - [`settings_change()`](settings::settings_change): what replacing a settings layer adds,
//!   changes and removes, and whether it is refused (the rule “A settings layer is read before it
//!   is replaced”).
//! - [`diff()`](diff::diff): what a push would change against what a node was last sent, with
//!   the container fields that recreate (the rule “A push says what it will change”).
//! - [`decide_push()`](moves::decide_push): whether a node's push is held because a running
//!   container's mount would move (the rule “A moved mount is held”).
//! - [`orphaned_settings()`](orphans::orphaned_settings): the keys a module's new version no
//!   longer accepts (or accepts with another type) that a layer still sets, and what each node
//!   gets in their place.
//! - [`attribute()`](attribution::attribute) and [`DependencyGraph`]:
//!   a merge's changed paths to modules (the rule “Changed paths name their modules”), and the
//!   affected modules in tiers.
//! - [`supersede()`](plans::supersede), [`close()`](plans::close), [`behind()`](plans::behind):
//!   plans over time (the rules “A newer merge takes over an older plan” and “Behind means an open
//!   plan has not done it yet”).
//! - [`step()`](rollout::step): one module's rollout as a state machine, events in and actions
//!   out (the rules “Grants before code”, “One machine first” and “The gate judges each node from
//!   its own send”).
//! - [`plan_waves()`](waves::plan_waves), [`waves::progress::step`] and
//!   [`waves::windows`]: a module's nodes in waves, a wave rollout as a state machine (this
//!   plan's answers only, the failure budget, pauses, approvals) and the hours a wave may start
//!   in (the rule “A change reaches the fleet in waves”).
//! - [`preview::Walk`]: what a plan's rollouts would change on each node, module by module,
//!   diffed as `plan NODE --diff` diffs (the merge's preview).
//! - [`notify::Notifier`]: which changes of state are worth a message, once each, coalesced,
//!   and which receiver takes which ([`notify::Filter`]); [`notify::format`] writes them as a
//!   webhook's JSON or a chat line.
//! - [`merge`]: the controller's decisions while it carries a plan out — where a merge's changed
//!   paths are read from, a report read for one module, what a stopped module holds back, where
//!   a plan stands when a drive ends.
//!
//! # Invariants
//! - No IO, no clock, no spawning, no global state: the same inputs give the same outputs.
//! - Decisions are values (enums of actions and verdicts, matched exhaustively) that the
//!   binaries execute; nothing here carries anything out.
//! - Every output a person reads has a text rendering and a serializable form, both tested as
//!   insta snapshots.
//! - Work grows linearly with its input (see the benchmarks in `benches/`).

pub mod attribution;
pub mod compose;
pub mod diff;
pub mod merge;
pub mod moves;
pub mod notify;
pub mod orphans;
pub mod plans;
pub mod preview;
pub mod rollout;
pub mod settings;
pub mod waves;

#[cfg(test)]
mod fixture;

pub use attribution::{attribute, tiers, Attribution, DependencyGraph, TierError, Tiers};
pub use compose::{compose, unset_required, ComposeError, ComposeProblem, Unset};
pub use diff::{diff, DeclarationDiff};
pub use moves::{could_move, decide_push, moves, Move, PushDecision};
pub use orphans::{orphaned_settings, Orphan, Orphans};
pub use plans::{behind, close, supersede, Behind, Supersession};
pub use rollout::{step, Action, Event, RolloutSpec, RolloutState};
pub use settings::{settings_change, SettingsChange, SettingsDecision};
