//! Subscriber secrets at rest (SPEC §14): sealed with XChaCha20-Poly1305 under
//! `ENCRYPTION_KEY`, the key's id stored beside each value, opened with that key or
//! one of `ENCRYPTION_KEYS_OLD`.
//!
//! A sealed secret is stored as base64 of a fresh 24-byte nonce followed by the
//! ciphertext and its tag; the subscriber's name is the associated data, so a
//! sealed value copied onto another subscriber's row does not open. The key id is
//! the first 8 bytes of the key's SHA-256, in hex: it says which key sealed a value
//! without revealing anything about the key. Without a key, secrets are kept as
//! they are (key id `None`), as before this module.
//!
//! ```
//! use hookbox::sealing::Keyring;
//!
//! let key = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="; // base64 of 32 bytes
//! let keys = Keyring::new(Some(key), &[]).expect("a valid key");
//! let sealed = keys.seal("billing", "whsec_abc");
//! assert_ne!(sealed.text, "whsec_abc");
//! assert_eq!(sealed.key_id.as_deref(), keys.current_id());
//! let opened = keys.open("billing", &sealed.text, sealed.key_id.as_deref());
//! assert_eq!(opened.expect("opens"), "whsec_abc");
//! // Bound to the subscriber's name:
//! assert!(keys.open("other", &sealed.text, sealed.key_id.as_deref()).is_err());
//! // A malformed key is refused:
//! assert!(Keyring::new(Some("too-short"), &[]).is_err());
//! ```

use std::fmt;
use std::sync::Arc;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, Generate, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use sha2::{Digest, Sha256};

/// The length of a key, in bytes.
pub const KEY_BYTES: usize = 32;
/// The length of a nonce, in bytes.
const NONCE_BYTES: usize = 24;

/// Why a key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "expected base64 of exactly {KEY_BYTES} bytes (`hookbox secret` style: `openssl rand -base64 32`)"
)]
pub struct KeyError;

/// Why a stored secret did not open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// It was sealed with a key that is not configured.
    #[error(
        "it was sealed with key {0}, which is neither ENCRYPTION_KEY nor one of ENCRYPTION_KEYS_OLD"
    )]
    UnknownKey(String),
    /// The key is configured but the value does not open with it (altered, or
    /// moved from another subscriber).
    #[error("it does not open with key {0} (altered or copied from another row)")]
    Damaged(String),
}

/// A sealed (or, without a key, kept) secret: what is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The stored text: base64 of nonce and ciphertext, or the secret itself.
    pub text: String,
    /// The sealing key's id; `None`: stored in the clear.
    pub key_id: Option<String>,
}

/// One key and its id.
#[derive(Clone)]
struct Key {
    id: String,
    cipher: XChaCha20Poly1305,
}

impl Key {
    fn parse(text: &str) -> Result<Self, KeyError> {
        let bytes = STANDARD.decode(text.trim()).map_err(|_| KeyError)?;
        if bytes.len() != KEY_BYTES {
            return Err(KeyError);
        }
        let id = crate::model::hex(&Sha256::digest(&bytes)[..8]);
        let cipher = XChaCha20Poly1305::new_from_slice(&bytes).map_err(|_| KeyError)?;
        Ok(Self { id, cipher })
    }
}

/// The keys secrets are sealed and opened with. `Debug` shows the ids only.
#[derive(Clone, Default)]
pub struct Keyring(Option<Arc<Keys>>);

struct Keys {
    current: Option<Key>,
    old: Vec<Key>,
}

impl Keyring {
    /// The keys from their base64 texts: `current` seals (and opens), `old` only
    /// open. No keys at all is [`Keyring::default`]: secrets kept in the clear.
    pub fn new(current: Option<&str>, old: &[&str]) -> Result<Self, KeyError> {
        let current = current.map(Key::parse).transpose()?;
        let old = old
            .iter()
            .map(|t| Key::parse(t))
            .collect::<Result<Vec<_>, _>>()?;
        if current.is_none() && old.is_empty() {
            return Ok(Self::default());
        }
        Ok(Self(Some(Arc::new(Keys { current, old }))))
    }

    /// The id of the key that seals, if there is one.
    pub fn current_id(&self) -> Option<&str> {
        Some(self.0.as_ref()?.current.as_ref()?.id.as_str())
    }

