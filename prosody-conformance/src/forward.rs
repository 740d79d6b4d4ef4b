//! Store wrappers forward what they do not change to their `inner`
//! stores: one macro per read trait, so a wrapper (a test double that
//! injects faults, an owner that opens partitions first) writes only the
//! calls it alters.
//!
//! `forward_state!([S: Stores] Landing<S>)` implements `StateStore` for
//! `Landing<S>` by calling `self.inner`; the brackets hold the impl's
//! generics (empty for none).

/// `StateStore`, forwarded to `self.inner`.
#[macro_export]
macro_rules! forward_state {
    ([$($generics:tt)*] $ty:ty) => {
        impl<$($generics)*> $crate::contracts::store::StateStore for $ty {
            async fn identify(
                &self,
                name: &str,
                identity: &str,
            ) -> Result<String, $crate::contracts::store::StoreError> {
                $crate::contracts::store::StateStore::identify(&self.inner, name, identity).await
            }

            async fn cell(
                &self,
                partition: &$crate::contracts::broker::TopicPartition,
                collection: &str,
                key: &$crate::contracts::Key,
                item: &[u8],
            ) -> Result<Option<$crate::bytes::Bytes>, $crate::contracts::store::StoreError> {
                $crate::contracts::store::StateStore::cell(&self.inner, partition, collection, key, item).await
            }

            async fn cells(
                &self,
                partition: &$crate::contracts::broker::TopicPartition,
                collection: &str,
                key: &$crate::contracts::Key,
                range: &$crate::contracts::store::ItemRange,
                direction: $crate::contracts::store::Direction,
                limit: usize,
            ) -> Result<Vec<($crate::bytes::Bytes, $crate::bytes::Bytes)>, $crate::contracts::store::StoreError> {
                $crate::contracts::store::StateStore::cells(
                    &self.inner, partition, collection, key, range, direction, limit,
                )
                    .await
            }
        }
    };
}

/// `DedupStore`, forwarded to `self.inner`.
#[macro_export]
macro_rules! forward_dedup {
    ([$($generics:tt)*] $ty:ty) => {
        impl<$($generics)*> $crate::contracts::store::DedupStore for $ty {
            async fn contains(
                &self,
                key: $crate::contracts::store::DedupKey,
            ) -> Result<bool, $crate::contracts::store::StoreError> {
                $crate::contracts::store::DedupStore::contains(&self.inner, key).await
            }
        }
    };
}

/// `TimerStore`, forwarded to `self.inner`.
#[macro_export]
macro_rules! forward_timer {
    ([$($generics:tt)*] $ty:ty) => {
        impl<$($generics)*> $crate::contracts::store::TimerStore for $ty {
            async fn scheduled(
                &self,
                partition: &$crate::contracts::broker::TopicPartition,
                key: &$crate::contracts::Key,
                kind: $crate::contracts::store::TimerKind,
            ) -> Result<Vec<$crate::contracts::Timestamp>, $crate::contracts::store::StoreError> {
                $crate::contracts::store::TimerStore::scheduled(&self.inner, partition, key, kind).await
            }

            async fn load(
                &self,
                partition: &$crate::contracts::broker::TopicPartition,
                from: $crate::contracts::Timestamp,
                until: $crate::contracts::Timestamp,
            ) -> Result<Vec<$crate::contracts::store::TimerEntry>, $crate::contracts::store::StoreError> {
                $crate::contracts::store::TimerStore::load(&self.inner, partition, from, until).await
            }
        }
    };
}

/// `DeferStore`, forwarded to `self.inner` (`peek` and `counts_now` included).
#[macro_export]
macro_rules! forward_defer {
    ([$($generics:tt)*] $ty:ty) => {
        impl<$($generics)*> $crate::contracts::store::DeferStore for $ty {
            fn peek(
                &self,
                partition: &$crate::contracts::broker::TopicPartition,
                key: &$crate::contracts::Key,
            ) -> Option<bool> {
                $crate::contracts::store::DeferStore::peek(&self.inner, partition, key)
            }

            async fn counts(
                &self,
                partition: &$crate::contracts::broker::TopicPartition,
            ) -> Result<$crate::contracts::store::DeferCounts, $crate::contracts::store::StoreError> {
                $crate::contracts::store::DeferStore::counts(&self.inner, partition).await
            }

            fn counts_now(
                &self,
                partition: &$crate::contracts::broker::TopicPartition,
            ) -> Option<$crate::contracts::store::DeferCounts> {
                $crate::contracts::store::DeferStore::counts_now(&self.inner, partition)
            }

            async fn deferred(
                &self,
                partition: &$crate::contracts::broker::TopicPartition,
                key: &$crate::contracts::Key,
            ) -> Result<Option<$crate::contracts::store::Deferred>, $crate::contracts::store::StoreError> {
                $crate::contracts::store::DeferStore::deferred(&self.inner, partition, key).await
            }
        }
    };
}
