//! Console sessions: a random id in a cookie, everything else on the server.
//!
//! A session is created by logging in with `ADMIN_TOKEN` (or, without a token, on
//! the first visit, so that forms still carry an anti-forgery token). It holds its
//! own random anti-forgery token ([`Session::csrf`]), expires [`SESSION_TTL`] after
//! it was created, and ends at logout. Sessions live in this process's memory: a
//! restart logs everyone out, and behind a load balancer with several instances
//! the console needs sticky sessions (docs/operating.md).
//!
//! The cookie is `HttpOnly` (scripts cannot read it), `SameSite=Strict` (other
//! sites' pages cannot send it), `Path=/console`, and `Secure` when the request
//! came over HTTPS through a proxy that says so with `X-Forwarded-Proto: https`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use http::HeaderMap;
use http::header::{COOKIE, HeaderValue};

/// The session cookie's name.
pub(crate) const COOKIE_NAME: &str = "hookbox_session";

/// How long a session lasts after it is created.
pub(crate) const SESSION_TTL: Duration = Duration::from_secs(12 * 60 * 60);

/// At most this many sessions are kept; past it the one closest to expiry goes.
const MAX_SESSIONS: usize = 10_000;

/// One console session.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// The id the cookie carries (64 hex digits).
    pub id: String,
    /// This session's anti-forgery token: every POST carries it in a field `csrf`.
    pub csrf: String,
    expires: Instant,
}

/// A message shown once, on the next page the session sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Flash {
    /// True for a failure.
    pub error: bool,
    /// The text.
    pub text: String,
}

#[derive(Debug)]
struct Entry {
    session: Session,
    flash: Option<Flash>,
}

/// The server-side session store.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    entries: Mutex<HashMap<String, Entry>>,
}

/// 32 random bytes from the operating system, as 64 hex digits.
pub(crate) fn random_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(crate::model::hex(&bytes))
}

impl Sessions {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a new session.
    pub(crate) fn create(&self) -> Result<Session, getrandom::Error> {
        let session = Session {
            id: random_token()?,
            csrf: random_token()?,
            expires: Instant::now() + SESSION_TTL,
        };
        let mut entries = self.lock();
        if entries.len() >= MAX_SESSIONS {
            let now = Instant::now();
            entries.retain(|_, e| e.session.expires > now);
            if entries.len() >= MAX_SESSIONS {
                let oldest = entries
                    .iter()
                    .min_by_key(|(_, e)| e.session.expires)
                    .map(|(id, _)| id.clone());
                if let Some(id) = oldest {
                    entries.remove(&id);
                }
            }
        }
        entries.insert(
            session.id.clone(),
            Entry {
                session: session.clone(),
                flash: None,
            },
        );
        Ok(session)
    }

    /// The live session whose id the request's cookie carries; an expired one is
    /// removed.
    pub(crate) fn find(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, COOKIE_NAME)?;
        let mut entries = self.lock();
        let entry = entries.get(id)?;
        if entry.session.expires <= Instant::now() {
            entries.remove(id);
            return None;
        }
        Some(entry.session.clone())
    }

    /// Ends a session.
    pub(crate) fn remove(&self, id: &str) {
        self.lock().remove(id);
    }

    /// Leaves a message for the session's next page.
    pub(crate) fn flash(&self, id: &str, error: bool, text: impl Into<String>) {
        if let Some(entry) = self.lock().get_mut(id) {
            entry.flash = Some(Flash {
                error,
                text: text.into(),
            });
        }
    }

    /// Takes the message left for this session, if any.
    pub(crate) fn take_flash(&self, id: &str) -> Option<Flash> {
        self.lock().get_mut(id).and_then(|e| e.flash.take())
    }
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// True when a proxy in front says the request came over HTTPS.
pub(crate) fn behind_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
}

/// The `Set-Cookie` value that hands `session` to the browser.
pub(crate) fn set_cookie(id: &str, secure: bool) -> HeaderValue {
    let mut v = format!(
        "{COOKIE_NAME}={id}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={}",
        SESSION_TTL.as_secs()
    );
    if secure {
        v.push_str("; Secure");
    }
    HeaderValue::from_str(&v).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The `Set-Cookie` value that removes the session cookie.
pub(crate) fn clear_cookie(secure: bool) -> HeaderValue {
    let v = if secure {
        "hookbox_session=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0; Secure"
    } else {
        "hookbox_session=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0"
    };
    HeaderValue::from_static(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_random_token_example() {
        let a = crate::console::session::random_token().expect("os random");
        assert_eq!(a.len(), 64);
        assert_ne!(
            a,
            crate::console::session::random_token().expect("os random")
        );
    }

    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_set_cookie_example() {
        use crate::console::session::set_cookie;
        let v = set_cookie("abc", true);
        assert_eq!(
            v.to_str().unwrap(),
            "hookbox_session=abc; Path=/console; HttpOnly; SameSite=Strict; Max-Age=43200; Secure"
        );
    }

    fn with_cookie(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(COOKIE, HeaderValue::from_str(v).expect("value"));
        h
    }

    #[test]
    fn a_session_is_found_by_its_cookie_and_gone_after_removal() {
        let sessions = Sessions::default();
        let s = sessions.create().expect("create");
        assert_ne!(s.id, s.csrf);
        let headers = with_cookie(&format!("other=1; {COOKIE_NAME}={}", s.id));
        assert_eq!(sessions.find(&headers).map(|f| f.csrf), Some(s.csrf));
        assert!(
            sessions
                .find(&with_cookie("hookbox_session=nope"))
                .is_none()
        );
        sessions.flash(&s.id, false, "done");
        assert_eq!(
            sessions.take_flash(&s.id).map(|f| f.text),
            Some("done".into())
        );
        assert_eq!(sessions.take_flash(&s.id), None, "shown once");
        sessions.remove(&s.id);
        assert!(sessions.find(&headers).is_none());
    }

    #[test]
    fn an_expired_session_is_not_found() {
        let sessions = Sessions::default();
        let s = sessions.create().expect("create");
        if let Some(e) = sessions.lock().get_mut(&s.id) {
            e.session.expires = Instant::now() - Duration::from_secs(1);
        }
        assert!(
            sessions
                .find(&with_cookie(&format!("{COOKIE_NAME}={}", s.id)))
                .is_none()
        );
        assert!(sessions.lock().is_empty(), "removed when seen expired");
    }

    #[test]
    fn https_is_what_the_proxy_says() {
        let mut h = HeaderMap::new();
        assert!(!behind_https(&h));
        h.insert("x-forwarded-proto", HeaderValue::from_static("HTTPS, http"));
        assert!(behind_https(&h));
        h.insert("x-forwarded-proto", HeaderValue::from_static("http"));
        assert!(!behind_https(&h));
    }
}
