use super::{
    CATEGORY_HEADER, ERROR_HEADER, FailureConfig, FailureLayer, SOURCE_OFFSET_HEADER,
    SOURCE_PARTITION_HEADER, SOURCE_TOPIC_HEADER,
};
use crate::Response;
use crate::broker::{BrokerError, Delivery, OutgoingRecord, Producer};
use crate::error::{Category, HandlerError};
use crate::handler::EventRequest;
use crate::retry::{RetryConfig, RetryLayer};
use crate::testkit;
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tower::{Layer, ServiceExt, service_fn};

/// Records what it sends; fails the first `failures` sends.
#[derive(Clone, Default)]
struct Recording {
    sent: Arc<Mutex<Vec<OutgoingRecord>>>,
    failures: Arc<Mutex<usize>>,
}

impl Producer for Recording {
    async fn send(
        &self,
        record: OutgoingRecord,
        _timeout: Duration,
    ) -> Result<Delivery, BrokerError> {
        {
            let mut failures = self.failures.lock().expect("failures");
            if *failures > 0 {
                *failures -= 1;
                return Err(BrokerError::Backend {
                    retriable: true,
                    source: "broker down".into(),
                });
            }
        }
        self.sent.lock().expect("sent").push(record);
        Ok(Delivery {
            partition: 0,
            offset: 0,
        })
    }
}

fn config() -> FailureConfig {
    FailureConfig {
        topic: "failures".into(),
        send_timeout: Duration::from_secs(1),
    }
}

fn failing(
    category: Category,
) -> impl tower::Service<
    EventRequest<u8>,
    Response = Response<u8>,
    Error = HandlerError,
    Future = std::future::Ready<Result<Response<u8>, HandlerError>>,
> + Clone {
    service_fn(move |_: EventRequest<u8>| {
        std::future::ready(Err(HandlerError::new(category, "handler says no")))
    })
}

#[tokio::test(start_paused = true)]
async fn a_permanent_failure_is_routed_once_with_its_record_and_error_headers() {
    let producer = Recording::default();
    let service = FailureLayer::new(producer.clone(), config()).layer(failing(Category::Permanent));
    let (mut request, _, _) = testkit::message("user-1", 7u8, None);
    if let crate::event::Event::Message(m) = &mut request.event {
        m.raw = Bytes::from_static(br#"{"id":1}"#);
        m.offset = 42;
        m.headers.push("trace", b"abc".to_vec());
    }
    assert_eq!(
        service.oneshot(request).await.ok(),
        Some(Response::Failed(Box::new("handler says no".into()))),
        "the event settles with its failure"
    );
    let sent = producer.sent.lock().expect("sent");
    assert_eq!(sent.len(), 1);
    let record = &sent[0];
    assert_eq!(&*record.topic, "failures");
    assert_eq!(record.key.as_deref(), Some(&b"user-1"[..]));
    assert_eq!(record.payload.as_deref(), Some(&br#"{"id":1}"#[..]));
    assert_eq!(record.headers.get_str("trace"), Some("abc"));
    assert_eq!(
        record.headers.get_str(ERROR_HEADER),
        Some("handler says no")
    );
    assert_eq!(record.headers.get_str(CATEGORY_HEADER), Some("permanent"));
    assert_eq!(record.headers.get_str(SOURCE_TOPIC_HEADER), Some("topic"));
    assert_eq!(record.headers.get_str(SOURCE_PARTITION_HEADER), Some("0"));
    assert_eq!(record.headers.get_str(SOURCE_OFFSET_HEADER), Some("42"));
}

#[tokio::test(start_paused = true)]
async fn a_failed_send_is_transient_and_the_outer_retry_gets_it_through() {
    let producer = Recording {
        failures: Arc::new(Mutex::new(3)),
        ..Recording::default()
    };
    let service = RetryLayer::new(RetryConfig::default())
        .layer(FailureLayer::new(producer.clone(), config()).layer(failing(Category::Transient)));
    let (request, _, _) = testkit::message("k", 0u8, None);
    assert!(service.oneshot(request).await.is_ok());
    assert_eq!(
        producer.sent.lock().expect("sent").len(),
        1,
        "routed exactly once"
    );
}

#[tokio::test(start_paused = true)]
async fn terminal_errors_pass_through_unrouted() {
    let producer = Recording::default();
    let service = FailureLayer::new(producer.clone(), config()).layer(failing(Category::Terminal));
    let (request, _, _) = testkit::message("k", 0u8, None);
    assert_eq!(
        service.oneshot(request).await.err().map(|e| e.category()),
        Some(Category::Terminal)
    );
    assert!(producer.sent.lock().expect("sent").is_empty());
}

/// A permanent failure while the partition shuts down is not routed and not
/// settled: the error turns transient, so the next owner routes it.
#[tokio::test]
async fn a_permanent_failure_during_shutdown_stays_unsettled_for_the_next_owner() {
    let producer = Recording::default();
    let service = FailureLayer::new(producer.clone(), config()).layer(failing(Category::Permanent));
    let (request, shutdown, _) = testkit::message("k", 0u8, None);
    shutdown.cancel();
    let error = service.oneshot(request).await.err().map(|e| e.category());
    assert_eq!(error, Some(Category::Transient));
    assert!(producer.sent.lock().expect("sent").is_empty());
}
