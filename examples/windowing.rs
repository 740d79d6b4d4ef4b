//! Windowing: a key's activity within a window becomes one notification.
//! Mock mode: no server.
//!
//! The first activity of a key opens a window: it schedules a timer for
//! the window's end. Every activity of the window is kept in a deque of
//! messages (the newest 100): the store keeps each message's position and
//! the handler reads the messages back from the log, so the topic must
//! keep them for the window (use a `DequeDef` of payloads where retention
//! or compaction cannot promise that). When the timer fires, the handler sends one notification
//! with everything the window held and clears it; the next activity opens
//! a new window. State and timer change together: a failed attempt leaves
//! neither, so a window never loses its timer or gets two.
//!
//! Run with `cargo run --example windowing`.

use futures_util::StreamExt;
use prosody::state::{Direction, MessageDequeDef, StateError, ValueDef};
use prosody::{
    Context, EventHandler, Excise, HandlerError, Message, ProsodyClient, Timer, Timestamp,
};
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// How long a window stays open (five minutes in production; short here).
const WINDOW: Duration = Duration::from_secs(2);
const DAY: Duration = Duration::from_secs(86_400);

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Activity {
    what: String,
}

/// Whether the key has an open window (its timer is scheduled).
static OPEN: ValueDef<bool> = ValueDef::new("window_open").ttl(DAY);
/// The window's messages, the newest 100.
static PENDING: MessageDequeDef<Activity> = MessageDequeDef::new("window_pending")
    .capacity(100)
    .ttl(DAY);

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

struct Windows {
    notified: mpsc::UnboundedSender<(String, Vec<String>)>,
}

impl EventHandler for Windows {
    type Payload = Activity;
    type Output = ();

    async fn on_message(
        &self,
        context: Context,
        message: Message<Activity>,
    ) -> Result<(), HandlerError> {
        context.state(&PENDING)?.push_back(&message).await?;
        let open = context.state(&OPEN)?;
        if open.get().await? != Some(true) {
            let end = i64::try_from(WINDOW.as_millis()).unwrap_or(i64::MAX);
            context.clear_and_schedule(Timestamp::from_millis(now_millis() + end))?;
            open.set(&true).await?;
        }
        Ok(())
    }

    async fn on_timer(&self, context: Context, _: Timer) -> Result<(), HandlerError> {
        let pending = context.state(&PENDING)?;
        let mut window: Vec<Message<Activity>> = Vec::new();
        let mut read = std::pin::pin!(pending.values(Direction::Forward));
        while let Some(message) = read.next().await {
            match message {
                Ok(message) => window.push(message),
                // Retention removed it: the window goes on without it.
                Err(StateError::MessageGone { .. }) => {}
                Err(error) => return Err(error.into()),
            }
        }
        // The notification is a side effect: it is sent again if the
        // attempt fails after it, so a real one would carry an id.
        let summary = window
            .into_iter()
            .map(|message| format!("{} (offset {})", message.payload.what, message.offset))
            .collect();
        self.notified.send((context.key().to_string(), summary))?;
        pending.clear().await?;
        context.state(&OPEN)?.clear().await?;
        Ok(())
    }

    async fn on_excise(&self, context: Context, _: Excise) -> Result<(), HandlerError> {
        context.clear_state()?;
        context.clear_scheduled()?;
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let client = ProsodyClient::builder()
        .codec(prosody::JsonCodec::<Activity>::new())
        .mock(true)
        .group_id("windowing")
        .source_system("windowing-producer")
        .subscribed_topics(["activity"])
        .state_collections([OPEN.spec(), PENDING.spec()])
        .build()
        .await?;
    let (notified, mut notifications) = mpsc::unbounded_channel();
    client.subscribe(Windows { notified }).await?;

    let activity = [
        ("ada", "liked"),
        ("grace", "commented"),
        ("ada", "shared"),
        ("ada", "liked"),
    ];
    for (user, what) in activity {
        client
            .send(
                "activity",
                user,
                &Activity {
                    what: what.to_owned(),
                },
            )
            .await?;
    }
    for _ in 0..2 {
        let (user, window) = tokio::time::timeout(Duration::from_secs(30), notifications.recv())
            .await?
            .ok_or("the handler stopped")?;
        println!(
            "{user}: one notification for {} activities: {}",
            window.len(),
            window.join(", ")
        );
    }
    client.shutdown().await;
    Ok(())
}
