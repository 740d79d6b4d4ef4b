//! The model the keyed-state tests hold the store to: one key's value, map
//! and deque as plain collections, and the operations a script runs.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// The deque's capacity in the tests: small, so pushes trim.
pub const CAPACITY: usize = 3;

/// One operation of a handler's script.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    ValueGet,
    ValueSet(i64),
    ValueClear,
    MapGet(String),
    MapGetMany(Vec<String>),
    MapContains(String),
    MapSet(String, i64),
    MapRemove(String),
    MapClear,
    MapItems(bool),
    MapKeys(bool),
    MapValues,
    PushBack(i64),
    PushFront(i64),
    PopBack,
    PopFront,
    PeekBack,
    PeekFront,
    DequeGet(u64),
    DequeLen,
    DequeValues(bool),
    DequeClear,
    /// Commits the collection the operation names (0 value, 1 map, 2 deque).
    Commit(u8),
    /// Rolls back that collection.
    Rollback(u8),
}

/// What one record asks of its handler: its operations, and how many of
/// its attempts fail (transiently) after running them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Script {
    pub ops: Vec<Op>,
    pub failures: u32,
}

/// What a read returned, to compare with the model's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Read {
    None,
    Value(Option<i64>),
    Values(Vec<Option<i64>>),
    Flag(bool),
    Items(Vec<(String, i64)>),
    Keys(Vec<String>),
    List(Vec<i64>),
    Len(u64),
}

/// One key's three collections.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    pub value: Option<i64>,
    pub map: BTreeMap<String, i64>,
    pub deque: VecDeque<i64>,
}

fn ordered<T>(items: impl DoubleEndedIterator<Item = T>, backward: bool) -> Vec<T> {
    if backward {
        items.rev().collect()
    } else {
        items.collect()
    }
}

impl Model {
    /// Applies `op` (but `Commit` and `Rollback`, which the caller applies
    /// to its layers) and returns what a read of it returns.
    pub fn apply(&mut self, op: &Op) -> Read {
        match op {
            Op::ValueGet => Read::Value(self.value),
            Op::ValueSet(v) => {
                self.value = Some(*v);
                Read::None
            }
            Op::ValueClear => {
                self.value = None;
                Read::None
            }
            Op::MapGet(k) => Read::Value(self.map.get(k).copied()),
            Op::MapGetMany(ks) => {
                Read::Values(ks.iter().map(|k| self.map.get(k).copied()).collect())
            }
            Op::MapContains(k) => Read::Flag(self.map.contains_key(k)),
            Op::MapSet(k, v) => {
                self.map.insert(k.clone(), *v);
                Read::None
            }
            Op::MapRemove(k) => {
                self.map.remove(k);
                Read::None
            }
            Op::MapClear => {
                self.map.clear();
                Read::None
            }
            Op::MapItems(back) => Read::Items(ordered(
                self.map.iter().map(|(k, v)| (k.clone(), *v)),
                *back,
            )),
            Op::MapKeys(back) => Read::Keys(ordered(self.map.keys().cloned(), *back)),
            Op::MapValues => Read::List(self.map.values().copied().collect()),
            Op::PushBack(v) => {
                self.deque.push_back(*v);
                if self.deque.len() > CAPACITY {
                    self.deque.pop_front();
                }
                Read::None
            }
            Op::PushFront(v) => {
                self.deque.push_front(*v);
                if self.deque.len() > CAPACITY {
                    self.deque.pop_back();
                }
                Read::None
            }
            Op::PopBack => Read::Value(self.deque.pop_back()),
            Op::PopFront => Read::Value(self.deque.pop_front()),
            Op::PeekBack => Read::Value(self.deque.back().copied()),
            Op::PeekFront => Read::Value(self.deque.front().copied()),
            Op::DequeGet(i) => Read::Value(
                usize::try_from(*i)
                    .ok()
                    .and_then(|i| self.deque.get(i))
                    .copied(),
            ),
            Op::DequeLen => Read::Len(self.deque.len() as u64),
            Op::DequeValues(back) => Read::List(ordered(self.deque.iter().copied(), *back)),
            Op::DequeClear => {
                self.deque.clear();
                Read::None
            }
            Op::Commit(_) | Op::Rollback(_) => Read::None,
        }
    }

    /// Copies collection `which` of `from`.
    pub fn take(&mut self, from: &Self, which: u8) {
        match which {
            0 => self.value = from.value,
            1 => self.map.clone_from(&from.map),
            _ => self.deque.clone_from(&from.deque),
        }
    }
}
