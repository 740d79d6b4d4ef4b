//! The client's parts, each made from what the builder connected and
//! handed what it needs.

use crate::backend::{Backend, BackendProducer};
use crate::client::{Inner, ProsodyClient};
use crate::config::Settings;
use crate::connect::Composed;
use crate::consume::Consuming;
use crate::directory::{ClientDirectory, Rebind};
use crate::gate::Gate;
use crate::health::ConsumerHealth;
use crate::observe::Counts;
use crate::probe::{Probe, Status};
use crate::published::Readers;
use crate::request::Requests;
use crate::send::Sender;
use crate::slot::Subscription;
use crate::stack::{ClientTelemetry, Layers};
use opentelemetry::metrics::Meter;
use prosody_core::Codec;
use prosody_core::broker::Broker;
use prosody_core::loader::BrokerLoader;
use std::sync::{Arc, Weak};
use tokio::sync::OnceCell;

/// What the builder connected and checked, from which the client is
/// made without failing.
pub(super) struct Connected {
    pub(super) settings: Settings,
    pub(super) broker: Backend,
    pub(super) producers: Producers,
    pub(super) composed: Composed,
    pub(super) loader: BrokerLoader<Backend>,
    /// How other groups are reached: their entries, and their stores.
    pub(super) reach: (Option<ClientDirectory>, Option<Rebind>),
    pub(super) sinks: ClientTelemetry,
    /// The meter given to the builder, if any.
    pub(super) meter: Option<Meter>,
}

/// The client's producers: on Kafka two, each with its own settings.
pub(super) struct Producers {
    /// Lifecycle events and the failure topic's copies: batches.
    pub(super) batching: BackendProducer,
    /// Sends a caller waits on (`send`, `excise`, requests): no linger.
    pub(super) immediate: BackendProducer,
}

/// The client of `connected`, encoding with `codec`; its counts are
/// reported while it lives.
pub(super) fn assemble<C: Codec>(codec: C, connected: Connected) -> ProsodyClient<C> {
    let Connected {
        settings,
        broker,
        producers:
            Producers {
                batching: producer,
                immediate: sends,
            },
        composed: Composed { stores, lookups },
        loader,
        reach: (directory, rebind),
        sinks,
        meter,
    } = connected;
    let gate = Arc::new(Gate::default());
    let readers = Readers::new(
        &settings,
        Arc::clone(&gate),
        (directory.clone(), rebind),
        broker.clone(),
    );
    let requests = Requests::new(
        settings.peer.clone(),
        directory,
        settings.send_timeout,
        broker.durable(),
    );
    let layers = Layers::new(
        &settings.qos,
        &producer,
        loader,
        codec.clone(),
        sinks,
        settings.observe.links(),
    );
    let sender = Sender::new(
        Arc::clone(&gate),
        codec,
        sends,
        Arc::clone(&settings.source_system),
        settings.send_timeout,
        settings.runtime.metrics.clone(),
        layers.telemetry_sink().cloned(),
    );
    let slot = Arc::new(Subscription::new());
    let health = Arc::new(ConsumerHealth::new(
        Arc::clone(&slot),
        settings.subscribed_topics.is_some(),
        settings.qos.stall_threshold,
    ));
    let status = Arc::downgrade(&health) as Weak<dyn Status>;
    let probe = Probe::new(settings.observe.probe(&settings.cluster), status);
    let Settings {
        subscribed_topics,
        mut runtime,
        ..
    } = settings;
    let group = Arc::clone(&runtime.group_id);
    let metrics = runtime.metrics.clone();
    let shutdown_timeout = runtime.shutdown_timeout;
    runtime.answerer = requests.answerer();
    let consuming = Consuming::new(
        Arc::clone(&gate),
        broker,
        stores,
        runtime,
        subscribed_topics,
        slot,
        probe,
    );
    let inner = Arc::new(Inner {
        gate,
        shutdown: OnceCell::new(),
        shutdown_timeout,
        layers,
        sender,
        consuming,
        health,
        requests,
        readers,
        lookups,
    });
    let counted = Arc::downgrade(&inner) as Weak<dyn Counts>;
    crate::observe::watch(&group, &metrics, counted, meter.as_ref());
    ProsodyClient { inner }
}
