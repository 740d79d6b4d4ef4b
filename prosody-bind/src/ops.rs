//! Keyed-state operations by name, on a handler's collection or a
//! published reader: what a binding's state handles call.

use crate::collection::Collection;
use prosody::state::{
    DequeState, Direction, Encoding, MapState, PublishedDeque, PublishedMap, PublishedValue,
    StateError, ValueState,
};
use prosody::{ClientError, ClientReads, Context, Message, ProsodyClient};
use serde_json::Value;
use std::collections::VecDeque;

/// An item of a collection (a JSON value, or a Kafka message), or an
/// operation's argument: a key, an index or a direction (`"forward"`,
/// `"backward"`) as JSON.
#[derive(Debug, Clone)]
pub enum Item {
    /// A JSON collection's value.
    Json(Value),
    /// A message collection's message.
    Message(Box<Message<Value>>),
}

/// What an operation returns.
#[derive(Debug)]
pub enum Reply {
    /// Nothing (a write, `clear`, `commit`, `rollback`).
    Unit,
    /// `contains`, `is_empty`.
    Bool(bool),
    /// `size`.
    Count(u64),
    /// `get`, `pop`, `peek`: the item, if there is one.
    Item(Option<Item>),
    /// `get_many`: one per key asked, in order.
    Items(Vec<Option<Item>>),
}

/// Why an operation failed.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    /// The store or the collection refused it; its category says whether
    /// another attempt may succeed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The operation or its arguments do not fit the collection.
    #[error("{0}")]
    Usage(String),
    /// The client refused to open a reader.
    #[error(transparent)]
    Client(#[from] ClientError),
}

pub(crate) fn usage(text: impl Into<String>) -> OpError {
    OpError::Usage(text.into())
}

/// How an item type crosses to the binding and back.
pub(crate) trait Form: Sized + Send + Sync + 'static {
    fn from_item(item: Item, op: &str) -> Result<Self, OpError>;
    fn into_item(self) -> Item;
}

impl Form for Value {
    fn from_item(item: Item, op: &str) -> Result<Self, OpError> {
        match item {
            Item::Json(value) => Ok(value),
            Item::Message(_) => Err(usage(format!(
                "{op}: a JSON collection holds JSON values, not messages"
            ))),
        }
    }

    fn into_item(self) -> Item {
        Item::Json(self)
    }
}

impl Form for Message<Value> {
    fn from_item(item: Item, op: &str) -> Result<Self, OpError> {
        match item {
            Item::Message(message) => Ok(*message),
            Item::Json(_) => Err(usage(format!(
                "{op}: a message collection holds messages received by a handler"
            ))),
        }
    }

    fn into_item(self) -> Item {
        Item::Message(Box::new(self))
    }
}

/// An operation's arguments, taken in order.
pub(crate) struct Args {
    pub(crate) op: String,
    args: VecDeque<Item>,
}

impl Args {
    fn item<T: Form>(&mut self) -> Result<T, OpError> {
        let item = self
            .args
            .pop_front()
            .ok_or_else(|| usage(format!("{} needs an item", self.op)))?;
        T::from_item(item, &self.op)
    }

    fn json(&mut self, what: &str) -> Result<Value, OpError> {
        match self.args.pop_front() {
            Some(Item::Json(value)) => Ok(value),
            _ => Err(usage(format!("{} needs {what}", self.op))),
        }
    }

    fn text(&mut self) -> Result<String, OpError> {
        match self.json("a string key")? {
            Value::String(text) => Ok(text),
            other => Err(usage(format!("{}: keys are strings, not {other}", self.op))),
        }
    }

