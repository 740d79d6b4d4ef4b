use super::LogLayer;
use crate::Response;
use crate::error::{Category, HandlerError};
use crate::handler::EventRequest;
use crate::testkit;
use tower::{Layer, ServiceExt, service_fn};

async fn outcome(error: fn() -> HandlerError) -> Result<Response<u8>, Category> {
    let handler =
        service_fn(move |_: EventRequest<u8>| std::future::ready(Err::<Response<u8>, _>(error())));
    let (request, _, _) = testkit::message("k", 0u8, None);
    LogLayer::new()
        .layer(handler)
        .oneshot(request)
        .await
        .map_err(|e| e.category())
}

#[tokio::test]
async fn transient_and_permanent_failures_settle_and_terminal_passes() {
    assert_eq!(
        outcome(|| HandlerError::transient("t")).await,
        Ok(Response::Failed(Box::new("t".into())))
    );
    assert_eq!(
        outcome(|| HandlerError::permanent("p")).await,
        Ok(Response::Failed(Box::new("p".into())))
    );
    assert_eq!(
        outcome(|| HandlerError::terminal("x")).await,
        Err(Category::Terminal)
    );
}

/// While the partition shuts down, any failure stays unsettled (transient)
/// for the next owner, which logs it.
#[tokio::test]
async fn a_failure_during_shutdown_stays_unsettled() {
    let handler = service_fn(|_: EventRequest<u8>| {
        std::future::ready(Err::<Response<u8>, _>(HandlerError::permanent("p")))
    });
    let (request, shutdown, _) = testkit::message("k", 0u8, None);
    shutdown.cancel();
    let result = LogLayer::new().layer(handler).oneshot(request).await;
    assert_eq!(result.map_err(|e| e.category()), Err(Category::Transient));
}
