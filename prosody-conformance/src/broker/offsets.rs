//! Checks of offsets: resuming from commits, reading commits back, pause
//! and resume, and storing only for owned partitions.

use super::driver::{Group, split_pair};
use super::fixture::{Fixture, broker_failure, ensure_eq, unique};
use super::{Checked, Failure, Harness};
use prosody_contracts::broker::{Consumer, TopicPartition};
use std::time::Duration;
use tokio::time::{Instant, timeout, timeout_at};

/// A member that committed offset n and left is followed by a member of the
/// same group that starts exactly at n: committed records are not replayed,
/// nothing is skipped.
pub async fn resume_from_committed(harness: &impl Harness) -> Checked {
    let mut fixture = Fixture::new(harness, "resume", 2).await?;
    let records = fixture.produce(10).await?;
    let mut group = Group::new(vec![fixture.join("first member", &fixture.group).await?]);
    group
        .until(fixture.deadline(), "every produced record", |g| {
            g.received() >= records.len()
        })
        .await?;
    let commits = [(fixture.tp(0), 4), (fixture.tp(1), 7)];
    let first = group.member_mut(0)?;
    for (tp, offset) in &commits {
        first
            .consumer
            .store_offset(tp, *offset)
            .map_err(broker_failure("storing an offset"))?;
    }
    first
        .consumer
        .commit()
        .await
        .map_err(broker_failure("committing"))?;
    let first = group.members.remove(0);
    timeout(fixture.deadline, first.consumer.close())
        .await
        .map_err(|_| Failure(format!("close did not finish in {:?}", fixture.deadline)))?;

    group
        .members
        .push(fixture.join("second member", &fixture.group).await?);
    group
        .until(
            fixture.deadline(),
            "the new member to read to the end",
            |g| {
                g.members
                    .first()
                    .is_some_and(|m| commits.iter().all(|(tp, _)| m.has_offset(tp, 9)))
            },
        )
        .await?;
    let second = group.member(0)?;
    for (tp, offset) in &commits {
        let want: Vec<i64> = (*offset..10).collect();
        ensure_eq(
            &format!("the offsets of {tp} read after committing {offset}"),
            &want.as_slice(),
            &second.offsets(tp),
        )?;
    }
    Ok(())
}

/// `committed` reads back what was committed, not what was only stored, and
/// the commit outlives the member.
pub async fn committed_reads_back(harness: &impl Harness) -> Checked {
    let fixture = Fixture::new(harness, "committed", 2).await?;
    let (p0, p1) = (fixture.tp(0), fixture.tp(1));
    let mut group = Group::new(vec![fixture.join("member", &fixture.group).await?]);
    let all = fixture.all_partitions();
    group
        .until(
            fixture.deadline(),
            "the member to own every partition",
            |g| g.members.first().is_some_and(|m| m.owned == all),
        )
        .await?;
    let consumer = &mut group.member_mut(0)?.consumer;
    ensure_eq(
        "the committed offset before any commit",
        &None,
        &committed(consumer, &p0).await?,
    )?;
    consumer
        .store_offset(&p0, 3)
        .map_err(broker_failure("storing an offset"))?;
    ensure_eq(
        "the committed offset after storing without commit",
        &None,
        &committed(consumer, &p0).await?,
    )?;
    consumer
        .commit()
        .await
        .map_err(broker_failure("committing"))?;
    ensure_eq(
        "the committed offset of a committed partition",
        &Some(3),
        &committed(consumer, &p0).await?,
    )?;
    ensure_eq(
        "the committed offset of a partition never stored",
        &None,
        &committed(consumer, &p1).await?,
    )?;
    consumer
        .store_offset(&p0, 5)
        .map_err(broker_failure("storing an offset"))?;
    consumer
        .store_offset(&p1, 2)
        .map_err(broker_failure("storing an offset"))?;
    consumer
        .commit()
        .await
        .map_err(broker_failure("committing"))?;
    ensure_eq(
        "the committed offset after a second commit",
        &Some(5),
        &committed(consumer, &p0).await?,
    )?;
    ensure_eq(
        "the committed offset of the other partition",
        &Some(2),
        &committed(consumer, &p1).await?,
    )?;
    read_at_once(
        consumer,
        [(&p1, Some(2)), (&fixture.tp(99), None), (&p0, Some(5))],
    )
    .await?;
    let member = group.members.remove(0);
    timeout(fixture.deadline, member.consumer.close())
        .await
        .map_err(|_| Failure(format!("close did not finish in {:?}", fixture.deadline)))?;

    let mut later = fixture.join("later member", &fixture.group).await?;
    ensure_eq(
        "the committed offset seen by a later member",
        &Some(5),
        &committed(&mut later.consumer, &p0).await?,
    )?;
    ensure_eq(
        "the committed offset seen by a later member",
        &Some(2),
        &committed(&mut later.consumer, &p1).await?,
    )?;
    let mut stranger = fixture
        .join("member of another group", &unique("committed-other"))
        .await?;
    ensure_eq(
        "the committed offset seen by another group",
        &None,
        &committed(&mut stranger.consumer, &p0).await?,
    )?;
    ensure_eq(
        "the committed offsets another group reads at once",
        &vec![None, None],
        &committed_at_once(&mut stranger.consumer, &[p0, p1]).await?,
    )
}

