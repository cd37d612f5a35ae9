//! `status` as a call on a [`Mesh`]: what each node should run made current, then each node's
//! last report and what the plans wait on, with the merges waiting on the daemon's consumer
//! when the mesh is on a fleet's bus.

use super::Mesh;
use crate::error::Result;
use crate::status::{Overview, StatusOptions};

/// What `status` read ([`Mesh::read_status`]): the overview, and the time it was made at, by
/// which it is judged ([`crate::status::judge`]).
#[derive(Debug, Clone)]
pub struct StatusRead {
    /// What `status` shows.
    pub overview: Overview,
    /// When it was made (seconds since the epoch).
    pub now: u64,
}

impl Mesh {
    /// `status`: each node's intent composed again when its inputs changed, the overview made
    /// now with `options`, and, with a daemon on the mesh's bus, the merges waiting on its
    /// consumer read from the bus (known while the daemon is stopped too).
    ///
    /// # Errors
    /// The home cannot be read ([`crate::status::overview_with`]).
    pub async fn read_status(&self, options: &StatusOptions) -> Result<StatusRead> {
        crate::intent::current_for_status(self.home(), self.store()).await;
        let now = mesh_store::clock::now();
        let mut overview = crate::status::overview_with(self.home(), now, options)?;
        if let (Some(_), Some(bus)) = (&overview.daemon, self.bus()) {
            if let Some(waiting) = crate::bus::heartbeat::merges_waiting(self.home(), bus).await {
                overview.set_merges_waiting(waiting, now);
            }
        }
        Ok(StatusRead { overview, now })
    }
}
