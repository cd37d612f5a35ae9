//! `broker`: looking after the bus — a stuck durable consumer made again from now (rule 24,
//! issue 248).

use crate::error::Result;
use crate::fleet::{connect, BusArgs};
use crate::home::Home;
use mesh_bus::jetstream;
use serde::Serialize;

/// What `broker consumer-reset` did.
#[derive(Debug, Clone, Serialize)]
pub struct ResetLine {
    /// The stream.
    pub stream: String,
    /// The consumer.
    pub consumer: String,
    /// Messages it held pending before.
    pub pending_before: u64,
    /// Messages it held pending after (0).
    pub pending_after: u64,
    /// Messages delivered and not acknowledged before.
    pub ack_pending_before: usize,
}

/// `broker consumer-reset STREAM CONSUMER` (rule 24): `Ok(None)` when refused because the
/// stream is a work queue (the error is printed by the caller from the message).
pub async fn consumer_reset(
    home: &Home,
    bus_args: &BusArgs,
    stream: &str,
    consumer: &str,
) -> Result<std::result::Result<ResetLine, String>> {
    let bus = connect(home, bus_args).await?;
    match jetstream::consumer_reset(&bus.jetstream(), stream, consumer).await {
        Ok(reset) => Ok(Ok(ResetLine {
            stream: stream.to_owned(),
            consumer: consumer.to_owned(),
            pending_before: reset.before.num_pending,
            pending_after: reset.after.num_pending,
            ack_pending_before: reset.before.num_ack_pending,
        })),
        Err(error @ mesh_bus::NatsError::WorkQueue { .. }) => Ok(Err(error.to_string())),
        Err(error) => Err(error.into()),
    }
}
