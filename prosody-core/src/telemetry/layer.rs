//! The telemetry layer.

use super::{NoTelemetry, TelemetryService, TelemetrySink};
use tower::Layer;

/// Wraps a service so each call emits lifecycle events and runs in a span.
#[derive(Clone, Debug, Default)]
pub struct TelemetryLayer<T = NoTelemetry> {
    sink: T,
}

impl<T: TelemetrySink> TelemetryLayer<T> {
    /// A telemetry layer emitting to `sink`.
    #[must_use]
    pub fn new(sink: T) -> Self {
        Self { sink }
    }
}

impl<S, T: TelemetrySink> Layer<S> for TelemetryLayer<T> {
    type Service = TelemetryService<S, T>;

    fn layer(&self, inner: S) -> TelemetryService<S, T> {
        TelemetryService {
            inner,
            sink: self.sink.clone(),
        }
    }
}
