//! Where lifecycle events go.

use crate::clock::Timestamp;
use crate::context::Demand;
use crate::error::{Category, HandlerError};
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
    /// A record the client sent was acknowledged after `elapsed` (a
    /// producer event: `offset` is the record's, `attempt` is 1).
    Sent {
        /// How long the send took.
        elapsed: Duration,
    },
    /// A record the client sent was refused or timed out after `elapsed`
    /// (a producer event: `partition` is -1 and `offset` none when the
    /// broker did not assign them).
    SendFailed {
        /// How long the send took.
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
    /// The time a timer was scheduled for (none for a message or an
    /// excise).
    pub fire_time: Option<Timestamp>,
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

    /// A call failed: `event` is its `Failed` event and `error` what the
    /// handler returned. Called once per failed call, just before `event`
    /// is emitted, and only when the sink is enabled; must not block.
    fn failure(&self, event: &TelemetryEvent, error: &HandlerError) {
        let _ = (event, error);
    }
}

/// Two sinks as one: each event goes to both, each enabled part gets it.
impl<A: TelemetrySink, B: TelemetrySink> TelemetrySink for (A, B) {
    fn enabled(&self) -> bool {
        self.0.enabled() || self.1.enabled()
    }

    fn emit(&self, event: TelemetryEvent) {
        match (self.0.enabled(), self.1.enabled()) {
            (true, true) => {
                self.0.emit(event.clone());
                self.1.emit(event);
            }
            (true, false) => self.0.emit(event),
            (false, true) => self.1.emit(event),
            (false, false) => {}
        }
    }

    fn failure(&self, event: &TelemetryEvent, error: &HandlerError) {
        if self.0.enabled() {
            self.0.failure(event, error);
        }
        if self.1.enabled() {
            self.1.failure(event, error);
        }
    }
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

    fn failure(&self, event: &TelemetryEvent, error: &HandlerError) {
        if let Some(sink) = self {
            sink.failure(event, error);
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