    /// Seals `secret` for the subscriber `name` under the current key; without
    /// one, keeps it as it is.
    pub fn seal(&self, name: &str, secret: &str) -> Sealed {
        let Some(key) = self.0.as_ref().and_then(|k| k.current.as_ref()) else {
            return Sealed {
                text: secret.to_owned(),
                key_id: None,
            };
        };
        let nonce = XNonce::generate();
        let payload = Payload {
            msg: secret.as_bytes(),
            aad: name.as_bytes(),
        };
        // Encryption into a Vec fails only past the cipher's length limit
        // (256 GiB), which no secret reaches.
        let sealed = key.cipher.encrypt(&nonce, payload).unwrap_or_default();
        let mut bytes = nonce.to_vec();
        bytes.extend_from_slice(&sealed);
        Sealed {
            text: STANDARD.encode(bytes),
            key_id: Some(key.id.clone()),
        }
    }

    /// Opens what [`Keyring::seal`] stored for the subscriber `name`; a value
    /// without a key id is returned as it is (stored in the clear).
    pub fn open(&self, name: &str, text: &str, key_id: Option<&str>) -> Result<String, OpenError> {
        let Some(id) = key_id else {
            return Ok(text.to_owned());
        };
        let key = self
            .0
            .as_ref()
            .and_then(|k| k.current.iter().chain(&k.old).find(|key| key.id == id))
            .ok_or_else(|| OpenError::UnknownKey(id.to_owned()))?;
        let damaged = || OpenError::Damaged(id.to_owned());
        let bytes = STANDARD.decode(text).map_err(|_| damaged())?;
        if bytes.len() < NONCE_BYTES {
            return Err(damaged());
        }
        let (nonce, sealed) = bytes.split_at(NONCE_BYTES);
        let nonce = XNonce::try_from(nonce).map_err(|_| damaged())?;
        let payload = Payload {
            msg: sealed,
            aad: name.as_bytes(),
        };
        let plain = key.cipher.decrypt(&nonce, payload).map_err(|_| damaged())?;
        String::from_utf8(plain).map_err(|_| damaged())
    }
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            None => f.write_str("Keyring(none)"),
            Some(k) => f
                .debug_struct("Keyring")
                .field("current", &k.current.as_ref().map(|k| &k.id))
                .field("old", &k.old.iter().map(|k| &k.id).collect::<Vec<_>>())
                .finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
    const B: &str = "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXoxMjM0NTY=";

    #[test]
    fn old_keys_open_and_only_the_current_one_seals() {
        let before = Keyring::new(Some(A), &[]).expect("A");
        let sealed = before.seal("s", "secret");
        let after = Keyring::new(Some(B), &[A]).expect("B, A old");
        assert_eq!(
            after.open("s", &sealed.text, sealed.key_id.as_deref()),
            Ok("secret".into())
        );
        let resealed = after.seal("s", "secret");
        assert_ne!(resealed.key_id, sealed.key_id);
        let without_a = Keyring::new(Some(B), &[]).expect("B");
        assert!(matches!(
            without_a.open("s", &sealed.text, sealed.key_id.as_deref()),
            Err(OpenError::UnknownKey(_))
        ));
        assert_eq!(
            Keyring::default().open("s", "clear", None),
            Ok("clear".into())
        );
        assert_eq!(Keyring::default().seal("s", "clear").key_id, None);
    }

    #[test]
    fn nonces_are_fresh_and_tampering_is_caught() {
        let keys = Keyring::new(Some(A), &[]).expect("A");
        let (one, two) = (keys.seal("s", "x"), keys.seal("s", "x"));
        assert_ne!(one.text, two.text, "a fresh nonce each time");
        let mut bytes = STANDARD.decode(&one.text).expect("base64");
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let altered = STANDARD.encode(bytes);
        assert!(matches!(
            keys.open("s", &altered, one.key_id.as_deref()),
            Err(OpenError::Damaged(_))
        ));
        assert!(keys.open("s", "", one.key_id.as_deref()).is_err());
        assert!(Keyring::new(Some(&STANDARD.encode([0u8; 31])), &[]).is_err());
        assert!(Keyring::new(None, &["not base64!"]).is_err());
        assert!(!format!("{keys:?}").contains(A));
    }
}
