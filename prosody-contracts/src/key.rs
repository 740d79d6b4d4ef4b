//! The message key: the unit of ordering and exclusivity.

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A message key.
///
/// Invariant: immutable and cheap to clone (one reference count), so every
/// stage can hold it without copying the bytes. Records that arrive without a
/// key use the empty key, so they are still handled in offset order.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(Arc<str>);

impl Key {
    /// The key as a string slice.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for Key {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Key {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Key {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Key {
    fn from(value: &str) -> Self {
        Self(Arc::from(value))
    }
}

impl From<String> for Key {
    fn from(value: String) -> Self {
        Self(Arc::from(value))
    }
}

impl From<&String> for Key {
    fn from(value: &String) -> Self {
        Self(Arc::from(value.as_str()))
    }
}

impl From<Arc<str>> for Key {
    fn from(value: Arc<str>) -> Self {
        Self(value)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::Key;
    use std::collections::HashMap;

    #[test]
    fn clones_share_and_compare_by_value() {
        let a = Key::from("user-1");
        let b = a.clone();
        let c = Key::from(String::from("user-1"));
        assert_eq!(a, c);
        assert_eq!(b.as_str(), "user-1");
        let mut map = HashMap::new();
        map.insert(a, 1);
        assert_eq!(map.get("user-1"), Some(&1));
    }
}
