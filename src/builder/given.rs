//! The builder's options given as values: collections of keyed state, and
//! any option by name from JSON (as a binding in another language or a
//! configuration file gives them).

use super::ClientBuilder;
use crate::config::ConfigError;
use prosody_core::state::Spec;
use serde_json::{Map, Value};

impl<C> ClientBuilder<C> {
    /// The keyed-state collections handlers may bind
    /// (`state_collections`): each definition's `spec()`, names unique.
    /// Replaces any given before.
    ///
    /// # Examples
    ///
    /// Each user's last two pages, in a deque that drops the oldest item
    /// when a push passes its capacity. Mock mode keeps it in memory.
    ///
    /// ```
    /// use prosody::state::DequeDef;
    /// use prosody::{Context, EventHandler, Excise, HandlerError, Message, ProsodyClient, Timer};
    /// use serde_json::{Value, json};
    /// use std::time::Duration;
    /// use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
    ///
    /// static RECENT: DequeDef<String> = DequeDef::new("recent_pages").capacity(2);
    ///
    /// struct Pages(UnboundedSender<(u64, Option<String>)>);
    ///
    /// impl EventHandler for Pages {
    ///     type Payload = Value;
    ///     type Output = ();
    ///
    ///     async fn on_message(&self, context: Context, visit: Message<Value>) -> Result<(), HandlerError> {
    ///         let recent = context.state(&RECENT)?;
    ///         recent.push_back(&visit.payload["page"].as_str().unwrap_or("?").to_owned()).await?;
    ///         // Reads see this attempt's own writes.
    ///         self.0.send((recent.len().await?, recent.peek_front().await?))?;
    ///         Ok(())
    ///     }
    /// #   async fn on_timer(&self, _: Context, _: Timer) -> Result<(), HandlerError> { Ok(()) }
    /// #   async fn on_excise(&self, _: Context, _: Excise) -> Result<(), HandlerError> { Ok(()) }
    /// }
    ///
    /// #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// async fn main() -> Result<(), Box<dyn std::error::Error>> {
    ///     let client = ProsodyClient::builder()
    ///         .mock(true)
    ///         .group_id("pages")
    ///         .source_system("web")
    ///         .subscribed_topics(["visits"])
    ///         .state_collections([RECENT.spec()])
    ///         .build()
    ///         .await?;
    ///     let (reports, mut seen) = unbounded_channel();
    ///     client.subscribe(Pages(reports)).await?;
    ///     for page in ["home", "pricing", "signup"] {
    ///         client.send("visits", "ada", &json!({ "page": page })).await?;
    ///     }
    ///     for (len, oldest) in [(1, "home"), (2, "home"), (2, "pricing")] {
    ///         let (got_len, front) = tokio::time::timeout(Duration::from_secs(60), seen.recv())
    ///             .await?
    ///             .ok_or("the handler stopped")?;
    ///         assert_eq!((got_len, front.as_deref()), (len, Some(oldest)));
    ///     }
    ///     client.shutdown().await;
    ///     Ok(())
    /// }
    /// ```
    pub fn state_collections(mut self, collections: impl IntoIterator<Item = Spec>) -> Self {
        self.options.state_collections = collections.into_iter().collect();
        self
    }
}

impl<C: prosody_core::Codec> ClientBuilder<C> {
    /// Sets the option `name` from a JSON value, as a binding in another
    /// language or a configuration file gives it: a string as its
    /// environment variable reads, a number of seconds for a duration, an
    /// array of strings for a list, `null` to leave it unset (`probe_port`:
    /// `null` or `false` disables the probe server). `mode` takes
    /// `"pipeline"`, `"low-latency"` or `"best-effort"`;
    /// `state_collections` an array of collection objects (`name`, `kind`:
    /// `value`/`map`/`deque`, `payload`: `json`/`message`, and the
    /// optional `ttl`, `read_uncommitted`, `published`, `read_cache`,
    /// `keyset_limit`, `capacity`).
    ///
    /// # Errors
    ///
    /// [`ConfigError::Unknown`] for a name that is no option,
    /// [`ConfigError::Given`] for a value the option cannot take (both
    /// name the option; the second the value too).
    pub fn option(mut self, name: &str, value: &Value) -> Result<Self, ConfigError> {
        self.options.given(name, value)?;
        Ok(self)
    }

    /// Sets each option of `options` with [`ClientBuilder::option`].
    ///
    /// # Errors
    ///
    /// The first option that [`ClientBuilder::option`] refuses.
    pub fn options(self, options: &Map<String, Value>) -> Result<Self, ConfigError> {
        options
            .iter()
            .try_fold(self, |builder, (name, value)| builder.option(name, value))
    }
}
