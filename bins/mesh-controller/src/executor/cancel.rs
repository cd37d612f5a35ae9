//! A drive's cancellation: asked for from anywhere (the runtime that owns the drive), heard by
//! the drive at its next step boundary — between two builds, between two rollouts, between two
//! steps of a rollout — where everything it did is saved, so the plan is resumed from there.

use std::sync::Arc;

/// A cancellation, shared by whoever may ask for it and the drive that hears it.
#[derive(Debug, Clone)]
pub struct Cancel(Arc<tokio::sync::watch::Sender<bool>>);

impl Default for Cancel {
    fn default() -> Cancel {
        Cancel::new()
    }
}

impl Cancel {
    /// A cancellation not asked for yet.
    pub fn new() -> Cancel {
        Cancel(Arc::new(tokio::sync::watch::Sender::new(false)))
    }

    /// Asks for it: the drive stops at its next step boundary.
    pub fn cancel(&self) {
        self.0.send_replace(true);
    }

    /// Whether it was asked for.
    pub fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }

    /// Returns once it is asked for.
    pub async fn cancelled(&self) {
        let mut asked = self.0.subscribe();
        // The sender lives as long as `self`: the wait ends only when it is asked for.
        let _ = asked.wait_for(|cancelled| *cancelled).await;
    }

    /// Whether `other` is this very cancellation (a clone of it), not another.
    pub fn is(&self, other: &Cancel) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
