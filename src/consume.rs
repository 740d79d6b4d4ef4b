//! Consuming: the client's one subscription, its consumer's settings and
//! its probe server.

use crate::backend::Backend;
use crate::config::Mode;
use crate::error::ClientError;
use crate::gate::Gate;
use crate::probe::Probe;
use crate::slot::Subscription;
use crate::stack::Layers;
use prosody_core::broker::{Broker, Consumer, ConsumerConfig};
use prosody_core::store::AnyStores;
use prosody_core::{Codec, Encoded, EventHandler, EventService, Runtime, RuntimeConfig};
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::time::Instant;

/// The client's consuming side: the broker it joins the group on, the
/// stores its partitions keep, the consumer's settings, the subscription
/// slot and the probe server.
///
/// Invariant: at most one subscription starts or runs at a time; none
/// starts once the client's gate is closed (one joining while it closes
/// leaves the group again); the probe server starts with the first
/// subscription and stops only at shutdown.
pub(crate) struct Consuming {
    gate: Arc<Gate>,
    broker: Backend,
    stores: AnyStores,
    /// The consumer's settings: group id, metrics, collections and the
    /// subsystem's answerer filled in.
    runtime: RuntimeConfig,
    /// `None` when the client only produces.
    topics: Option<Vec<Arc<str>>>,
    slot: Arc<Subscription>,
    probe: Probe,
}

impl Consuming {
    pub(crate) fn new(
        gate: Arc<Gate>,
        broker: Backend,
        stores: AnyStores,
        runtime: RuntimeConfig,
        topics: Option<Vec<Arc<str>>>,
        slot: Arc<Subscription>,
        probe: Probe,
    ) -> Self {
        Self {
            gate,
            broker,
            stores,
            runtime,
            topics,
            slot,
            probe,
        }
    }

    /// The consumer group.
    pub(crate) fn group_id(&self) -> &Arc<str> {
        &self.runtime.group_id
    }

    /// The broker consumed from.
    pub(crate) fn broker(&self) -> &Backend {
        &self.broker
    }

    /// The running consumer, if any.
    pub(crate) fn running(&self) -> Option<Arc<Runtime>> {
        self.slot.running()
    }

    /// Starts consuming with `handler` inside the stack of `layers`' mode.
    pub(crate) async fn subscribe<C: Codec, H>(
        &self,
        layers: &Layers<C>,
        handler: H,
    ) -> Result<(), ClientError>
    where
        H: EventHandler<Payload = C::Value>,
        H::Output: Serialize,
    {
        let keep = layers.takes_parsed();
        match layers.mode() {
            Mode::Pipeline => self.start(layers.pipeline(handler), keep).await,
            Mode::BestEffort => self.start(layers.best_effort(handler), keep).await,
            Mode::LowLatency => match layers.low_latency(handler) {
                Some(stack) => self.start(stack, keep).await,
                None => Err(ClientError::NotConfigured),
            },
        }
    }

    /// Starts consuming with a complete stack, then the probe server. Its
    /// codec is unknown: records are not parsed for it.
    pub(crate) async fn subscribe_with<S>(&self, stack: S) -> Result<(), ClientError>
    where
        S: EventService<Encoded>,
    {
        self.start(stack, false).await
    }

    /// Starts consuming with `stack`, keeping records' JSON parse for its
    /// codec when `keep_parse`.
    async fn start<S>(&self, stack: S, keep_parse: bool) -> Result<(), ClientError>
    where
        S: EventService<Encoded>,
    {
        self.gate.check()?;
        let Some(topics) = self.topics.clone() else {
            return Err(ClientError::NotConfigured);
        };
        let claim = self.slot.claim().ok_or(ClientError::AlreadySubscribed)?;
        let consumer = self
            .broker
            .consumer(&ConsumerConfig {
                group_id: self.runtime.group_id.to_string(),
                topics,
            })
            .await?;
        if self.gate.check().is_err() {
            // Shut down while joining: leave again rather than run after
            // shutdown returned.
            drop(claim);
            consumer.close().await;
            return Err(ClientError::ShutDown);
        }
        claim.install(Runtime::spawn(
            consumer,
            stack,
            self.stores.clone(),
            RuntimeConfig {
                keep_parse,
                ..self.runtime.clone()
            },
        ));
        self.probe.start();
        Ok(())
    }

    /// Stops consuming: drains within the shutdown timeout, commits, and
    /// leaves the group; it can subscribe again.
    pub(crate) async fn unsubscribe(&self) -> Result<(), ClientError> {
        self.gate.check()?;
        self.slot.stop(None).await;
        Ok(())
    }

    /// Drains and stops the running consumer, until `deadline`.
    pub(crate) async fn stop(&self, deadline: Instant) {
        self.slot.stop(Some(deadline)).await;
    }

    /// Stops the probe server for good, waiting for it until `deadline`.
    pub(crate) async fn stop_probe(&self, deadline: Instant) {
        self.probe.stop(deadline).await;
    }

    /// Where the probe server listens, once started.
    pub(crate) fn probe_address(&self) -> Option<SocketAddr> {
        self.probe.address()
    }
}
