use super::{Lifecycle, TelemetryEvent, TelemetryLayer, TelemetrySink};
use crate::error::{Category, HandlerError};
use crate::handler::EventRequest;
use crate::testkit;
use std::sync::{Arc, Mutex};
use tower::{Layer, ServiceExt, service_fn};

#[derive(Clone, Default)]
struct Recording(Arc<Mutex<Vec<TelemetryEvent>>>);

impl TelemetrySink for Recording {
    fn emit(&self, event: TelemetryEvent) {
        self.0.lock().expect("events").push(event);
    }
}

#[tokio::test(start_paused = true)]
async fn each_call_emits_dispatched_then_its_outcome() {
    let sink = Recording::default();
    let handler = service_fn(|request: EventRequest<u8>| {
        let fail = request.context.key().as_str() == "bad";
        async move {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            if fail {
                Err(HandlerError::permanent("no"))
            } else {
                Ok(())
            }
        }
    });
    let service = TelemetryLayer::new(sink.clone()).layer(handler);
    for key in ["good", "bad"] {
        let (request, _, _) = testkit::message(key, 0u8, None);
        let _ = service.clone().oneshot(request).await;
    }
    let events = sink.0.lock().expect("events");
    let lifecycles: Vec<_> = events
        .iter()
        .map(|e| (e.key.to_string(), e.lifecycle))
        .collect();
    let elapsed = std::time::Duration::from_millis(5);
    assert_eq!(
        lifecycles,
        [
            ("good".to_owned(), Lifecycle::Dispatched),
            ("good".to_owned(), Lifecycle::Succeeded { elapsed }),
            ("bad".to_owned(), Lifecycle::Dispatched),
            (
                "bad".to_owned(),
                Lifecycle::Failed {
                    category: Category::Permanent,
                    elapsed
                }
            ),
        ]
    );
    assert!(
        events
            .iter()
            .all(|e| e.kind == "message" && e.offset == Some(0) && e.attempt == 1)
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_before_it_completes_is_abandoned() {
    let sink = Recording::default();
    let handler = service_fn(|_: EventRequest<u8>| async {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        Ok::<(), HandlerError>(())
    });
    let service = TelemetryLayer::new(sink.clone()).layer(handler);
    let (request, _, _) = testkit::message("slow", 0u8, None);
    let deadline = std::time::Duration::from_millis(3);
    assert!(
        tokio::time::timeout(deadline, service.oneshot(request))
            .await
            .is_err()
    );
    let lifecycles: Vec<_> = sink
        .0
        .lock()
        .expect("events")
        .iter()
        .map(|e| e.lifecycle)
        .collect();
    assert_eq!(
        lifecycles,
        [
            Lifecycle::Dispatched,
            Lifecycle::Abandoned { elapsed: deadline }
        ]
    );
}