    fn texts(&mut self) -> Result<Vec<String>, OpError> {
        match self.json("a list of keys")? {
            Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    Value::String(text) => Ok(text),
                    other => Err(usage(format!("{}: keys are strings, not {other}", self.op))),
                })
                .collect(),
            other => Err(usage(format!(
                "{}: expected a list of keys, not {other}",
                self.op
            ))),
        }
    }

    fn index(&mut self) -> Result<u64, OpError> {
        let value = self.json("an index")?;
        value.as_u64().ok_or_else(|| {
            usage(format!(
                "{}: an index is a whole number, not {value}",
                self.op
            ))
        })
    }

    /// The optional direction, forward by default.
    pub(crate) fn direction(&mut self) -> Result<Direction, OpError> {
        match self.args.pop_front() {
            None | Some(Item::Json(Value::Null)) => Ok(Direction::Forward),
            Some(Item::Json(Value::String(text))) => match text.to_ascii_lowercase().as_str() {
                "forward" => Ok(Direction::Forward),
                "backward" => Ok(Direction::Backward),
                _ => Err(usage(format!(
                    "{}: direction {text:?} is not forward or backward",
                    self.op
                ))),
            },
            Some(_) => Err(usage(format!(
                "{}: a direction is forward or backward",
                self.op
            ))),
        }
    }

    pub(crate) fn unknown(&self, kind: &str) -> OpError {
        usage(format!("a {kind} has no operation `{}`", self.op))
    }
}

fn item<T: Form>(found: Option<T>) -> Reply {
    Reply::Item(found.map(Form::into_item))
}

async fn value<T: Form, E: Encoding<T>>(
    handle: ValueState<'_, T, E>,
    mut args: Args,
) -> Result<Reply, OpError> {
    Ok(match args.op.as_str() {
        "get" => item(handle.get().await?),
        "set" => handle.set(&args.item::<T>()?).await.map(|()| Reply::Unit)?,
        "clear" => handle.clear().await.map(|()| Reply::Unit)?,
        "commit" => handle.commit().await.map(|()| Reply::Unit)?,
        "rollback" => handle.rollback().map(|()| Reply::Unit)?,
        _ => return Err(args.unknown("value")),
    })
}

async fn map<T: Form, E: Encoding<T>>(
    handle: MapState<'_, T, E>,
    mut args: Args,
) -> Result<Reply, OpError> {
    Ok(match args.op.as_str() {
        "get" => item(handle.get(&args.text()?).await?),
        "get_many" => {
            let keys = args.texts()?;
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let found = handle.get_many(&keys).await?;
            Reply::Items(found.into_iter().map(|f| f.map(Form::into_item)).collect())
        }
        "contains" => Reply::Bool(handle.contains(&args.text()?).await?),
        "set" => {
            let key = args.text()?;
            handle
                .set(&key, &args.item::<T>()?)
                .await
                .map(|()| Reply::Unit)?
        }
        "remove" => handle.remove(&args.text()?).await.map(|()| Reply::Unit)?,
        "clear" => handle.clear().await.map(|()| Reply::Unit)?,
        "commit" => handle.commit().await.map(|()| Reply::Unit)?,
        "rollback" => handle.rollback().map(|()| Reply::Unit)?,
        _ => return Err(args.unknown("map")),
    })
}

async fn deque<T: Form, E: Encoding<T>>(
    handle: DequeState<'_, T, E>,
    mut args: Args,
) -> Result<Reply, OpError> {
    Ok(match args.op.as_str() {
        "append" => handle
            .push_back(&args.item::<T>()?)
            .await
            .map(|()| Reply::Unit)?,
        "appendleft" => handle
            .push_front(&args.item::<T>()?)
            .await
            .map(|()| Reply::Unit)?,
        "pop" => item(handle.pop_back().await?),
        "popleft" => item(handle.pop_front().await?),
        "peek" => item(handle.peek_back().await?),
        "peekleft" => item(handle.peek_front().await?),
        "get" => item(handle.get(args.index()?).await?),
        "size" => Reply::Count(handle.len().await?),
        "is_empty" => Reply::Bool(handle.is_empty().await?),
        "clear" => handle.clear().await.map(|()| Reply::Unit)?,
        "commit" => handle.commit().await.map(|()| Reply::Unit)?,
        "rollback" => handle.rollback().map(|()| Reply::Unit)?,
        _ => return Err(args.unknown("deque")),
    })
}

