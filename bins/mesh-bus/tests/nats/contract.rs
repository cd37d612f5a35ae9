//! The `Bus` trait's contract, one test function run against both buses.

use mesh_bus::{subjects, Bus, BusError, InProcessBus};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(5);

/// What every bus does: `a` and `b` are two handles on one bus (two connections, for NATS).
async fn bus_keeps_its_contract(a: &dyn Bus, b: &dyn Bus) {
    // Routing by subject, wildcards as NATS has them, order kept.
    let mut reports = b.subscribe(subjects::ALL_REPORTS).await.unwrap();
    let mut home = b.subscribe(&subjects::declaration("home")).await.unwrap();
    a.publish(&subjects::declaration("laptop"), b"not for home".to_vec())
        .await
        .unwrap();
    for n in 0..20u8 {
        a.publish(&subjects::report("laptop"), vec![n])
            .await
            .unwrap();
    }
    for n in 0..20u8 {
        let heard = super::next_within(WAIT, &mut reports).await;
        assert_eq!(heard.subject, "mesh.report.laptop");
        assert_eq!(heard.payload, vec![n], "in the order published");
        assert_eq!(heard.reply, None);
    }
    a.publish(&subjects::declaration("home"), b"for home".to_vec())
        .await
        .unwrap();
    let heard = super::next_within(WAIT, &mut home).await;
    assert_eq!(
        heard.payload, b"for home",
        "the laptop's declaration never reached home"
    );

    // Request and respond, across handles.
    let mut asked = b.subscribe("mesh.test.ask").await.unwrap();
    let answering = async {
        let request = super::next_within(WAIT, &mut asked).await;
        assert_eq!(request.payload, b"question");
        assert!(request.reply.is_some());
        b.respond(&request, b"answer".to_vec()).await.unwrap();
    };
    let asking = a.request("mesh.test.ask", b"question".to_vec(), WAIT);
    let ((), answer) = tokio::join!(answering, asking);
    assert_eq!(answer.unwrap().payload, b"answer");

    // Nobody answering is a time-out; a plain message cannot be answered.
    let err = a
        .request("mesh.test.nobody", vec![], Duration::from_millis(50))
        .await
        .unwrap_err();
    assert!(matches!(err, BusError::Timeout { .. }), "{err}");
    let plain = mesh_bus::Message {
        subject: "mesh.test.plain".into(),
        payload: vec![],
        reply: None,
        id: None,
    };
    assert!(matches!(
        a.respond(&plain, vec![]).await.unwrap_err(),
        BusError::Failed { .. }
    ));

    // Invalid subjects are refused before anything is sent.
    for bad in ["mesh..x", "mesh.report.*", "with space"] {
        assert!(matches!(
            a.publish(bad, vec![]).await.unwrap_err(),
            BusError::Subject { .. }
        ));
    }
    assert!(matches!(
        a.subscribe("mesh.>.x").await.unwrap_err(),
        BusError::Subject { .. }
    ));

    // A dropped subscription does not stop the others.
    drop(home);
    a.publish(&subjects::declaration("home"), b"again".to_vec())
        .await
        .unwrap();
    a.publish(&subjects::report("home"), b"still heard".to_vec())
        .await
        .unwrap();
    let heard = super::next_within(WAIT, &mut reports).await;
    assert_eq!(heard.payload, b"still heard");
}

#[tokio::test]
async fn the_in_process_bus_keeps_the_contract() {
    let bus = InProcessBus::new();
    bus_keeps_its_contract(&bus, &bus.clone()).await;
}

#[tokio::test]
async fn the_nats_bus_keeps_the_contract() {
    let server = super::server();
    let a = super::connect(&server).await;
    let b = super::connect(&server).await;
    bus_keeps_its_contract(&a, &b).await;
}
