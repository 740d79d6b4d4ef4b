//! Checks of what a broker says about topics.

use super::fixture::{Fixture, broker_failure, ensure_eq, outgoing, unique};
use super::{Checked, Harness};
use prosody_contracts::broker::{Broker, partition_for_key};

/// `partitions` reports a created topic's partition count, with which
/// [`partition_for_key`] names the partition a keyed record lands on; a
/// topic never created is `None`, and asking does not create it.
pub async fn partitions_report_counts(harness: &impl Harness) -> Checked {
    let fixture = Fixture::new(harness, "partitions", 3).await?;
    let count = fixture
        .broker
        .partitions(&fixture.topic)
        .await
        .map_err(broker_failure("asking a created topic's partition count"))?;
    ensure_eq(
        &format!("the partition count of topic {}", fixture.topic),
        &Some(fixture.partitions),
        &count,
    )?;
    let reported = count.unwrap_or(0);
    for key in ["customer-1", "customer-2", "customer-3"] {
        let delivery = fixture
            .send(outgoing(&fixture.topic, None, key, 0, fixture.base))
            .await?;
        ensure_eq(
            &format!("the partition of key {key:?} computed from the reported count"),
            &partition_for_key(key.as_bytes(), reported),
            &delivery.partition,
        )?;
    }
    let missing = unique("partitions-never-created");
    for ask in ["first", "second"] {
        let count = fixture
            .broker
            .partitions(&missing)
            .await
            .map_err(broker_failure("asking an unknown topic's partition count"))?;
        ensure_eq(
            &format!("the partition count of topic {missing}, never created ({ask} ask)"),
            &None,
            &count,
        )?;
    }
    Ok(())
}
