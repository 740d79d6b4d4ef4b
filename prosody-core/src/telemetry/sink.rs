//! Where lifecycle events go.

use crate::clock::Timestamp;
use crate::context::Demand;
use crate::error::Category;
use crate::event::Topic;
use crate::key::Key;
use std::time::Duration;

/// A step in the life of one handler call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lifecycle {
    /// The call starts.
    Dispatched,
    /// The call succeeded after `elapsed`.
    Succeeded {
        /// How long the handler ran.
        elapsed: Duration,
    },
    /// The call was dropped before it completed, after `elapsed`: its
    /// attempt's deadline passed, or its partition was abandoned.
    Abandoned {
        /// How long the handler ran.
        elapsed: Duration,
    },
    /// The call failed after `elapsed`.
    Failed {
        /// The error's category.
        category: Category,
        /// How long the handler ran.
        elapsed: Duration,
    },
}

/// One lifecycle event of one handler call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TelemetryEvent {
    /// What happened.
    pub lifecycle: Lifecycle,
    /// `message`, `timer` or `excise`.
    pub kind: &'static str,
    /// The topic of the key's partition.
    pub topic: Topic,
    /// The key's partition.
    pub partition: i32,
    /// The record's offset (none for a timer).
    pub offset: Option<i64>,
    /// The key.
    pub key: Key,
    /// The attempt number, from 1.
    pub attempt: u32,
    /// Fresh work or a retry.
    pub demand: Demand,
    /// When it happened.
    pub at: Timestamp,
}

/// Receives lifecycle events; must not block (queue and return).
pub trait TelemetrySink: Clone + Send + Sync + 'static {
    /// Whether events are wanted at all; when `false` none is built.
    fn enabled(&self) -> bool {
        true
    }

    /// Takes one event.
    fn emit(&self, event: TelemetryEvent);
}

/// A sink that may be absent: `None` takes nothing and builds nothing.
impl<T: TelemetrySink> TelemetrySink for Option<T> {
    fn enabled(&self) -> bool {
        self.as_ref().is_some_and(TelemetrySink::enabled)
    }

    fn emit(&self, event: TelemetryEvent) {
        if let Some(sink) = self {
            sink.emit(event);
        }
    }
}

/// The sink of mock mode and of disabled telemetry: takes nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoTelemetry;

impl TelemetrySink for NoTelemetry {
    fn enabled(&self) -> bool {
        false
    }

    fn emit(&self, _event: TelemetryEvent) {}
}
