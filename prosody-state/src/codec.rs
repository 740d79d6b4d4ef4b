//! Items as JSON: what a collection stores, and the refusal of `null`.

use bytes::Bytes;
use prosody_core::state::StateError;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// `value` as JSON.
///
/// # Errors
///
/// [`StateError::NullValue`] for a value that is JSON `null`, and
/// [`StateError::Codec`] for one serde cannot encode.
pub(crate) fn encode<T: Serialize>(
    collection: &'static str,
    value: &T,
) -> Result<Bytes, StateError> {
    let bytes =
        serde_json::to_vec(value).map_err(|source| StateError::Codec { collection, source })?;
    if bytes == b"null" {
        return Err(StateError::NullValue { collection });
    }
    Ok(Bytes::from(bytes))
}

/// A stored item.
pub(crate) fn decode<T: DeserializeOwned>(
    collection: &'static str,
    bytes: &[u8],
) -> Result<T, StateError> {
    serde_json::from_slice(bytes).map_err(|source| StateError::Codec { collection, source })
}
