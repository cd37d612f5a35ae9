//! The in-process bus of the embedded mode: subjects routed inside one process.

use crate::{check_subject, subject_matches, Bus, BusError, Message, Subscription};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::{channel, Sender};

/// A bus inside one process. Cloning it gives another handle to the same bus.
///
/// # Guarantees
/// Messages on one subscription arrive in the order they were published; a subscription
/// dropped by its owner is forgotten at the next publish. One whose reader is
/// [`crate::SUBSCRIPTION_CAPACITY`] messages behind misses the next ones, as a slow consumer
/// of a NATS server does.
#[derive(Clone, Default)]
pub struct InProcessBus {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    subscribers: Mutex<Vec<(String, Sender<Message>)>>,
    inboxes: AtomicU64,
}

impl InProcessBus {
    /// A new, empty bus.
    pub fn new() -> Self {
        InProcessBus::default()
    }

    fn deliver(&self, message: Message) {
        let mut subscribers = self.inner.subscribers.lock().expect("bus lock");
        subscribers.retain(|(pattern, sender)| {
            if subject_matches(pattern, &message.subject) {
                match sender.try_send(message.clone()) {
                    Ok(()) => true,
                    Err(TrySendError::Full(_)) => {
                        tracing::warn!(
                            subject = %message.subject,
                            pattern = %pattern,
                            "a subscription's reader is behind: a message dropped"
                        );
                        true
                    }
                    Err(TrySendError::Closed(_)) => false,
                }
            } else {
                !sender.is_closed()
            }
        });
    }
}

#[async_trait::async_trait]
impl Bus for InProcessBus {
    async fn publish(&self, subject: &str, payload: Vec<u8>) -> Result<(), BusError> {
        check_subject(subject, false)?;
        self.deliver(Message {
            subject: subject.to_owned(),
            payload,
            reply: None,
            id: None,
        });
        Ok(())
    }

    async fn publish_with_id(
        &self,
        subject: &str,
        payload: Vec<u8>,
        id: &str,
    ) -> Result<(), BusError> {
        check_subject(subject, false)?;
        self.deliver(Message {
            subject: subject.to_owned(),
            payload,
            reply: None,
            id: Some(id.to_owned()),
        });
        Ok(())
    }

    async fn subscribe(&self, subject: &str) -> Result<Subscription, BusError> {
        check_subject(subject, true)?;
        let (sender, receiver) = channel(crate::SUBSCRIPTION_CAPACITY);
        self.inner
            .subscribers
            .lock()
            .expect("bus lock")
            .push((subject.to_owned(), sender));
        Ok(Subscription::new(receiver))
    }

    async fn request(
        &self,
        subject: &str,
        payload: Vec<u8>,
        timeout: Duration,
    ) -> Result<Message, BusError> {
        check_subject(subject, false)?;
        let inbox = format!(
            "{}.{}",
            crate::subjects::INBOX_PREFIX,
            self.inner.inboxes.fetch_add(1, Ordering::Relaxed)
        );
        let mut answers = self.subscribe(&inbox).await?;
        self.deliver(Message {
            subject: subject.to_owned(),
            payload,
            reply: Some(inbox),
            id: None,
        });
        match tokio::time::timeout(timeout, answers.next()).await {
            Ok(Some(answer)) => Ok(answer),
            Ok(None) | Err(_) => Err(BusError::Timeout {
                subject: subject.to_owned(),
                timeout,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that is behind holds at most the capacity, the first ones in order; the bus
    /// goes on delivering to the others.
    #[tokio::test]
    async fn a_subscription_behind_holds_no_more_than_its_capacity() {
        let bus = InProcessBus::new();
        let mut behind = bus.subscribe("mesh.report.*").await.unwrap();
        let extra = 10;
        for n in 0..crate::SUBSCRIPTION_CAPACITY + extra {
            bus.publish("mesh.report.a", n.to_string().into_bytes())
                .await
                .unwrap();
        }
        let mut reading = bus.subscribe("mesh.report.*").await.unwrap();
        bus.publish("mesh.report.b", b"after".to_vec())
            .await
            .unwrap();
        assert_eq!(reading.next().await.unwrap().payload, b"after");
        for n in 0..crate::SUBSCRIPTION_CAPACITY {
            assert_eq!(
                behind.next().await.unwrap().payload,
                n.to_string().into_bytes()
            );
        }
        // The 10 past the capacity were dropped; the one published since it was read is not.
        assert!(
            behind.receiver.try_recv().is_err(),
            "held past its capacity"
        );
        bus.publish("mesh.report.a", b"later".to_vec())
            .await
            .unwrap();
        assert_eq!(behind.next().await.unwrap().payload, b"later");
    }

    #[tokio::test]
    async fn routes_by_subject_and_answers_requests() {
        let bus = InProcessBus::new();
        let mut reports = bus.subscribe("mesh.report.*").await.unwrap();
        let mut home = bus.subscribe("mesh.declaration.home").await.unwrap();
        bus.publish("mesh.declaration.laptop", b"not for home".to_vec())
            .await
            .unwrap();
        bus.publish("mesh.report.laptop", b"r".to_vec())
            .await
            .unwrap();
        assert_eq!(reports.next().await.unwrap().subject, "mesh.report.laptop");

        let responder = bus.clone();
        tokio::spawn(async move {
            let asked = home.next().await.unwrap();
            assert_eq!(asked.payload, b"decl");
            responder.respond(&asked, b"done".to_vec()).await.unwrap();
        });
        let answer = bus
            .request(
                "mesh.declaration.home",
                b"decl".to_vec(),
                Duration::from_secs(5),
            )
            .await
            .unwrap();
        assert_eq!(answer.payload, b"done");
    }

    #[tokio::test]
    async fn a_request_nobody_answers_times_out() {
        let bus = InProcessBus::new();
        let err = bus
            .request("mesh.nobody", vec![], Duration::from_millis(20))
            .await
            .unwrap_err();
        assert!(matches!(err, BusError::Timeout { .. }), "{err}");
    }
}
