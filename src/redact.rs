//! Keeping credentials out of what hookbox shows and stores about an attempt: a
//! receiver's answer or a program's stderr may repeat a URL with its
//! `user:password@`, the `Authorization` header made of them, or a value of the
//! environment the program was given.

use std::borrow::Cow;

/// What replaces a hidden value.
pub(crate) const REDACTED: &str = "[redacted]";

/// Values that never appear in a stored error: each occurrence becomes
/// [`REDACTED`]. Values shorter than [`Redactions::MIN_LEN`] are not hidden (they
/// would blank out ordinary words and digits).
#[derive(Debug, Clone, Default)]
pub(crate) struct Redactions(Vec<String>);

impl Redactions {
    /// Shortest value hidden.
    pub(crate) const MIN_LEN: usize = 4;

    /// Hides these values (longest first, so a value that contains another goes
    /// whole).
    pub(crate) fn new<I, S>(values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut values: Vec<String> = values
            .into_iter()
            .map(Into::into)
            .filter(|v| v.len() >= Self::MIN_LEN)
            .collect();
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values.dedup();
        Self(values)
    }

    /// The credentials of a URL as they may travel: the password, `user:password`,
    /// and the base64 of `user:password` that basic authentication sends.
    pub(crate) fn of_url(url: &url::Url) -> Self {
        use base64::Engine as _;
        let Some(password) = url.password() else {
            return Self::default();
        };
        let decode = |s: &str| percent_encoding_decode(s).unwrap_or_else(|| s.to_owned());
        let (user, password_text) = (decode(url.username()), decode(password));
        let pair = format!("{user}:{password_text}");
        let basic = base64::engine::general_purpose::STANDARD.encode(&pair);
        Self::new([password.to_owned(), password_text, pair, basic])
    }

    /// Adds more values to hide.
    #[must_use]
    pub(crate) fn and(mut self, other: Self) -> Self {
        self.0.extend(other.0);
        Self::new(self.0)
    }

    /// `text` with every hidden value replaced.
    pub(crate) fn apply<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for value in &self.0 {
            if out.contains(value.as_str()) {
                out = Cow::Owned(out.replace(value.as_str(), REDACTED));
            }
        }
        out
    }
}

