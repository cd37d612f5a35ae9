//! mesh-plan: the mesh's decisions, as pure functions of values.
//!
//! Start with [`compose`] (a node's declaration from the catalogue and the inventory), then
//! [`settings`] (what replacing a settings layer adds, changes and removes), [`diff`] (what a
//! push would change against what a node was last sent) and [`moves`] (which pushes move a
//! running container's data and are held).
//!
//! # Invariants
//! - mesh-plan performs no IO: it reads no files, opens no sockets, spawns nothing and reads no
//!   clock. Time, when a decision needs it, is an argument.
//! - Decisions are values (enums of actions and verdicts) that the binaries carry out.
//! - Every output a person reads has a text rendering and a serializable form, both tested as
//!   snapshots.

pub mod attribution;
pub mod compose;
pub mod diff;
pub mod moves;
pub mod plans;
pub mod rollout;
pub mod settings;

#[cfg(test)]
mod fixture;

pub use attribution::{attribute, tiers, Attribution, TierError, Tiers};
pub use compose::{compose, ComposeError, ComposeProblem};
pub use diff::{diff, DeclarationDiff};
pub use moves::{decide_push, moves, Move, PushDecision};
pub use plans::{behind, close, supersede, Behind, Supersession};
pub use rollout::{step, Action, Event, RolloutSpec, RolloutState};
pub use settings::{settings_change, SettingsChange, SettingsDecision};
