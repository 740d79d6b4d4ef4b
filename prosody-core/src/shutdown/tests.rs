use super::ShutdownLayer;
use crate::error::{Category, HandlerError};
use crate::handler::EventRequest;
use crate::testkit;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tower::{Layer, Service, ServiceExt, service_fn};

#[tokio::test]
async fn no_attempt_starts_after_shutdown_but_running_ones_finish() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let handler = service_fn(move |request: EventRequest<u8>| {
        counted.fetch_add(1, Ordering::SeqCst);
        async move {
            // Shutdown fires while this attempt runs: it still completes.
            request.context.on_shutdown().await;
            Ok::<_, HandlerError>(())
        }
    });
    let service = ShutdownLayer::new().layer(handler);
    let (request, shutdown, _cancel) = testkit::message("k", 0u8, None);
    let mut running = service.clone();
    let attempt = running.ready().await.map(|s| s.call(request));
    let attempt = attempt.expect("ready");
    shutdown.cancel();
    assert!(attempt.await.is_ok(), "a running attempt was cut short");

    let (late, shutdown, _cancel) = testkit::message("k", 0u8, None);
    shutdown.cancel();
    let result = service.oneshot(late).await;
    assert_eq!(
        result.err().map(|e| e.category()),
        Some(Category::Transient)
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "a refused call reached the handler"
    );
}
