//! How the poll loop lets its partitions go, and leaves its group.

use crate::broker::Consumer;
use std::time::Duration;
use tokio::time::Instant;
use tracing::warn;

/// Why partitions are let go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Leave {
    /// The group moved them to another member: cancel at once.
    Revoked,
    /// The consumer stops: finish what is held, until the deadline.
    Shutdown(Instant),
}

/// The least time a consumer gets to leave its group, however much of
/// `shutdown_timeout` the drain and the final commit used: enough for the
/// request that leaves the group.
const LEAVE_FLOOR: Duration = Duration::from_secs(2);

/// Closes `consumer`, waiting until `deadline`, or [`LEAVE_FLOOR`] from now
/// if that is later. Past it the close goes on in the background (dropping
/// a consumer's close must not stop it), and the member is not known to
/// have left its group. `committed`: whether the final commit succeeded,
/// for the warning.
pub(super) async fn leave<C: Consumer>(consumer: C, deadline: Instant, committed: bool) {
    let until = deadline.max(Instant::now() + LEAVE_FLOOR);
    if tokio::time::timeout_at(until, consumer.close())
        .await
        .is_err()
    {
        let offsets = if committed {
            "the offsets were committed before"
        } else {
            "the final commit failed, so the next owners replay from the last commit"
        };
        warn!(
            "the consumer did not leave its group by shutdown_timeout (at least {LEAVE_FLOOR:?} \
             after the final commit); no longer waiting: the member is not known to have left, \
             so its partitions stay unowned until its session times out (session.timeout.ms, \
             or the broker's group.consumer.session.timeout.ms with the consumer protocol) and \
             the group moves them; {offsets}"
        );
    }
}
