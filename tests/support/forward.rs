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

        }
    };
}

/// `TimerStore`, forwarded to `self.inner`.
#[macro_export]
macro_rules! forward_timer {
    ([$($generics:tt)*] $ty:ty) => {
        impl<$($generics)*> ::prosody::store::TimerStore for $ty {
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

            async fn deferred(
                &self,
                partition: &::prosody::broker::TopicPartition,
                key: &::prosody::Key,
            ) -> Result<Option<::prosody::store::Deferred>, ::prosody::store::StoreError> {
                self.inner.deferred(partition, key).await
            }

        }
    };
}
