//! The checker: what the library promises, against what a scenario's
//! members did.

use super::handler::{Entry, Observed, What};
use super::scenario::{Scenario, Script};
use super::{DEFER_BASE, FAILURES, GROUP, TIMEOUT, World, all_partitions};
use prosody::Mode;
use prosody_core::Demand;
use prosody_core::defer::DeferConfig;
use prosody_core::failure::{CATEGORY_HEADER, SOURCE_OFFSET_HEADER};
use prosody_core::timeout::TimeoutConfig;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// How many records have reached their end: succeeded, or skipped as the
/// duplicate (by id) of one that succeeded, or settled by the mode's path
/// for failures: pipeline logs permanent failures, low-latency routes
/// every failure to the failure topic, best-effort logs any failure.
pub fn settled(mode: Mode, records: &[Script], observed: &Observed) -> usize {
    let succeeded_ids: HashSet<&str> = records
        .iter()
        .filter(|r| observed.succeeded.contains(&r.n))
        .filter_map(|r| r.id.as_deref())
        .collect();
    records
        .iter()
        .filter(|r| {
            let failed = match mode {
                Mode::Pipeline => observed.failed_for_good.contains(&r.n),
                Mode::LowLatency => observed.routed.contains(&r.n),
                // Tried once at least (a timed-out try fails unseen), or
                // failed to decode.
                Mode::BestEffort => {
                    observed.attempts.contains_key(&r.n) || observed.failed_for_good.contains(&r.n)
                }
            };
            observed.succeeded.contains(&r.n)
                || failed
                || r.id.as_deref().is_some_and(|id| succeeded_ids.contains(id))
        })
        .count()
}

/// The timers that must fire: kept by a successful attempt whose commit
/// reached the store.
pub fn all_fired(observed: &Observed) -> bool {
    let fired: HashSet<(&str, i64)> = observed
        .fired
        .iter()
        .map(|(key, at, _)| (key.as_str(), *at))
        .collect();
    observed
        .timers_kept
        .intersection(&observed.timers_written)
        .filter(|timer| !observed.timers_cleared.contains(*timer))
        .all(|(key, at)| fired.contains(&(key.as_str(), *at)))
}

/// The promises, against what was observed.
pub fn check(scenario: &Scenario, world: &World, finished: bool) -> Result<(), String> {
    let observed = world.probe.lock();
    let records = &scenario.records;
    if !observed.violations.is_empty() {
        return Err(format!("violations: {:?}", observed.violations));
    }
    if !finished {
        return Err(unsettled(scenario, world, &observed));
    }
    // Per key, each distinct event reaches its end in offset order: its
    // first success, or its first failure that the mode settles (pipeline:
    // permanent; low-latency: routed; best-effort: any). A duplicate (by
    // id) of a record that already ended is the same event again: handling
    // it later is at-least-once, not disorder; so is a replay after an end.
    let ends = |what: What| match scenario.mode {
        Mode::Pipeline => matches!(what, What::Success | What::Permanent),
        Mode::LowLatency => matches!(what, What::Success | What::Routed),
        Mode::BestEffort => what != What::Routed,
    };
    let mut ended = HashSet::new();
    let mut ids = HashSet::new();
    let mut last: HashMap<&str, (i32, i64)> = HashMap::new();
    for entry in observed.log.iter().filter(|entry| ends(entry.what)) {
        if !ended.insert(entry.n) {
            continue;
        }
        let id = usize::try_from(entry.n)
            .ok()
            .and_then(|n| records[n].id.as_deref());
        if id.is_some_and(|id| !ids.insert(id)) {
            continue;
        }
        let (key, partition, offset) = (entry.key.as_str(), entry.partition, entry.offset);
        if let Some(&(p, o)) = last.get(key)
            && (p != partition || o >= offset)
        {
            let history: Vec<_> = observed
                .log
                .iter()
                .filter(|e| e.key == key)
                .map(|e| (e.offset, e.what))
                .collect();
            return Err(format!(
                "key {key}: offset {offset} ended first after {o}; its log (offset, what) {history:?}"
            ));
        }
        last.insert(key, (partition, offset));
    }
    // Timers fire at or after their time, and a failed attempt's never.
    for (key, at, fired_at) in &observed.fired {
        if fired_at < at {
            return Err(format!("timer {key}@{at} fired early, at {fired_at}"));
        }
        let kept = observed.timers_kept.contains(&(key.clone(), *at));
        if !kept && observed.timers_dropped.contains(&(key.clone(), *at)) {
            return Err(format!("timer {key}@{at} of a failed attempt fired"));
        }
    }
    if !all_fired(&observed) {
        return Err(format!(
            "a timer the store took never fired: kept {:?}, fired {:?}",
            observed.timers_kept, observed.fired
        ));
    }
    attempts(scenario, &observed)?;
    drop(observed);
    failure_topic(scenario, world)?;
    // Every partition is committed to its end.
    for tp in all_partitions(scenario.topics, scenario.partitions) {
        let partition = &tp;
        let end = world.broker.end_offset(&tp).expect("partition");
        let committed = world.broker.committed_offset(GROUP, &tp).unwrap_or(0);
        if committed != end {
            return Err(format!(
                "partition {partition} committed to {committed} of {end}"
            ));
        }
    }
    Ok(())
}

