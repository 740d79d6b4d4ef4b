//! The memory broker runs the shared broker conformance suite, one test per
//! check, under a paused clock.

use prosody_conformance::broker::{self as conformance, Failure, Harness};
use prosody_contracts::broker::BrokerError;
use prosody_memory::MemoryBroker;
use std::future::Future;

/// A fresh memory broker per test.
#[derive(Default)]
struct Memory {
    broker: MemoryBroker,
}

impl Harness for Memory {
    type Broker = MemoryBroker;

    fn broker(&self) -> MemoryBroker {
        self.broker.clone()
    }

    fn create_topic(
        &self,
        name: &str,
        partitions: i32,
    ) -> impl Future<Output = Result<(), BrokerError>> + Send {
        std::future::ready(self.broker.create_topic(name, partitions))
    }
}

macro_rules! checks {
    ($($check:ident),* $(,)?) => {$(
        #[tokio::test(start_paused = true)]
        async fn $check() -> Result<(), Failure> {
            conformance::$check(&Memory::default()).await
        }
    )*};
}

checks!(
    round_trip,
    keys_choose_partitions,
    read_by_offset,
    partitions_report_counts,
    group_splits_partitions,
    close_moves_partitions,
    drop_moves_partitions,
    revocation_hands_over_committed_offsets,
    resume_from_committed,
    committed_reads_back,
    pause_and_resume,
    store_offset_requires_assignment,
);

#[tokio::test(start_paused = true)]
async fn run_all_on_one_shared_broker() -> Result<(), Failure> {
    conformance::run_all(&Memory::default()).await
}

/// The suite on real time and two worker threads, as a networked backend
/// runs it; the one quiet period of `pause_and_resume` takes real time here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_all_in_real_time_on_two_threads() -> Result<(), Failure> {
    conformance::run_all(&Memory::default()).await
}
