//! A handler over JSON values, as a trait object.

use futures_util::future::BoxFuture;
use prosody::{Context, EventHandler, Excise, HandlerError, Message, Timer};
use serde_json::Value;
use std::sync::Arc;

/// What a foreign handler call settles with: the answer of a message or
/// excise handler (`null` when it returned nothing), or its error.
pub type Reply = Result<Value, HandlerError>;

/// A handler whose payloads and answers are JSON values, callable through
/// `dyn`: what a binding implements once, over its language's handler.
///
/// Each future must settle once its call ends in the other language, and
/// stop that call when it is dropped (the engine drops it on a timeout,
/// a rebalance or shutdown).
pub trait JsonHandler: Send + Sync + 'static {
    /// Handles a message.
    fn on_message(&self, context: Context, message: Message<Value>) -> BoxFuture<'static, Reply>;
    /// Handles a due timer (its answer is ignored).
    fn on_timer(&self, context: Context, timer: Timer) -> BoxFuture<'static, Reply>;
    /// Deletes everything the consumer holds for the excised key.
    fn on_excise(&self, context: Context, excise: Excise) -> BoxFuture<'static, Reply>;
}

/// A [`JsonHandler`] run as the engine's handler: its answers answer
/// requests, its errors keep the category the binding gave them.
#[derive(Clone)]
pub struct Handler(Arc<dyn JsonHandler>);

impl Handler {
    /// The engine's handler over `handler`.
    pub fn new(handler: impl JsonHandler) -> Self {
        Self(Arc::new(handler))
    }
}

impl EventHandler for Handler {
    type Payload = Value;
    type Output = Value;

    fn on_message(
        &self,
        context: Context,
        message: Message<Value>,
    ) -> impl Future<Output = Result<Value, HandlerError>> + Send {
        self.0.on_message(context, message)
    }

    async fn on_timer(&self, context: Context, timer: Timer) -> Result<(), HandlerError> {
        self.0.on_timer(context, timer).await.map(drop)
    }

    fn on_excise(
        &self,
        context: Context,
        excise: Excise,
    ) -> impl Future<Output = Result<Value, HandlerError>> + Send {
        self.0.on_excise(context, excise)
    }
}