/// The attempts each record's calls saw. Every call: attempt 1 is fresh
/// work (`Normal`), a later attempt a retry (`Failure`). Without store or
/// broker faults (which fail attempts before the handler is called), no
/// call's attempt exceeds one more than the record's failed calls before
/// it; and in pipeline mode, with no membership change either, a failed
/// call is tried again within the defer delay its failure count allows
/// (plus what the scenario's other calls can hold it up), so a record
/// queued behind a deferral starts with fresh attempts and delays.
fn attempts(scenario: &Scenario, observed: &Observed) -> Result<(), String> {
    let mut calls: HashMap<u64, Vec<&Entry>> = HashMap::new();
    for entry in observed.log.iter().filter(|e| e.what != What::Routed) {
        calls.entry(entry.n).or_default().push(entry);
    }
    let calm = scenario.fault_percent == 0;
    let timed = calm && scenario.changes.is_empty() && scenario.mode == Mode::Pipeline;
    let delays = DeferConfig {
        base: DEFER_BASE,
        ..DeferConfig::default()
    };
    // The longest the scenario's other calls can keep a retry waiting:
    // every latency, every slow first attempt, and the rounding of the
    // timer to the next second.
    let slow = scenario.records.iter().filter(|r| r.slow_first).count();
    let latency: u64 = scenario.records.iter().map(|r| r.latency_ms).sum();
    let held = Duration::from_millis(latency)
        + (TIMEOUT + TimeoutConfig { timeout: TIMEOUT }.grace())
            * u32::try_from(slow).unwrap_or(u32::MAX)
        + Duration::from_secs(2);
    for (n, calls) in &calls {
        let mut failed = 0u32;
        let mut previous: Option<&Entry> = None;
        for call in calls {
            let fresh = call.attempt == 1;
            if fresh != (call.demand == Demand::Normal) {
                return Err(format!(
                    "record {n}: attempt {} ran as {:?} demand; calls {}",
                    call.attempt,
                    call.demand,
                    history(calls)
                ));
            }
            if calm && call.attempt > failed + 1 {
                return Err(format!(
                    "record {n}: attempt {} after {failed} failed calls; calls {}",
                    call.attempt,
                    history(calls)
                ));
            }
            if let (true, Some(before)) = (timed, previous) {
                let waited =
                    Duration::from_millis(u64::try_from(call.started - before.ended).unwrap_or(0));
                let allowed = delays.backoff().delay(failed) + held;
                if waited > allowed {
                    return Err(format!(
                        "record {n}: tried again {waited:?} after failure {failed}, allowed {allowed:?}; calls {}",
                        history(calls)
                    ));
                }
            }
            if call.what != What::Success {
                failed += 1;
            }
            previous = Some(call);
        }
    }
    Ok(())
}