/// Percent-decoding of a URL's user or password, when it is valid UTF-8.
fn percent_encoding_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `text` with the `user:password@` (or `user@`) of every URL in it removed.
pub(crate) fn strip_url_credentials(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        // The authority ends at a path, query, fragment, quote or space.
        let end = tail
            .find(|c: char| {
                matches!(c, '/' | '?' | '#' | '"' | '\'' | '<' | '>' | '`') || c.is_whitespace()
            })
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(userinfo_end) => out.push_str(&authority[userinfo_end + 1..]),
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Names whose value, after `=` or `:` (as in a query string, a form, JSON or a
/// header line), is a credential; matched at the end of a word, so
/// `access_token`, `X-Api-Key` and `DB_PASSWORD` count too.
const SECRET_NAMES: [&str; 8] = [
    "password", "passwd", "pwd", "secret", "token", "apikey", "api_key", "api-key",
];

/// Schemes of an `Authorization` value followed by a credential.
const SCHEMES: [&str; 3] = ["bearer ", "basic ", "token "];

/// `text` with the credentials a program or a receiver may print replaced by
/// [`REDACTED`]: the token after `Bearer`, `token` (when it looks like one: a
/// digit or punctuation in it) and `Basic` (when it is base64 of
/// `user:password`), and the value of `password=…`, `"token": "…"` and the like
/// ([`SECRET_NAMES`]; after an unquoted `name:` only a value that looks like a
/// key — six or more characters with a digit — so that prose such as
/// `invalid token: signature mismatch` stays readable).
pub(crate) fn strip_named_credentials(text: &str) -> Cow<'_, str> {
    // ASCII lower-casing keeps every byte offset, and every pattern is ASCII, so
    // the offsets found are character boundaries of `text`.
    let lower = text.to_ascii_lowercase();
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    for scheme in SCHEMES {
        for (at, _) in lower.match_indices(scheme) {
            if at > 0 && lower.as_bytes()[at - 1].is_ascii_alphanumeric() {
                continue;
            }
            let start = at + scheme.len();
            let token = &text[start..start + token_len(&text[start..])];
            if scheme_token(scheme, token) {
                cuts.push((start, start + token.len()));
            }
        }
    }
    for name in SECRET_NAMES {
        for (at, _) in lower.match_indices(name) {
            let end = at + name.len();
            let word_end = lower
                .as_bytes()
                .get(end)
                .is_none_or(|b| !b.is_ascii_alphanumeric());
            if word_end {
                cuts.extend(value_after(text, end));
            }
        }
    }
    if cuts.is_empty() {
        return Cow::Borrowed(text);
    }
    cuts.sort_unstable();
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    for (start, end) in cuts {
        if start < from {
            // Overlapping an earlier cut: only what it leaves is new.
            from = from.max(end);
            continue;
        }
        out.push_str(&text[from..start]);
        out.push_str(REDACTED);
        from = end;
    }
    out.push_str(&text[from..]);
    Cow::Owned(out)
}

/// Whether `token`, after `scheme`, is a credential.
fn scheme_token(scheme: &str, token: &str) -> bool {
    if scheme == "basic " {
        use base64::Engine as _;
        return token.len() >= 8
            && base64::engine::general_purpose::STANDARD
                .decode(token)
                .is_ok_and(|pair| pair.contains(&b':'));
    }
    token.len() >= 6 && looks_like_a_key(token)
}

/// A digit or token punctuation in it: a key, not a word.
fn looks_like_a_key(value: &str) -> bool {
    value
        .bytes()
        .any(|b| b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-' | b'+' | b'/' | b'='))
}

/// Bytes of a token at the start of `text` (base64, base64url and the like).
fn token_len(text: &str) -> usize {
    text.find(|c: char| !(c.is_ascii_alphanumeric() || "._~+/=-".contains(c)))
        .unwrap_or(text.len())
}

/// The span of the value after a name ending at `at`: `=` or `:` (after the
/// name's closing quote, if quoted) and optional spaces, then a quoted value to
/// its closing quote or an unquoted one to a delimiter. `None` when nothing of
/// the kind follows, the value is empty or redacted already, or it follows an
/// unquoted `name:` and does not look like a key.
fn value_after(text: &str, at: usize) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut i = at;
    let quoted_name = matches!(bytes.get(i), Some(b'"' | b'\''));
    if quoted_name {
        i += 1;
    }
    while bytes.get(i) == Some(&b' ') {
        i += 1;
    }
    let sign = *bytes.get(i)?;
    if !matches!(sign, b'=' | b':') {
        return None;
    }
    i += 1;
    while bytes.get(i) == Some(&b' ') {
        i += 1;
    }
    let rest = &text[i..];
    let (start, len) = match bytes.get(i) {
        Some(&q @ (b'"' | b'\'')) => {
            let inner = &rest[1..];
            (i + 1, inner.find(q as char).unwrap_or(inner.len()))
        }
        _ => {
            let len = rest
                .find(|c: char| c.is_whitespace() || matches!(c, '&' | ',' | ';' | '}' | ')'))
                .unwrap_or(rest.len());
            (i, len)
        }
    };
    let value = &text[start..start + len];
    let unquoted_colon = sign == b':' && !quoted_name;
    let hidden = !value.is_empty()
        && !value.starts_with(REDACTED)
        && (!unquoted_colon || (value.len() >= 6 && looks_like_a_key(value)));
    hidden.then_some((start, start + len))
}

/// An attempt's error as the attempt history keeps it: URL and named credentials
/// stripped ([`strip_url_credentials`], [`strip_named_credentials`]), cut to at
/// most `max` bytes (at a character boundary).
pub(crate) fn attempt_error(message: &str, max: usize) -> String {
    let urls = strip_url_credentials(message);
    let clean = strip_named_credentials(&urls);
    let mut cut = clean.len().min(max);
    while !clean.is_char_boundary(cut) {
        cut -= 1;
    }
    clean[..cut].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_module_example() {
        use crate::redact::{Redactions, strip_url_credentials};

        assert_eq!(
            strip_url_credentials("GET http://bob:hunter2@127.0.0.1:9/x failed"),
            "GET http://127.0.0.1:9/x failed"
        );
        let hide = Redactions::new(["hunter2"]);
        assert_eq!(
            hide.apply("password hunter2 refused"),
            "password [redacted] refused"
        );
    }

    #[test]
    fn url_credentials_are_stripped_wherever_they_are() {
        assert_eq!(
            strip_url_credentials("a https://u:p@h.example/x?y b postgres://me@db/z"),
            "a https://h.example/x?y b postgres://db/z"
        );
        assert_eq!(strip_url_credentials("no url here"), "no url here");
        assert_eq!(
            strip_url_credentials("\"http://u:p@h\" and ://"),
            "\"http://h\" and ://"
        );
    }

    #[test]
    fn url_secrets_are_hidden_in_every_form() {
        let url = url::Url::parse("http://hook-user:hook%20pass@127.0.0.1/").expect("url");
        let hide = Redactions::of_url(&url);
        let basic = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode("hook-user:hook pass")
        };
        let text = format!("got Basic {basic}; pw hook pass; raw hook%20pass");
        let shown = hide.apply(&text);
        assert!(
            !shown.contains("hook pass") && !shown.contains("hook%20pass"),
            "{shown}"
        );
        assert!(!shown.contains(&basic), "{shown}");
    }

    #[test]
    fn named_credentials_are_stripped() {
        let text = "Authorization: Bearer sk_live_abcdef123456 password=hunter2&x=1 \
                    {\"api_key\": \"k-998877\", \"access_token\":\"at.1\", \
                    \"password\": \"correct horse battery\"} DB_PASSWORD: s3cr3t99 \
                    X-Api-Key: key_12345678 Basic dXNlcjpwYXNz Authorization: token ghp_0123456789";
        let shown = strip_named_credentials(text);
        for hidden in [
            "sk_live_abcdef123456",
            "hunter2",
            "k-998877",
            "at.1",
            "horse",
            "battery",
            "s3cr3t99",
            "key_12345678",
            "dXNlcjpwYXNz",
            "ghp_0123456789",
        ] {
            assert!(!shown.contains(hidden), "{hidden} in {shown}");
        }
        assert!(
            shown.contains("Bearer [redacted]") && shown.contains("x=1"),
            "{shown}"
        );
        // Overlapping matches leave nothing of either.
        let both = strip_named_credentials("Bearer abcdefgh_api_key=ABC:SECRETTAIL end");
        assert!(!both.contains("SECRETTAIL"), "{both}");
        assert!(both.ends_with(" end"), "{both}");
        // Ordinary words stay.
        for plain in [
            "Basic authentication failed",
            "expected Bearer authentication",
            "the token was refused",
            "invalid token: signature mismatch",
            "password: must be at least 8 characters",
            "tokens: 3 left",
            "token expired",
            "Basic realm=\"api\"",
            "{\"error\":\"invalid_token\"}",
            "connection refused é",
        ] {
            assert_eq!(strip_named_credentials(plain), plain);
        }
        assert_eq!(
            attempt_error("GET https://u:p@h/x?token=abc failed", 1024),
            "GET https://h/x?token=[redacted] failed"
        );
    }

    #[test]
    fn errors_are_cut_at_a_character_boundary() {
        let long = "é".repeat(600);
        let cut = attempt_error(&long, 1024);
        assert_eq!(cut.len(), 1024);
        let cut = attempt_error(&format!("x{long}"), 1024);
        assert_eq!(cut.len(), 1023);
        assert_eq!(attempt_error("short", 1024), "short");
    }
}
