//! The target assignment of a consumer group.

use crate::log::Logs;
use prosody_contracts::broker::TopicPartition;
use prosody_contracts::event::Topic;
use std::collections::{BTreeMap, BTreeSet};

/// Identifies one member of one group; never reused within a broker.
pub type MemberId = u64;

/// The owner every partition should have, computed like Kafka's range
/// assignor: for each topic, its partitions are split into contiguous ranges
/// over the members subscribed to it, in join order, and the first
/// `partitions % members` members take one extra partition.
///
/// Invariant of the result: every partition of every existing topic that at
/// least one member subscribes to maps to exactly one subscribed member, and
/// the result depends only on the members' order and subscriptions and the
/// partition counts.
pub fn range(members: &[(MemberId, &[Topic])], logs: &Logs) -> BTreeMap<TopicPartition, MemberId> {
    let topics: BTreeSet<&Topic> = members
        .iter()
        .flat_map(|(_, topics)| topics.iter())
        .collect();
    let mut target = BTreeMap::new();
    for topic in topics {
        let Some(count) = logs.partition_count(topic) else {
            continue;
        };
        let subscribers: Vec<MemberId> = members
            .iter()
            .filter(|(_, topics)| topics.contains(topic))
            .map(|(id, _)| *id)
            .collect();
        let Ok(member_count) = i32::try_from(subscribers.len()) else {
            continue;
        };
        if member_count == 0 {
            continue;
        }
        let base = count / member_count;
        let extra = count % member_count;
        let mut partition = 0;
        for (index, id) in (0..).zip(&subscribers) {
            let share = base + i32::from(index < extra);
            for _ in 0..share {
                target.insert(TopicPartition::new(topic.clone(), partition), *id);
                partition += 1;
            }
        }
    }
    target
}

#[cfg(test)]
mod tests {
    use super::range;
    use crate::log::Logs;
    use prosody_contracts::broker::{BrokerError, TopicPartition};
    use prosody_contracts::event::Topic;

    #[test]
    fn splits_each_topic_in_ranges_over_its_subscribers() -> Result<(), BrokerError> {
        let mut logs = Logs::default();
        logs.create("a", 5)?;
        logs.create("b", 2)?;
        let both: Vec<Topic> = vec!["a".into(), "b".into(), "missing".into()];
        let only_a: Vec<Topic> = vec!["a".into()];
        let target = range(&[(7, &both), (3, &only_a)], &logs);
        let owners: Vec<(String, u64)> = target
            .iter()
            .map(|(tp, id)| (tp.to_string(), *id))
            .collect();
        let expected = [
            ("a/0", 7),
            ("a/1", 7),
            ("a/2", 7),
            ("a/3", 3),
            ("a/4", 3),
            ("b/0", 7),
            ("b/1", 7),
        ];
        let expected: Vec<(String, u64)> = expected
            .iter()
            .map(|(tp, id)| ((*tp).to_owned(), *id))
            .collect();
        assert_eq!(owners, expected);
        assert!(!target.contains_key(&TopicPartition::new("missing", 0)));
        Ok(())
    }
}
