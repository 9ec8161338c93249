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

/// Names whose value, after `=` or `:` (quoted or not, as in a query string, a
/// form, JSON or a log line), is a credential; matched at the end of a word, so
/// `access_token` and `DB_PASSWORD` count too.
const SECRET_NAMES: [&str; 7] = [
    "password", "passwd", "pwd", "secret", "token", "apikey", "api_key",
];

/// `text` with the credentials a program or a receiver may print replaced by
/// [`REDACTED`]: the token of `Bearer …` (and of `Basic …` when it is base64 of
/// `user:password`) and the value of `password=…`, `"token": "…"` and the like
/// ([`SECRET_NAMES`]).
pub(crate) fn strip_named_credentials(text: &str) -> Cow<'_, str> {
    let lower = text.to_ascii_lowercase();
    let mut cuts: Vec<(usize, usize)> = Vec::new();
    for scheme in ["bearer ", "basic "] {
        for (at, _) in lower.match_indices(scheme) {
            if at > 0 && lower.as_bytes()[at - 1].is_ascii_alphanumeric() {
                continue;
            }
            let start = at + scheme.len();
            let len = token_len(&text[start..]);
            let token = &text[start..start + len];
            // A basic token is base64 of `user:password`.
            let looks_like_one = scheme == "bearer " || {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD
                    .decode(token)
                    .is_ok_and(|pair| pair.contains(&b':'))
            };
            if len >= 8 && looks_like_one {
                cuts.push((start, start + len));
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
                if let Some(value) = value_after(text, end) {
                    cuts.push(value);
                }
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
            continue;
        }
        out.push_str(&text[from..start]);
        out.push_str(REDACTED);
        from = end;
    }
    out.push_str(&text[from..]);
    Cow::Owned(out)
}

/// Bytes of a token at the start of `text` (base64, base64url and the like).
fn token_len(text: &str) -> usize {
    text.find(|c: char| !(c.is_ascii_alphanumeric() || "._~+/=-".contains(c)))
        .unwrap_or(text.len())
}

/// The span of the value after a name ending at `at`: an optional closing quote,
/// `=` or `:`, optional spaces and an opening quote, then up to a delimiter.
/// `None` when no `=` or `:` follows, or the value is empty or already redacted.
fn value_after(text: &str, at: usize) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut i = at;
    if matches!(bytes.get(i), Some(b'"' | b'\'')) {
        i += 1;
    }
    while bytes.get(i) == Some(&b' ') {
        i += 1;
    }
    if !matches!(bytes.get(i), Some(b'=' | b':')) {
        return None;
    }
    i += 1;
    while matches!(bytes.get(i), Some(b' ' | b'"' | b'\'')) {
        i += 1;
    }
    let len = text[i..]
        .find(|c: char| c.is_whitespace() || matches!(c, '&' | ',' | ';' | '"' | '\'' | '}' | ')'))
        .unwrap_or(text.len() - i);
    (len > 0 && !text[i..].starts_with(REDACTED)).then_some((i, i + len))
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
                    {\"api_key\": \"k-998877\", \"access_token\":\"at.1\"} DB_PASSWORD: s3cr3t \
                    Basic dXNlcjpwYXNz";
        let shown = strip_named_credentials(text);
        for hidden in [
            "sk_live_abcdef123456",
            "hunter2",
            "k-998877",
            "at.1",
            "s3cr3t",
            "dXNlcjpwYXNz",
        ] {
            assert!(!shown.contains(hidden), "{hidden} in {shown}");
        }
        assert!(
            shown.contains("Bearer [redacted]") && shown.contains("x=1"),
            "{shown}"
        );
        // Ordinary words stay.
        for plain in [
            "Basic authentication failed",
            "the token was refused",
            "tokens: 3 left",
            "connection refused",
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
