use super::ShutdownLayer;
use crate::error::{Category, HandlerError};
use crate::handler::EventRequest;
use crate::testkit;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tower::{Layer, Service, ServiceExt, service_fn};

#[tokio::test]
async fn no_attempt_starts_once_the_partition_stops_but_a_draining_one_does() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let handler = service_fn(move |request: EventRequest<u8>| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move {
            // The partition stops while this attempt runs: it still completes.
            request.context.on_cancel().await;
            Ok::<_, HandlerError>(())
        }
    });
    let service = ShutdownLayer::new().layer(handler);
    let (request, shutdown, cancel) = testkit::message("k", 0u8, None);
    let mut running = service.clone();
    let attempt = running.ready().await.map(|s| s.call(request));
    let attempt = attempt.expect("ready");
    cancel.cancel();
    assert!(attempt.await.is_ok(), "a running attempt was cut short");
    assert!(shutdown.is_cancelled());

    // Draining (shut down, not yet stopping): the attempt starts.
    let (draining, shutdown, cancel) = testkit::message("k", 0u8, None);
    shutdown.cancel();
    let mut drainer = service.clone();
    let started = drainer.ready().await.map(|s| s.call(draining));
    let started = started.expect("ready");
    cancel.cancel();
    assert!(
        started.await.is_ok(),
        "a draining partition refused an attempt"
    );

    let (late, _shutdown, cancel) = testkit::message("k", 0u8, None);
    cancel.cancel();
    let result = service.oneshot(late).await;
    assert_eq!(
        result.err().map(|e| e.category()),
        Some(Category::Transient)
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "a refused call reached the handler"
    );
}