/// A record's calls: (attempt, demand, what, started at, in ms).
fn history(calls: &[&Entry]) -> String {
    let calls: Vec<_> = calls
        .iter()
        .map(|c| (c.attempt, c.demand, c.what, c.started))
        .collect();
    format!("(attempt, demand, what, started) {calls:?}")
}

/// In low-latency mode, each record that does not decode reaches the
/// failure topic as it was produced (key and payload bytes), with its
/// error's category and its offset; exactly once when no member changed
/// and no call failed (a crash, or a partition that moves while an earlier
/// record is unsettled or a commit fails, redelivers what settled after
/// the last commit, as at-least-once allows).
fn failure_topic(scenario: &Scenario, world: &World) -> Result<(), String> {
    if scenario.mode != Mode::LowLatency {
        return Ok(());
    }
    let mut copies: HashMap<u64, usize> = HashMap::new();
    for record in world.broker.records(FAILURES) {
        let Some(n) = record.payload.as_deref().and_then(Script::number) else {
            return Err(format!(
                "an unknown record on the failure topic: {record:?}"
            ));
        };
        let script = &scenario.records[usize::try_from(n).unwrap_or(usize::MAX)];
        if script.poison.is_none() {
            continue;
        }
        let (key, payload) = (script.key_bytes(), script.payload_bytes());
        if record.key.as_deref() != Some(&key[..])
            || record.payload.as_deref() != Some(&payload[..])
        {
            return Err(format!(
                "record {n} reached the failure topic changed: {record:?}"
            ));
        }
        let category = record.headers.get_str(CATEGORY_HEADER);
        if category != Some("permanent") || record.headers.get_str(SOURCE_OFFSET_HEADER).is_none() {
            return Err(format!(
                "record {n} was routed without its error headers: {record:?}"
            ));
        }
        *copies.entry(n).or_default() += 1;
    }
    let redelivers = scenario.fault_percent > 0 || !scenario.changes.is_empty();
    for script in scenario.records.iter().filter(|r| r.poison.is_some()) {
        let count = copies.get(&script.n).copied().unwrap_or(0);
        if count == 0 || (count > 1 && !redelivers) {
            return Err(format!(
                "record {} ({:?}) is on the failure topic {count} times",
                script.n, script.poison
            ));
        }
    }
    Ok(())
}

/// What had not settled when a scenario ran out of time.
fn unsettled(scenario: &Scenario, world: &World, observed: &Observed) -> String {
    let records = &scenario.records;
    let left: Vec<u64> = records
        .iter()
        .filter(|r| settled(scenario.mode, std::slice::from_ref(*r), observed) == 0)
        .map(|r| r.n)
        .collect();
    let fired: HashSet<(&str, i64)> = observed
        .fired
        .iter()
        .map(|(key, at, _)| (key.as_str(), *at))
        .collect();
    let unfired: Vec<_> = observed
        .timers_kept
        .intersection(&observed.timers_written)
        .filter(|timer| !observed.timers_cleared.contains(*timer))
        .filter(|(key, at)| !fired.contains(&(key.as_str(), *at)))
        .collect();
    let logged: Vec<_> = observed
        .log
        .iter()
        .filter(|entry| left.contains(&entry.n))
        .map(|entry| (entry.n, entry.offset, entry.what))
        .collect();
    let commits: Vec<_> = all_partitions(scenario.topics, scenario.partitions)
        .map(|tp| {
            let committed = world.broker.committed_offset(GROUP, &tp);
            (tp.partition, committed, world.broker.end_offset(&tp))
        })
        .collect();
    format!(
        "not everything settled: records {left:?} (log {logged:?}), timers that must fire and did not {unfired:?}, commits (partition, committed, end) {commits:?}"
    )
}
