use super::*;
use bytes::Bytes;
use proptest::prelude::*;
use std::time::Duration;

const NAMES: [&str; 3] = ["billing", "inventory", "shipping"];

/// One answer arriving at the inbox: from which subsystem (an index into
/// `NAMES`, or 3 for one never asked), for the request or another id, for
/// this peer or another, and its value.
#[derive(Clone, Debug)]
struct Arrival {
    subsystem: usize,
    other_id: bool,
    other_peer: bool,
    value: u8,
}

fn arrival() -> impl Strategy<Value = Arrival> {
    (
        0usize..4,
        proptest::bool::weighted(0.15),
        proptest::bool::weighted(0.1),
        any::<u8>(),
    )
        .prop_map(|(subsystem, other_id, other_peer, value)| Arrival {
            subsystem,
            other_id,
            other_peer,
            value,
        })
}

proptest! {
    /// Invariant 9 at the inbox: whatever arrives (duplicates, answers of
    /// subsystems not asked, of other requests, for other peers), each
    /// asked subsystem gets exactly one outcome, its first answer, else a
    /// timeout; everything else is dropped and counted; and the request
    /// stops being waited on once collected.
    #[test]
    fn each_asked_subsystem_gets_its_first_answer(
        asked in proptest::sample::subsequence(NAMES.to_vec(), 1..=3),
        arrivals in proptest::collection::vec(arrival(), 0..12),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let inbox = Inbox::open(PeerId::from_bytes(rand_bytes(1)));
            let request = Asked::new(RequestId::from_bytes(rand_bytes(2)), inbox.peer(), &asked).unwrap();
            let waiter = inbox.wait(&request);
            let mut first: BTreeMap<String, u8> = BTreeMap::new();
            let mut dropped = 0;
            for arrival in &arrivals {
                let name = NAMES.get(arrival.subsystem).copied().unwrap_or("billing-2");
                let reply = Reply {
                    to: if arrival.other_peer { PeerId::from_bytes([9; 16]) } else { inbox.peer() },
                    id: if arrival.other_id { RequestId::from_bytes([8; 16]) } else { request.id() },
                    subsystem: name.to_owned(),
                    answer: Answer::Value(Bytes::from(arrival.value.to_string())),
                };
                let counts = !arrival.other_peer && !arrival.other_id && asked.contains(&name)
                    && !first.contains_key(name);
                if counts {
                    first.insert(name.to_owned(), arrival.value);
                    prop_assert_eq!(inbox.deliver(reply), Receipt::Delivered);
                } else {
                    dropped += 1;
                    prop_assert_eq!(inbox.deliver(reply), Receipt::Dropped);
                }
            }
            let outcomes = waiter
                .collect::<u8>(Instant::now() + Duration::from_secs(1))
                .await;
            prop_assert_eq!(outcomes.len(), asked.len());
            for name in &asked {
                let expected = first
                    .get(*name)
                    .map_or(Outcome::Failure(ResponseError::Timeout), |v| Outcome::Success(*v));
                prop_assert_eq!(&outcomes[*name], &expected);
            }
            prop_assert_eq!(inbox.dropped(), dropped);
            // Collected: a late answer finds nobody waiting.
            let late = Reply {
                to: inbox.peer(),
                id: request.id(),
                subsystem: asked[0].to_owned(),
                answer: Answer::Failed("late".into()),
            };
            prop_assert_eq!(inbox.deliver(late), Receipt::Dropped);
            Ok(())
        })?;
    }
}

/// Sixteen bytes unique to this test run's inbox: tests in one process
/// share the registry of local inboxes.
fn rand_bytes(tag: u8) -> [u8; 16] {
    let mut bytes = RequestId::random().unwrap().to_bytes();
    bytes[0] = tag;
    bytes
}

#[test]
fn an_inbox_is_local_while_it_lives() {
    let peer = PeerId::random().unwrap();
    let inbox = Inbox::open(peer);
    assert!(Inbox::local(peer).is_some());
    drop(inbox);
    assert!(Inbox::local(peer).is_none());
}