/// An operation by name, with its arguments.
#[derive(Debug)]
pub struct Op {
    name: String,
    args: Vec<Item>,
}

impl Op {
    /// The operation `name` (a method of the binding's handle: `get`,
    /// `set`, `append`, `items`, ...) with its arguments.
    #[must_use]
    pub fn new(name: impl Into<String>, args: Vec<Item>) -> Self {
        Self {
            name: name.into(),
            args,
        }
    }

    /// The operation's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn args(self) -> Args {
        Args {
            op: self.name,
            args: self.args.into(),
        }
    }

    /// Runs on the current key's `collection`, in the attempt `context`
    /// belongs to.
    ///
    /// # Errors
    ///
    /// [`OpError::State`] when the collection is not registered or the
    /// store fails; [`OpError::Usage`] for an operation the collection
    /// lacks or arguments that do not fit.
    pub async fn run(self, context: &Context, collection: &Collection) -> Result<Reply, OpError> {
        let args = self.args();
        match collection {
            Collection::Value(def) => value(context.state(def)?, args).await,
            Collection::Map(def) => map(context.state(def)?, args).await,
            Collection::Deque(def) => deque(context.state(def)?, args).await,
            Collection::MessageValue(def) => value(context.state(def)?, args).await,
            Collection::MessageMap(def) => map(context.state(def)?, args).await,
            Collection::MessageDeque(def) => deque(context.state(def)?, args).await,
        }
    }
}

/// A published collection's reader.
pub enum Reader {
    /// A published value.
    Value(PublishedValue<Value, ClientReads>),
    /// A published map.
    Map(PublishedMap<Value, ClientReads>),
    /// A published deque.
    Deque(PublishedDeque<Value, ClientReads>),
}

impl Reader {
    /// Opens the reader of `collection` as `subsystem` publishes it.
    ///
    /// # Errors
    ///
    /// [`OpError::Usage`] for a message collection (never published);
    /// [`OpError::Client`] when the client refuses (unpublished, closed).
    pub async fn open(
        client: &ProsodyClient,
        subsystem: &str,
        collection: &Collection,
    ) -> Result<Self, OpError> {
        Ok(match collection {
            Collection::Value(def) => Self::Value(client.state(subsystem, def).await?),
            Collection::Map(def) => Self::Map(client.state(subsystem, def).await?),
            Collection::Deque(def) => Self::Deque(client.state(subsystem, def).await?),
            _ => return Err(usage("a message collection cannot be published")),
        })
    }

    /// Runs a read of `key`'s collection.
    ///
    /// # Errors
    ///
    /// [`OpError::State`] when the store fails; [`OpError::Usage`] for an
    /// operation the reader lacks.
    pub async fn read(&self, key: &str, op: Op) -> Result<Reply, OpError> {
        let mut args = op.args();
        Ok(match (self, args.op.as_str()) {
            (Self::Value(reader), "get") => item(reader.get(key).await?),
            (Self::Map(reader), "get") => item(reader.get(key, &args.text()?).await?),
            (Self::Map(reader), "get_many") => {
                let keys = args.texts()?;
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                let found = reader.get_many(key, &keys).await?;
                Reply::Items(found.into_iter().map(|f| f.map(Form::into_item)).collect())
            }
            (Self::Map(reader), "contains") => {
                Reply::Bool(reader.contains(key, &args.text()?).await?)
            }
            (Self::Deque(reader), "get") => item(reader.get(key, args.index()?).await?),
            (Self::Deque(reader), "size") => Reply::Count(reader.len(key).await?),
            (Self::Deque(reader), "is_empty") => Reply::Bool(reader.is_empty(key).await?),
            (Self::Deque(reader), "peek") => item(reader.peek_back(key).await?),
            (Self::Deque(reader), "peekleft") => item(reader.peek_front(key).await?),
            _ => return Err(args.unknown("published reader")),
        })
    }
}
