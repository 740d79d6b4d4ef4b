//! Scenarios drawn from one seed: the workload, what each handler call
//! does, and when members join, leave and crash.

use serde::{Deserialize, Serialize};

/// A small, fast generator (SplitMix64): one seed, one sequence.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// What the handler does with one record, carried in its payload.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[allow(
    clippy::struct_excessive_bools,
    reason = "each flag is one scripted behaviour"
)]
pub struct Script {
    /// The topic: `events-0` or `events-1`.
    pub topic: u8,
    pub key: String,
    /// The record's number in the workload, to tell records apart.
    pub n: u64,
    pub latency_ms: u64,
    /// Attempts that fail transiently before it succeeds.
    pub failures: u32,
    /// The first attempt panics (caught as a transient failure).
    pub panics: bool,
    /// The first attempt outlasts the attempt timeout.
    pub slow_first: bool,
    /// Clears the key's timers (before scheduling its own, if any).
    pub clears: bool,
    /// The record fails for good: logged and settled, never retried.
    pub permanent: bool,
    /// Schedules a timer this many seconds ahead (each attempt schedules
    /// one at a time of its own, so a failed attempt's timer is told apart).
    pub timer_in: Option<u64>,
    /// The dedup id; duplicates share one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The record does not decode: it never reaches the handler, and takes
    /// its mode's path for permanent failures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poison: Option<Poison>,
}

/// How a record fails to decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Poison {
    /// Its payload is not JSON.
    Payload,
    /// Its key is not UTF-8 (its payload is a script).
    Key,
}

/// The payload of a record whose payload does not decode.
const NOT_JSON: &str = "not json, record ";

impl Script {
    /// The record's key as produced.
    pub fn key_bytes(&self) -> Vec<u8> {
        match self.poison {
            Some(Poison::Key) => [&[0xFF, 0xFE][..], self.key.as_bytes()].concat(),
            _ => self.key.clone().into_bytes(),
        }
    }

    /// The record's payload as produced.
    pub fn payload_bytes(&self) -> Vec<u8> {
        match self.poison {
            Some(Poison::Payload) => format!("{NOT_JSON}{}", self.n).into_bytes(),
            _ => serde_json::to_vec(self).expect("encode"),
        }
    }

    /// The number of the record a payload was produced for.
    pub fn number(payload: &[u8]) -> Option<u64> {
        if let Ok(script) = serde_json::from_slice::<Self>(payload) {
            return Some(script.n);
        }
        std::str::from_utf8(payload)
            .ok()?
            .strip_prefix(NOT_JSON)?
            .parse()
            .ok()
    }
}

/// A change of membership, once some records have been handled.
#[derive(Clone, Copy, Debug)]
pub enum Change {
    /// A new member joins.
    Join,
    /// A member leaves: it drains and commits.
    Leave,
    /// A member is dropped without draining, and a new one starts.
    Crash,
}

#[derive(Debug)]
pub struct Scenario {
    pub mode: prosody::Mode,
    pub topics: u8,
    pub partitions: i32,
    pub max_concurrency: usize,
    pub records: Vec<Script>,
    /// Changes, each after this many records were handled.
    pub changes: Vec<(usize, Change)>,
    /// The share of broker and store calls that fail, in percent.
    pub fault_percent: u64,
}

impl Scenario {
    pub fn generate(seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        // A stream of its own for what later versions added, so the draws
        // above stay those of older scenarios.
        let mut extra = Rng::new(seed ^ 0x005E_ED0F_BADB_17E5);
        let topics = u8::try_from(rng.range(1, 2)).unwrap_or(1);
        let partitions = i32::try_from(rng.range(1, 4)).unwrap_or(1);
        let max_concurrency = usize::try_from(rng.range(1, 8)).unwrap_or(1);
        let keys = rng.range(1, 10);
        let count = rng.range(1, 60);
        let mut records: Vec<Script> = Vec::new();
        for n in 0..count {
            // Hot keys: half the records go to the first two keys.
            let key = if rng.chance(50) {
                rng.range(0, 1)
            } else {
                rng.range(0, keys - 1)
            };
            let topic = u8::try_from(rng.range(0, u64::from(topics) - 1)).unwrap_or(0);
            let duplicate = !records.is_empty() && rng.chance(5);
            let script = if duplicate {
                let copied = usize::try_from(rng.range(0, records.len() as u64 - 1)).unwrap_or(0);
                let mut copy = records[copied].clone();
                copy.n = n;
                copy
            } else {
                Script {
                    topic,
                    // Keys are per topic.
                    key: format!("t{topic}-key-{key}"),
                    n,
                    latency_ms: rng.range(0, 50),
                    failures: if rng.chance(25) {
                        u32::try_from(rng.range(1, 3)).unwrap_or(1)
                    } else {
                        0
                    },
                    panics: rng.chance(5),
                    slow_first: rng.chance(5),
                    clears: rng.chance(10),
                    permanent: rng.chance(5),
                    timer_in: rng.chance(20).then(|| rng.range(1, 30)),
                    id: rng.chance(30).then(|| format!("id-{n}")),
                    poison: extra.chance(5).then(|| {
                        if extra.chance(50) {
                            Poison::Payload
                        } else {
                            Poison::Key
                        }
                    }),
                }
            };
            records.push(script);
        }
        let mut changes = Vec::new();
        for _ in 0..rng.range(0, 3) {
            let after = usize::try_from(rng.range(0, count)).unwrap_or(0);
            let change = match rng.range(0, 2) {
                0 => Change::Join,
                1 => Change::Leave,
                _ => Change::Crash,
            };
            changes.push((after, change));
        }
        changes.sort_by_key(|(after, _)| *after);
        let fault_percent = if rng.chance(33) { 0 } else { rng.range(1, 10) };
        let mode = match rng.range(0, 4) {
            0 => prosody::Mode::LowLatency,
            1 => prosody::Mode::BestEffort,
            _ => prosody::Mode::Pipeline,
        };
        Self {
            mode,
            topics,
            partitions,
            max_concurrency,
            records,
            changes,
            fault_percent,
        }
    }
}
