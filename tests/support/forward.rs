//! Store wrappers of the tests forward what they do not change to their
//! `inner` stores: one macro per store trait, so a wrapper writes only the
//! calls it alters.
//!
//! `forward_state!([S: Stores] Landing<S>)` implements `StateStore` for
//! `Landing<S>` by calling `self.inner`; the brackets hold the impl's
//! generics (empty for none).

/// `StateStore`, forwarded to `self.inner`.
#[macro_export]
macro_rules! forward_state {
    ([$($generics:tt)*] $ty:ty) => {
        impl<$($generics)*> ::prosody::store::StateStore for $ty {
            async fn identify(
                &self,
                name: &str,
                identity: &str,
            ) -> Result<String, ::prosody::store::StoreError> {
                self.inner.identify(name, identity).await
            }

            async fn cell(
                &self,
                partition: &::prosody::broker::TopicPartition,
                collection: &str,
                key: &::prosody::Key,
                item: &[u8],
            ) -> Result<Option<::bytes::Bytes>, ::prosody::store::StoreError> {
                self.inner.cell(partition, collection, key, item).await
            }

            async fn cells(
                &self,
                partition: &::prosody::broker::TopicPartition,
                collection: &str,
                key: &::prosody::Key,
                range: &::prosody::store::ItemRange,
                direction: ::prosody::store::Direction,
                limit: usize,
            ) -> Result<Vec<(::bytes::Bytes, ::bytes::Bytes)>, ::prosody::store::StoreError> {
                self.inner
                    .cells(partition, collection, key, range, direction, limit)
                    .await
            }

            async fn write(
                &self,
                partition: &::prosody::broker::TopicPartition,
                write: ::prosody::store::StateWrite,
            ) -> Result<(), ::prosody::store::StoreError> {
                self.inner.write(partition, write).await
            }
        }
    };
}

/// `DedupStore`, forwarded to `self.inner`.
#[macro_export]
macro_rules! forward_dedup {
    ([$($generics:tt)*] $ty:ty) => {
        impl<$($generics)*> ::prosody::store::DedupStore for $ty {
            async fn contains(
                &self,
                key: ::prosody::store::DedupKey,
            ) -> Result<bool, ::prosody::store::StoreError> {
                self.inner.contains(key).await
            }

            async fn insert(
                &self,
                key: ::prosody::store::DedupKey,
                ttl: ::std::time::Duration,
            ) -> Result<(), ::prosody::store::StoreError> {
                self.inner.insert(key, ttl).await
            }
        }
    };
}

/// `TimerStore`, forwarded to `self.inner`.
#[macro_export]
macro_rules! forward_timer {
    ([$($generics:tt)*] $ty:ty) => {
        impl<$($generics)*> ::prosody::store::TimerStore for $ty {
            async fn schedule(
                &self,
                partition: &::prosody::broker::TopicPartition,
                entry: ::prosody::store::TimerEntry,
            ) -> Result<(), ::prosody::store::StoreError> {
                self.inner.schedule(partition, entry).await
            }

            async fn unschedule(
                &self,
                partition: &::prosody::broker::TopicPartition,
                key: &::prosody::Key,
                kind: ::prosody::store::TimerKind,
                time: ::prosody::Timestamp,
            ) -> Result<(), ::prosody::store::StoreError> {
                self.inner.unschedule(partition, key, kind, time).await
            }

            async fn clear(
                &self,
                partition: &::prosody::broker::TopicPartition,
                key: &::prosody::Key,
                kind: ::prosody::store::TimerKind,
            ) -> Result<(), ::prosody::store::StoreError> {
                self.inner.clear(partition, key, kind).await
            }

            async fn scheduled(
                &self,
                partition: &::prosody::broker::TopicPartition,
                key: &::prosody::Key,
                kind: ::prosody::store::TimerKind,
            ) -> Result<Vec<::prosody::Timestamp>, ::prosody::store::StoreError> {
                self.inner.scheduled(partition, key, kind).await
            }

            async fn load(
                &self,
                partition: &::prosody::broker::TopicPartition,
                from: ::prosody::Timestamp,
                until: ::prosody::Timestamp,
            ) -> Result<Vec<::prosody::store::TimerEntry>, ::prosody::store::StoreError> {
                self.inner.load(partition, from, until).await
            }
        }
    };
}

/// `DeferStore`, forwarded to `self.inner` (`peek` included).
#[macro_export]
macro_rules! forward_defer {
    ([$($generics:tt)*] $ty:ty) => {
        impl<$($generics)*> ::prosody::store::DeferStore for $ty {
            fn peek(
                &self,
                partition: &::prosody::broker::TopicPartition,
                key: &::prosody::Key,
            ) -> Option<bool> {
                self.inner.peek(partition, key)
            }

            async fn defer(
                &self,
                partition: &::prosody::broker::TopicPartition,
                key: &::prosody::Key,
                offset: i64,
                deferral: ::prosody::store::Deferral,
            ) -> Result<(), ::prosody::store::StoreError> {
                self.inner.defer(partition, key, offset, deferral).await
            }

            async fn deferred(
                &self,
                partition: &::prosody::broker::TopicPartition,
                key: &::prosody::Key,
            ) -> Result<Option<::prosody::store::Deferred>, ::prosody::store::StoreError> {
                self.inner.deferred(partition, key).await
            }

            async fn complete(
                &self,
                partition: &::prosody::broker::TopicPartition,
                key: &::prosody::Key,
                offset: i64,
            ) -> Result<Option<i64>, ::prosody::store::StoreError> {
                self.inner.complete(partition, key, offset).await
            }

            async fn failed(
                &self,
                partition: &::prosody::broker::TopicPartition,
                key: &::prosody::Key,
            ) -> Result<u32, ::prosody::store::StoreError> {
                self.inner.failed(partition, key).await
            }

            async fn keys(
                &self,
                partition: &::prosody::broker::TopicPartition,
            ) -> Result<Vec<::prosody::Key>, ::prosody::store::StoreError> {
                self.inner.keys(partition).await
            }
        }
    };
}