/// `committed_offsets` reads each partition's committed offset, in the
/// order asked (`None` for one that does not exist), and none of none.
async fn read_at_once<C: Consumer>(
    consumer: &mut C,
    expected: [(&TopicPartition, Option<i64>); 3],
) -> Checked {
    let partitions: Vec<TopicPartition> = expected.iter().map(|(tp, _)| (*tp).clone()).collect();
    let offsets: Vec<Option<i64>> = expected.iter().map(|(_, offset)| *offset).collect();
    ensure_eq(
        "the committed offsets read at once",
        &offsets,
        &committed_at_once(consumer, &partitions).await?,
    )?;
    ensure_eq(
        "the committed offsets of no partition",
        &Vec::new(),
        &committed_at_once(consumer, &[]).await?,
    )
}

/// How long the conformance suite lets one read of committed offsets take.
const COMMITTED_WAIT: Duration = Duration::from_secs(10);

async fn committed_at_once<C: Consumer>(
    consumer: &mut C,
    partitions: &[TopicPartition],
) -> Checked<Vec<Option<i64>>> {
    consumer
        .committed_offsets(partitions, COMMITTED_WAIT)
        .await
        .map_err(broker_failure("reading committed offsets at once"))
}

async fn committed<C: Consumer>(
    consumer: &mut C,
    partition: &TopicPartition,
) -> Checked<Option<i64>> {
    consumer
        .committed(partition)
        .await
        .map_err(broker_failure("reading a committed offset"))
}

/// A paused partition delivers nothing while the others flow; resumed, it
/// continues where it stopped, losing and repeating nothing.
pub async fn pause_and_resume(harness: &impl Harness) -> Checked {
    let mut fixture = Fixture::new(harness, "pause", 2).await?;
    let (paused, flowing) = (fixture.tp(0), fixture.tp(1));
    let records = fixture.produce(3).await?;
    let mut group = Group::new(vec![fixture.join("member", &fixture.group).await?]);
    group
        .until(fixture.deadline(), "every produced record", |g| {
            g.received() >= records.len()
        })
        .await?;
    group
        .member_mut(0)?
        .consumer
        .pause(&paused)
        .map_err(broker_failure("pausing"))?;
    fixture.produce(4).await?;

    let silent = |group: &Group<_>| -> Checked {
        let member = group.member(0)?;
        match member.offsets(&paused).iter().find(|offset| **offset >= 3) {
            Some(offset) => Err(Failure(format!(
                "paused partition {paused} delivered offset {offset}"
            ))),
            None => Ok(()),
        }
    };
    let deadline = fixture.deadline();
    while !group.member(0)?.has_offset(&flowing, 6) {
        group
            .step_before(deadline, "the unpaused partition's records")
            .await?;
        silent(&group)?;
    }
    let quiet_end = Instant::now() + harness.quiet_period();
    while let Ok(step) = timeout_at(quiet_end, group.step()).await {
        step?;
        silent(&group)?;
    }

    group
        .member_mut(0)?
        .consumer
        .resume(&paused)
        .map_err(broker_failure("resuming"))?;
    group
        .until(fixture.deadline(), "the resumed partition's records", |g| {
            g.members.first().is_some_and(|m| m.has_offset(&paused, 6))
        })
        .await?;
    let want: Vec<i64> = (0..7).collect();
    ensure_eq(
        &format!("the offsets of {paused} read before pausing and after resuming"),
        &want.as_slice(),
        &group.member(0)?.offsets(&paused),
    )
}

/// Storing an offset fails for a partition the member does not own: another
/// member's, another topic's, or one that does not exist.
pub async fn store_offset_requires_assignment(harness: &impl Harness) -> Checked {
    let fixture = Fixture::new(harness, "store", 4).await?;
    let other_topic = unique("store-other");
    harness
        .create_topic(&other_topic, 1)
        .await
        .map_err(broker_failure("creating a topic"))?;
    let mut group = split_pair(&fixture).await?;
    let others: Vec<TopicPartition> = group.member(1)?.owned.iter().cloned().collect();
    let first = group.member_mut(0)?;
    let own: Vec<TopicPartition> = first.owned.iter().cloned().collect();
    for tp in &own {
        first.consumer.store_offset(tp, 0).map_err(|e| {
            Failure(format!(
                "storing an offset of owned partition {tp} failed: {e}"
            ))
        })?;
    }
    let strangers = others
        .into_iter()
        .chain([TopicPartition::new(other_topic, 0), fixture.tp(99)]);
    for tp in strangers {
        if first.consumer.store_offset(&tp, 0).is_ok() {
            return Err(Failure(format!(
                "storing an offset of {tp}, not assigned to {}: expected an error, got Ok",
                first.label
            )));
        }
    }
    Ok(())
}
