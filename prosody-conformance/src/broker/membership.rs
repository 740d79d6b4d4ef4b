//! Checks of group membership: splits, leaves, crashes and hand-overs.

use super::driver::{Group, split_pair};
use super::fixture::{Fixture, broker_failure, ensure_eq};
use super::{Checked, Failure, Harness};
use prosody_contracts::broker::{BrokerError, Consumer, ConsumerEvent, TopicPartition};
use std::collections::BTreeSet;
use tokio::time::timeout;

/// Two members of a group on an 8-partition topic own 4 partitions each,
/// disjoint and covering the topic, and each receives only its partitions'
/// records.
pub async fn group_splits_partitions(harness: &impl Harness) -> Checked {
    let mut fixture = Fixture::new(harness, "split", 8).await?;
    let mut group = split_pair(&fixture).await?;
    let before: Vec<BTreeSet<TopicPartition>> =
        group.members.iter().map(|m| m.owned.clone()).collect();
    let records = fixture.produce(2).await?;
    group
        .until(fixture.deadline(), "every produced record", |g| {
            g.received() >= records.len()
        })
        .await?;
    let after: Vec<BTreeSet<TopicPartition>> =
        group.members.iter().map(|m| m.owned.clone()).collect();
    ensure_eq("the members' partitions after consuming", &before, &after)?;
    ensure_eq(
        "the number of records received",
        &records.len(),
        &group.received(),
    )
}

/// How a member leaves in [`close_moves_partitions`] and
/// [`drop_moves_partitions`].
#[derive(Clone, Copy, Debug)]
enum Leave {
    Close,
    Drop,
}

async fn leave_moves_partitions(harness: &impl Harness, leave: Leave) -> Checked {
    let mut fixture = Fixture::new(harness, "leave", 8).await?;
    let mut group = split_pair(&fixture).await?;
    let records = fixture.produce(3).await?;
    group
        .until(fixture.deadline(), "every produced record", |g| {
            g.received() >= records.len()
        })
        .await?;
    let leaver = group.member_mut(1)?;
    let moved = leaver.owned.clone();
    for tp in &moved {
        leaver
            .consumer
            .store_offset(tp, 1)
            .map_err(broker_failure("storing an offset"))?;
    }
    leaver
        .consumer
        .commit()
        .await
        .map_err(broker_failure("committing"))?;
    let leaver = group.members.remove(1);
    match leave {
        Leave::Close => timeout(fixture.deadline, leaver.consumer.close())
            .await
            .map_err(|_| Failure(format!("close did not finish in {:?}", fixture.deadline)))?,
        Leave::Drop => drop(leaver),
    }
    let all = fixture.all_partitions();
    group
        .until(
            fixture.deadline(),
            "the remaining member to own every partition and read the moved ones",
            |g| {
                g.members.first().is_some_and(|m| {
                    m.owned == all && moved.iter().all(|tp| m.offsets(tp).len() >= 2)
                })
            },
        )
        .await?;
    let stayer = group.member(0)?;
    for tp in &moved {
        ensure_eq(
            &format!(
                "the offsets of moved partition {tp} read by the remaining member ({leave:?}, committed 1)"
            ),
            &[1, 2].as_slice(),
            &stayer.offsets(tp),
        )?;
    }
    Ok(())
}

/// A member that closes hands its partitions to the remaining member, which
/// reads them from the committed offsets.
pub async fn close_moves_partitions(harness: &impl Harness) -> Checked {
    leave_moves_partitions(harness, Leave::Close).await
}

/// A member dropped without closing (a crash) loses its partitions to the
/// remaining member, which reads them from the committed offsets.
pub async fn drop_moves_partitions(harness: &impl Harness) -> Checked {
    leave_moves_partitions(harness, Leave::Drop).await
}

/// A revoked member may still store and commit offsets of the revoked
/// partitions until it polls again, and the new owner starts exactly there:
/// no partition has two owners at once.
///
/// A broker may refuse that commit with a retriable error when its group
/// starts another rebalance meanwhile (librdkafka's mock cluster refuses
/// commits while members rejoin; a Kafka broker takes the current
/// generation's): such a round proves nothing and runs again, in a group
/// of its own, three rounds at most, each refusal printed.
pub async fn revocation_hands_over_committed_offsets(harness: &impl Harness) -> Checked {
    const ROUNDS: usize = 3;
    for round in 1..=ROUNDS {
        match hand_over(harness).await? {
            None => return Ok(()),
            Some(error) if round < ROUNDS => {
                eprintln!(
                    "round {round}: the commit during the revocation was refused ({error}); again"
                );
            }
            Some(error) => return Err(broker_failure("committing during a revocation")(error)),
        }
    }
    Ok(())
}

/// One round of [`revocation_hands_over_committed_offsets`]; the retriable
/// error that refused the commit, if one did.
async fn hand_over(harness: &impl Harness) -> Result<Option<BrokerError>, Failure> {
    let mut fixture = Fixture::new(harness, "handover", 8).await?;
    let mut group = Group::new(vec![fixture.join("first member", &fixture.group).await?]);
    let records = fixture.produce(3).await?;
    group
        .until(
            fixture.deadline(),
            "the first member to read every record",
            |g| g.received() >= records.len(),
        )
        .await?;
    group
        .members
        .push(fixture.join("second member", &fixture.group).await?);
    let deadline = fixture.deadline();
    while !group.members.iter().all(|m| m.owned.len() == 4) {
        let (index, event) = group
            .step_before(deadline, "the two members to split the partitions")
            .await?;
        if let (0, ConsumerEvent::Revoked(list)) = (index, event) {
            let first = group.member_mut(0)?;
            for tp in &list {
                first.consumer.store_offset(tp, 3).map_err(|e| {
                    Failure(format!("storing an offset of {tp} after its revocation, before polling again, failed: {e}"))
                })?;
            }
            match first.consumer.commit().await {
                Ok(()) => {}
                Err(error) if error.is_retriable() => return Ok(Some(error)),
                Err(error) => return Err(broker_failure("committing during a revocation")(error)),
            }
        }
    }
    let records = fixture.produce(1).await?;
    group
        .until(fixture.deadline(), "every new record", |g| {
            records.iter().all(|r| {
                g.members
                    .iter()
                    .any(|m| m.has_offset(&r.topic_partition(), r.offset))
            })
        })
        .await?;
    let second = group.member(1)?;
    for tp in &second.owned {
        ensure_eq(
            &format!("the offsets of {tp} read by its new owner (3 committed on revocation)"),
            &[3].as_slice(),
            &second.offsets(tp),
        )?;
    }
    Ok(None)
}
