//! What the library's own tests share.

use prosody_core::{Context, EventHandler, Excise, HandlerError, Message, Timer};
use serde_json::Value;

/// A handler that handles everything at once, successfully.
pub(crate) struct Noop;

impl EventHandler for Noop {
    type Payload = Value;
    type Output = ();

    async fn on_message(&self, _: Context, _: Message<Value>) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> {
        Ok(())
    }

    async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> {
        Ok(())
    }
}
