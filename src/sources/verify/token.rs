//! `kind = "token"`: a header must equal one of the source's secrets — by default
//! `Authorization: Bearer <secret>`.

use super::{Incoming, Rejection, same};
use crate::config::Secret;

/// From a source's `[token]` section.
#[derive(Debug, Clone)]
pub(crate) struct Scheme {
    /// The header; `None` = `Authorization`, compared as `Bearer <secret>`.
    pub header: Option<http::HeaderName>,
}

impl Scheme {
    /// Checks the header against every secret, in constant time.
    pub(crate) fn verify(&self, req: &Incoming<'_>, secrets: &[Secret]) -> Result<(), Rejection> {
        let (name, bearer) = match &self.header {
            Some(h) => (h.as_str(), false),
            None => ("authorization", true),
        };
        let Some(value) = req.header(name) else {
            return Err(Rejection::Missing(name.to_owned()));
        };
        let given = if bearer {
            match value.split_once(' ') {
                Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
                _ => {
                    return Err(Rejection::Malformed(
                        "authorization must be Bearer <token>".into(),
                    ));
                }
            }
        } else {
            value.trim()
        };
        let mut found = false;
        for s in secrets {
            found |= same(s.expose().as_bytes(), given.as_bytes());
        }
        if found {
            Ok(())
        } else {
            Err(Rejection::Mismatch(name.to_owned()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(scheme: &Scheme, name: &str, value: &str) -> Result<(), Rejection> {
        let mut h = http::HeaderMap::new();
        h.insert(
            http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
            value.parse().unwrap(),
        );
        scheme.verify(
            &Incoming {
                headers: &h,
                body: b"{}",
                now: 0,
            },
            &[Secret::new("t-old"), Secret::new("t-new")],
        )
    }

    #[test]
    fn bearer_by_default_or_a_named_header() {
        let bearer = Scheme { header: None };
        assert!(check(&bearer, "authorization", "Bearer t-new").is_ok());
        assert!(check(&bearer, "authorization", "bearer t-old").is_ok());
        assert_eq!(
            check(&bearer, "authorization", "Bearer t-nope")
                .unwrap_err()
                .reason(),
            "signature"
        );
        assert_eq!(
            check(&bearer, "authorization", "t-new")
                .unwrap_err()
                .reason(),
            "other"
        );
        assert_eq!(
            check(&bearer, "x-other", "t-new").unwrap_err().reason(),
            "signature"
        );
        let named = Scheme {
            header: Some(http::HeaderName::from_static("x-webhook-token")),
        };
        assert!(check(&named, "x-webhook-token", "t-old").is_ok());
        assert!(check(&named, "x-webhook-token", "Bearer t-old").is_err());
    }
}
