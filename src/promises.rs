//! Doc tests that pin the library's `#[non_exhaustive]` enums: each
//! matches every variant of one enum without a `_` arm, which another
//! crate may not do (error E0004), so a user's match keeps compiling when a
//! variant is added. Regenerate the variant lists when an enum grows.

/// `prosody::otel::OtelError` is `#[non_exhaustive]`.
///
/// ```compile_fail,E0004
/// use prosody::otel::OtelError;
/// fn every(value: OtelError) {
///     match value {
///         OtelError::Protocol { .. } | OtelError::Tls { .. } | OtelError::Exporter { .. } | OtelError::Export { .. } => {}
///     }
/// }
/// ```
pub struct OtelErrorIsOpen;

/// `prosody::ConfigError` is `#[non_exhaustive]`.
///
/// ```compile_fail,E0004
/// use prosody::ConfigError;
/// fn every(value: ConfigError) {
///     match value {
///         ConfigError::Missing { .. } | ConfigError::Invalid { .. } | ConfigError::Environment { .. } | ConfigError::NoDurableStore { .. } | ConfigError::Cassandra { .. } | ConfigError::Unreachable { .. } | ConfigError::StateStore { .. } => {}
///     }
/// }
/// ```
pub struct ConfigErrorIsOpen;

/// `prosody::ClientError` is `#[non_exhaustive]`.
///
/// ```compile_fail,E0004
/// use prosody::ClientError;
/// fn every(value: ClientError) {
///     match value {
///         ClientError::ShutDown { .. } | ClientError::AlreadySubscribed { .. } | ClientError::NotConfigured { .. } | ClientError::Encode { .. } | ClientError::Broker { .. } => {}
///     }
/// }
/// ```
pub struct ClientErrorIsOpen;

/// `prosody::ConsumerState` is `#[non_exhaustive]`.
///
/// ```compile_fail,E0004
/// use prosody::ConsumerState;
/// fn every(value: ConsumerState) {
///     match value {
///         ConsumerState::Unconfigured { .. } | ConsumerState::Configured { .. } | ConsumerState::Running { .. } => {}
///     }
/// }
/// ```
pub struct ConsumerStateIsOpen;

/// `prosody_core::loader::LoadError` is `#[non_exhaustive]`.
///
/// ```compile_fail,E0004
/// use prosody_core::loader::LoadError;
/// fn every(value: LoadError) {
///     match value {
///         LoadError::Timeout { .. } | LoadError::Broker { .. } => {}
///     }
/// }
/// ```
pub struct LoadErrorIsOpen;

/// `prosody_core::timers::TimerError` is `#[non_exhaustive]`.
///
/// ```compile_fail,E0004
/// use prosody_core::timers::TimerError;
/// fn every(value: TimerError) {
///     match value {
///         TimerError::Unavailable { .. } | TimerError::Store { .. } => {}
///     }
/// }
/// ```
pub struct TimerErrorIsOpen;

/// `prosody_core::broker::BrokerError` is `#[non_exhaustive]`.
///
/// ```compile_fail,E0004
/// use prosody_core::broker::BrokerError;
/// fn every(value: BrokerError) {
///     match value {
///         BrokerError::SendTimeout { .. } | BrokerError::UnknownTopic { .. } | BrokerError::UnknownPartition { .. } | BrokerError::NotAssigned { .. } | BrokerError::Invalid { .. } | BrokerError::Closed { .. } | BrokerError::Backend { .. } => {}
///     }
/// }
/// ```
pub struct BrokerErrorIsOpen;

/// `prosody_core::codec::DecodeError` is `#[non_exhaustive]`.
///
/// ```compile_fail,E0004
/// use prosody_core::codec::DecodeError;
/// fn every(value: DecodeError) {
///     match value {
///         DecodeError::Key { .. } | DecodeError::Payload { .. } | DecodeError::Panicked { .. } => {}
///     }
/// }
/// ```
pub struct DecodeErrorIsOpen;

/// `prosody_core::store::StoreError` is `#[non_exhaustive]`.
///
/// ```compile_fail,E0004
/// use prosody_core::store::StoreError;
/// fn every(value: StoreError) {
///     match value {
///         StoreError::Unavailable { .. } | StoreError::Rejected { .. } => {}
///     }
/// }
/// ```
pub struct StoreErrorIsOpen;

/// `prosody_core::state::CacheError` is `#[non_exhaustive]`.
///
/// ```compile_fail,E0004
/// use prosody_core::state::CacheError;
/// fn every(value: CacheError) {
///     match value {
///         CacheError::InUse { .. } | CacheError::Io { .. } => {}
///     }
/// }
/// ```
pub struct CacheErrorIsOpen;

/// `prosody_core::telemetry::Lifecycle` is `#[non_exhaustive]`.
///
/// ```compile_fail,E0004
/// use prosody_core::telemetry::Lifecycle;
/// fn every(value: Lifecycle) {
///     match value {
///         Lifecycle::Dispatched { .. } | Lifecycle::Succeeded { .. } | Lifecycle::Abandoned { .. } | Lifecycle::Failed { .. } => {}
///     }
/// }
/// ```
pub struct LifecycleIsOpen;

/// `prosody_kafka::AdminError` is `#[non_exhaustive]`.
///
/// ```compile_fail,E0004
/// use prosody_kafka::AdminError;
/// fn every(value: AdminError) {
///     match value {
///         AdminError::MissingServers { .. } | AdminError::Environment { .. } | AdminError::Invalid { .. } | AdminError::TopicExists { .. } | AdminError::UnknownTopic { .. } | AdminError::Broker { .. } => {}
///     }
/// }
/// ```
pub struct AdminErrorIsOpen;

/// `prosody_core::state::StateError` is `#[non_exhaustive]`.
///
/// ```compile_fail,E0004
/// use prosody_core::state::StateError;
/// fn every(value: StateError) {
///     match value {
///         StateError::NullValue { .. } | StateError::Codec { .. } | StateError::Malformed { .. } | StateError::Store { .. } | StateError::Unregistered { .. } | StateError::Mismatch { .. } | StateError::AttemptEnded { .. } | StateError::MessageGone { .. } | StateError::MessageRead { .. } | StateError::Unreadable { .. } | StateError::Unavailable { .. } => {}
///     }
/// }
/// ```
pub struct StateErrorIsOpen;

/// `prosody_cassandra::ConnectError` is `#[non_exhaustive]`.
///
/// ```compile_fail,E0004
/// use prosody_cassandra::ConnectError;
/// fn every(value: ConnectError) {
///     match value {
///         ConnectError::Invalid { .. } | ConnectError::Authentication { .. } | ConnectError::Unreachable { .. } | ConnectError::NewerSchema { .. } | ConnectError::Migration { .. } => {}
///     }
/// }
/// ```
pub struct ConnectErrorIsOpen;
