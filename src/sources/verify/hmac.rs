//! `kind = "hmac"`: any sender that signs the raw body with an HMAC in one header.
//!
//! ```toml
//! [hmac]
//! header = "X-Signature"
//! algorithm = "sha256"     # sha1 | sha256 | sha512
//! encoding = "hex"         # hex | base64
//! prefix = "sha256="       # stripped from the header value first (optional)
//! ```

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use super::{Algorithm, Encoding, Incoming, Rejection, any_matches, from_hex};
use crate::config::Secret;

/// A generic HMAC scheme, from a source's `[hmac]` section.
#[derive(Debug, Clone)]
pub(crate) struct Scheme {
    /// The header carrying the signature (lower case).
    pub header: http::HeaderName,
    /// The hash.
    pub algorithm: Algorithm,
    /// How the signature is written.
    pub encoding: Encoding,
    /// Stripped from the header value before decoding.
    pub prefix: String,
}

impl Scheme {
    /// Verifies the body's signature against every secret.
    pub(crate) fn verify(&self, req: &Incoming<'_>, secrets: &[Secret]) -> Result<(), Rejection> {
        let name = self.header.as_str();
        let Some(value) = req.header(name).filter(|v| !v.trim().is_empty()) else {
            return Err(Rejection::Missing(name.to_owned()));
        };
        let text = value.trim();
        let text = text.strip_prefix(self.prefix.as_str()).ok_or_else(|| {
            Rejection::Malformed(format!("{name} does not start with the configured prefix"))
        })?;
        let given = match self.encoding {
            Encoding::Hex => from_hex(text),
            Encoding::Base64 => STANDARD.decode(text).ok(),
        }
        .ok_or_else(|| Rejection::Malformed(format!("{name} is not {:?}", self.encoding)))?;
        if any_matches(self.algorithm, secrets, &[req.body], &[given]) {
            Ok(())
        } else {
            Err(Rejection::Mismatch(name.to_owned()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = br#"{"type":"build.done"}"#;

    fn scheme(algorithm: Algorithm, encoding: Encoding, prefix: &str) -> Scheme {
        Scheme {
            header: http::HeaderName::from_static("x-signature"),
            algorithm,
            encoding,
            prefix: prefix.into(),
        }
    }

    fn check(s: &Scheme, value: &str, body: &[u8]) -> Result<(), Rejection> {
        let mut h = http::HeaderMap::new();
        h.insert("x-signature", value.parse().unwrap());
        s.verify(
            &Incoming {
                headers: &h,
                body,
                now: 0,
            },
            &[Secret::new("k")],
        )
    }

    /// Expected values from Python's hmac module with key b"k".
    #[test]
    fn each_algorithm_and_encoding_verifies() {
        let sha1 = scheme(Algorithm::Sha1, Encoding::Hex, "sha1=");
        assert!(check(&sha1, "sha1=c81ebc3501aa6c899c4d5ba2c7cf301d52c3ef3e", BODY).is_ok());
        assert!(check(&sha1, "sha1=C81EBC3501AA6C899C4D5BA2C7CF301D52C3EF3E", BODY).is_ok());
        assert!(check(&sha1, "c81ebc3501aa6c899c4d5ba2c7cf301d52c3ef3e", BODY).is_err());
        assert!(
            check(
                &sha1,
                "sha1=c81ebc3501aa6c899c4d5ba2c7cf301d52c3ef3e",
                b"{}"
            )
            .is_err()
        );
        let sha512 = scheme(Algorithm::Sha512, Encoding::Base64, "");
        let sig = "opq+BhR3EqK2T94cAF2792rRu0A0h+dsLt94zCnl+CxoOo+pBNtLlajnZh+2B5ASznu8CzOsckbPNeQX6QOwXA==";
        assert!(check(&sha512, sig, BODY).is_ok());
        assert_eq!(
            check(&sha512, "AAAA", BODY).unwrap_err().reason(),
            "signature"
        );
    }
}
