//! Canonical JSON text: the identity of a payload, computed in one pass over the
//! raw text, without building a tree of values.
//!
//! The canonical form of a JSON value is its compact text with
//!
//! - the members of every object sorted by key (bytewise, as UTF-8);
//! - every string written as serde_json writes it (only `"`, `\` and control
//!   characters escaped, so `"\u00e9"` and `"é"` are one string);
//! - every number **exactly as sent** (`12345678901234567890123` and
//!   `0.1000000000000000000001` are kept digit for digit; `1.0` and `1.00` are two
//!   different numbers);
//! - no whitespace.
//!
//! So two texts have one canonical form exactly when they differ only in key order,
//! whitespace and string escapes. An object with a key twice is refused: which of
//! the two values it meant is ambiguous. Nesting deeper than [`MAX_DEPTH`] is
//! refused too.

use std::borrow::Cow;

/// Deepest nesting of arrays and objects accepted (serde_json's own limit).
pub(crate) const MAX_DEPTH: usize = 128;

/// Why a text is not acceptable JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} at byte {offset}")]
pub(crate) struct JsonError {
    /// What is wrong.
    pub message: Cow<'static, str>,
    /// Where, in bytes from the start of the text.
    pub offset: usize,
}

/// The canonical text of the one JSON value in `text` (surrounding whitespace
/// allowed).
pub(crate) fn canonical(text: &str) -> Result<String, JsonError> {
    let mut parser = Parser::new(text);
    let mut out = String::with_capacity(text.len());
    parser.value(&mut out)?;
    parser.end()?;
    Ok(out)
}

/// The members of the JSON object in `text`, in the order sent, each value as its
/// canonical text; `None` when `text` is valid JSON but not an object. Refuses a key
/// sent twice.
pub(crate) fn canonical_members(text: &str) -> Result<Option<Vec<(String, String)>>, JsonError> {
    let mut parser = Parser::new(text);
    parser.skip_whitespace();
    if parser.peek() != Some(b'{') {
        parser.value(&mut String::new())?;
        parser.end()?;
        return Ok(None);
    }
    let mut members: Vec<(String, String)> = Vec::new();
    // Each value is written into one buffer the size of the whole text, then
    // copied out at its own size: written into a fresh `String`, a large value (a
    // webhook's payload) grew it by doubling, each step a reallocation and a copy.
    let mut scratch = String::with_capacity(text.len());
    parser.members(|parser, key| {
        scratch.clear();
        parser.value(&mut scratch)?;
        members.push((key.into_owned(), scratch.as_str().to_owned()));
        Ok(())
    })?;
    parser.end()?;
    let mut keys: Vec<&str> = members.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    if let Some(pair) = keys.windows(2).find(|w| w[0] == w[1]) {
        return Err(duplicate(pair[0], 0));
    }
    Ok(Some(members))
}

/// The text of the value that the JSON pointer `pointer` (RFC 6901) names in the
/// valid JSON `text` (such as [`canonical`]'s output), or `None`.
pub(crate) fn pointer<'t>(text: &'t str, pointer: &str) -> Option<&'t str> {
    let mut parser = Parser::new(text);
    parser.skip_whitespace();
    if pointer.is_empty() {
        let start = parser.pos;
        parser.skip_value().ok()?;
        return text.get(start..parser.pos);
    }
    for token in pointer.strip_prefix('/')?.split('/') {
        let token = token.replace("~1", "/").replace("~0", "~");
        parser.skip_whitespace();
        match parser.peek()? {
            b'{' => parser.find_member(&token)?,
            b'[' => parser.find_element(index(&token)?)?,
            _ => return None,
        }
    }
    parser.skip_whitespace();
    let start = parser.pos;
    parser.skip_value().ok()?;
    text.get(start..parser.pos)
}

/// `canonical` (compact, as [`canonical`] makes it) without the top-level member
/// `name`, or `None` when it has no such member (or is no object).
pub(crate) fn without_member(canonical: &str, name: &str) -> Option<String> {
    let escaped = name.replace('~', "~0").replace('/', "~1");
    let value = pointer(canonical, &format!("/{escaped}"))?;
    let start = value.as_ptr() as usize - canonical.as_ptr() as usize;
    let end = start + value.len();
    let key = format!("{}:", serde_json::to_string(name).ok()?);
    let key_start = start.checked_sub(key.len())?;
    if canonical.get(key_start..start)? != key {
        return None;
    }
    let bytes = canonical.as_bytes();
    let (cut_from, cut_to) = if bytes.get(end) == Some(&b',') {
        (key_start, end + 1)
    } else if key_start > 0 && bytes[key_start - 1] == b',' {
        (key_start - 1, end)
    } else {
        (key_start, end)
    };
    Some([&canonical[..cut_from], &canonical[cut_to..]].concat())
}

/// The string a JSON string literal (`"…"`, escapes allowed) stands for, or `None`
/// when `literal` is not one.
pub(crate) fn string_value(literal: &str) -> Option<String> {
    let mut parser = Parser::new(literal);
    let s = parser.string().ok()?.into_owned();
    parser.end().ok()?;
    Some(s)
}

/// An array index token: digits, no leading zero (RFC 6901).
fn index(token: &str) -> Option<usize> {
    let digits = token.bytes().all(|b| b.is_ascii_digit());
    if token.is_empty() || !digits || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}

fn duplicate(key: &str, offset: usize) -> JsonError {
    JsonError {
        message: format!("the key {key:?} appears twice in one object (ambiguous JSON)").into(),
        offset,
    }
}

/// Appends `s` as a JSON string literal, escaped as serde_json escapes it.
pub(crate) fn write_string(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut plain = 0;
    loop {
        let i = plain + plain_run(&bytes[plain..]);
        out.push_str(&s[plain..i]);
        let Some(&b) = bytes.get(i) else { break };
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(char::from(HEX[usize::from(b >> 4)]));
                out.push(char::from(HEX[usize::from(b & 0xf)]));
            }
        }
        plain = i + 1;
    }
    out.push('"');
}

/// Appends a string that [`Parser::string`] returned: one it borrowed from the text
/// had no escapes and no control characters, so its literal is already canonical;
/// one it decoded is escaped again.
#[expect(
    clippy::ptr_arg,
    reason = "whether the text was borrowed is what matters"
)]
fn push_string(out: &mut String, s: &Cow<'_, str>) {
    match s {
        Cow::Borrowed(plain) => {
            out.reserve(plain.len() + 2);
            out.push('"');
            out.push_str(plain);
            out.push('"');
        }
        Cow::Owned(decoded) => write_string(out, decoded),
    }
}

/// How many bytes at the start of `bytes` a string literal holds as they are: up
/// to the first `"`, `\` or control character (the bytes that end a literal,
/// start an escape or must be escaped), or all of them. Eight bytes at a time.
fn plain_run(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // Whether any byte of `v` is zero (exact for "any", as wanted here).
    let zero_in = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS != 0;
    let mut chunks = bytes.chunks_exact(8);
    let mut done = 0;
    for chunk in &mut chunks {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let v = u64::from_ne_bytes(word);
        let control = v.wrapping_sub(ONES * 0x20) & !v & HIGHS != 0;
        if control
            || zero_in(v ^ (ONES * u64::from(b'"')))
            || zero_in(v ^ (ONES * u64::from(b'\\')))
        {
            break;
        }
        done += 8;
    }
    done + bytes[done..]
        .iter()
        .position(|&b| matches!(b, b'"' | b'\\' | 0..=0x1f))
        .unwrap_or(bytes.len() - done)
}

/// A cursor over JSON text.
struct Parser<'t> {
    text: &'t str,
    pos: usize,
    depth: usize,
}

impl<'t> Parser<'t> {
    fn new(text: &'t str) -> Self {
        Self {
            text,
            pos: 0,
            depth: 0,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    fn error(&self, message: &'static str) -> JsonError {
        JsonError {
            message: message.into(),
            offset: self.pos,
        }
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// Only whitespace may follow.
    fn end(&mut self) -> Result<(), JsonError> {
        self.skip_whitespace();
        match self.peek() {
            None => Ok(()),
            Some(_) => Err(self.error("trailing characters after the JSON value")),
        }
    }

    fn expect(&mut self, byte: u8, message: &'static str) -> Result<(), JsonError> {
        self.skip_whitespace();
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(message))
        }
    }

    fn enter(&mut self) -> Result<(), JsonError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error("JSON nested too deeply"));
        }
        Ok(())
    }

    /// Parses one value and appends its canonical text.
    fn value(&mut self, out: &mut String) -> Result<(), JsonError> {
        self.skip_whitespace();
        match self.peek() {
            Some(b'{') => self.object(out),
            Some(b'[') => self.array(out),
            Some(b'"') => {
                let s = self.string()?;
                push_string(out, &s);
                Ok(())
            }
            Some(b'-' | b'0'..=b'9') => {
                let start = self.pos;
                self.number()?;
                out.push_str(&self.text[start..self.pos]);
                Ok(())
            }
            Some(b't') => self.literal("true", out),
            Some(b'f') => self.literal("false", out),
            Some(b'n') => self.literal("null", out),
            Some(_) => Err(self.error("expected a JSON value")),
            None => Err(self.error("unexpected end of JSON")),
        }
    }

    fn literal(&mut self, word: &'static str, out: &mut String) -> Result<(), JsonError> {
        if self.text.as_bytes()[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            out.push_str(word);
            Ok(())
        } else {
            Err(self.error("expected a JSON value"))
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`
    fn number(&mut self) -> Result<(), JsonError> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.error("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            self.required_digits()?;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.pos += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.required_digits()?;
        }
        Ok(())
    }

    fn digits(&mut self) {
        while matches!(self.peek(), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
    }

    fn required_digits(&mut self) -> Result<(), JsonError> {
        let start = self.pos;
        self.digits();
        if self.pos == start {
            return Err(self.error("invalid number"));
        }
        Ok(())
    }

    /// Parses a string literal at the cursor and returns what it stands for.
    fn string(&mut self) -> Result<Cow<'t, str>, JsonError> {
        let start = self.pos;
        self.expect(b'"', "expected a string")?;
        let bytes = self.text.as_bytes();
        let mut escaped = false;
        loop {
            self.pos += plain_run(bytes.get(self.pos..).unwrap_or_default());
            match bytes.get(self.pos) {
                None => return Err(self.error("unterminated string")),
                Some(b'"') => break,
                Some(b'\\') => {
                    escaped = true;
                    self.pos += 2;
                }
                Some(0..=0x1f) => return Err(self.error("control character in a string")),
                Some(_) => self.pos += 1,
            }
        }
        self.pos += 1;
        let literal = self
            .text
            .get(start..self.pos)
            .ok_or_else(|| self.error("unterminated string"))?;
        if !escaped {
            return Ok(Cow::Borrowed(&literal[1..literal.len() - 1]));
        }
        // Escapes (and lone surrogates, which are refused) are serde_json's to decode.
        serde_json::from_str::<String>(literal)
            .map(Cow::Owned)
            .map_err(|e| JsonError {
                message: format!("invalid string: {e}").into(),
                offset: start,
            })
    }

    fn array(&mut self, out: &mut String) -> Result<(), JsonError> {
        self.enter()?;
        self.pos += 1;
        out.push('[');
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
        } else {
            loop {
                self.value(out)?;
                self.skip_whitespace();
                match self.peek() {
                    Some(b',') => {
                        self.pos += 1;
                        out.push(',');
                    }
                    Some(b']') => {
                        self.pos += 1;
                        break;
                    }
                    _ => return Err(self.error("expected ',' or ']'")),
                }
            }
        }
        out.push(']');
        self.depth -= 1;
        Ok(())
    }

    /// Walks the members of the object at the cursor, calling `member` with the
    /// cursor on each value (which it must consume).
    fn members(
        &mut self,
        mut member: impl FnMut(&mut Self, Cow<'t, str>) -> Result<(), JsonError>,
    ) -> Result<(), JsonError> {
        self.enter()?;
        self.pos += 1;
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(());
        }
        loop {
            self.skip_whitespace();
            let key = self.string()?;
            self.expect(b':', "expected ':'")?;
            member(self, key)?;
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
        self.depth -= 1;
        Ok(())
    }

    /// An object: its members (`"key":value`) written to `out` in the order sent,
    /// then moved into key order unless they were in it already.
    fn object(&mut self, out: &mut String) -> Result<(), JsonError> {
        let at = self.pos;
        out.push('{');
        let start = out.len();
        let mut members: Vec<(Cow<'t, str>, usize, usize)> = Vec::new();
        self.members(|parser, key| {
            if !members.is_empty() {
                out.push(',');
            }
            let from = out.len() - start;
            push_string(out, &key);
            out.push(':');
            parser.value(out)?;
            members.push((key, from, out.len() - start));
            Ok(())
        })?;
        // Strictly ascending keys are in order and distinct: nothing to move.
        if !members.windows(2).all(|w| w[0].0 < w[1].0) {
            members.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            if let Some(pair) = members.windows(2).find(|w| w[0].0 == w[1].0) {
                return Err(duplicate(&pair[0].0, at));
            }
            let written = out.split_off(start);
            for (i, (_, from, to)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&written[*from..*to]);
            }
        }
        out.push('}');
        Ok(())
    }

    /// Moves past one value of valid JSON without looking into it.
    fn skip_value(&mut self) -> Result<(), JsonError> {
        self.skip_whitespace();
        let bytes = self.text.as_bytes();
        let mut depth = 0usize;
        loop {
            match bytes.get(self.pos) {
                None => return Err(self.error("unexpected end of JSON")),
                Some(b'"') => {
                    self.string()?;
                }
                Some(b'{' | b'[') => {
                    depth += 1;
                    self.pos += 1;
                }
                Some(b'}' | b']') => {
                    depth = depth
                        .checked_sub(1)
                        .ok_or_else(|| self.error("unbalanced JSON"))?;
                    self.pos += 1;
                }
                Some(_) if depth > 0 => self.pos += 1,
                Some(_) => {
                    // A scalar at the top: up to the next delimiter.
                    while !matches!(
                        bytes.get(self.pos),
                        None | Some(b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                    ) {
                        self.pos += 1;
                    }
                    return Ok(());
                }
            }
            if depth == 0 {
                return Ok(());
            }
        }
    }

    /// With the cursor on an object: moves it onto the value of `key`.
    fn find_member(&mut self, key: &str) -> Option<()> {
        self.pos += 1;
        loop {
            self.skip_whitespace();
            if self.peek()? == b'}' {
                return None;
            }
            let name = self.string().ok()?;
            self.expect(b':', "").ok()?;
            self.skip_whitespace();
            if name == key {
                return Some(());
            }
            self.skip_value().ok()?;
            self.skip_whitespace();
            match self.peek()? {
                b',' => self.pos += 1,
                _ => return None,
            }
        }
    }

    /// With the cursor on an array: moves it onto element `n`.
    fn find_element(&mut self, n: usize) -> Option<()> {
        self.pos += 1;
        for _ in 0..n {
            self.skip_whitespace();
            if self.peek()? == b']' {
                return None;
            }
            self.skip_value().ok()?;
            self.skip_whitespace();
            match self.peek()? {
                b',' => self.pos += 1,
                _ => return None,
            }
        }
        self.skip_whitespace();
        (self.peek()? != b']').then_some(())
    }
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_top_level_member_leaves_with_its_comma() {
        let text = r#"{"a":1,"signature":{"t":"x,y"},"z":[2]}"#;
        assert_eq!(
            without_member(text, "signature").as_deref(),
            Some(r#"{"a":1,"z":[2]}"#)
        );
        assert_eq!(
            without_member(text, "z").as_deref(),
            Some(r#"{"a":1,"signature":{"t":"x,y"}}"#)
        );
        assert_eq!(
            without_member(text, "a").as_deref(),
            Some(r#"{"signature":{"t":"x,y"},"z":[2]}"#)
        );
        assert_eq!(without_member(r#"{"a":1}"#, "a").as_deref(), Some("{}"));
        assert_eq!(without_member(text, "t"), None, "not top level");
        assert_eq!(without_member("[1]", "a"), None);
    }

    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_module_example() {
        use crate::json;

        let text =
            json::canonical(r#"{ "b": [1.50, "\u00e9"], "a": 12345678901234567890123 }"#).unwrap();
        assert_eq!(text, r#"{"a":12345678901234567890123,"b":[1.50,"é"]}"#);
        assert_eq!(json::pointer(&text, "/b/0"), Some("1.50"));
        assert!(json::canonical(r#"{"a": 1, "a": 2}"#).is_err());
    }

    #[test]
    fn plain_runs_stop_at_the_first_byte_a_literal_cannot_hold_as_is() {
        // Every stopping byte at every offset of texts longer than a word, checked
        // against a byte-by-byte scan.
        let stops = [b'"', b'\\', 0x00, 0x1f, b'\n'];
        let passes = [b' ', b'!', b'#', b'[', b']', 0x7f, 0x80, 0xff, b'x'];
        for len in 0..40 {
            for &fill in &passes {
                let mut bytes = vec![fill; len];
                assert_eq!(plain_run(&bytes), len, "no stop in {bytes:?}");
                for at in 0..len {
                    for &stop in &stops {
                        bytes[at] = stop;
                        let naive = bytes
                            .iter()
                            .position(|&b| b == b'"' || b == b'\\' || b < 0x20);
                        assert_eq!(Some(plain_run(&bytes)), naive, "{bytes:?}");
                        bytes[at] = fill;
                    }
                }
            }
        }
    }

    #[test]
    fn long_strings_and_ordered_or_unordered_keys_canonicalise_alike() {
        let long = "x".repeat(1000);
        let sent = format!(r#"{{"b": "{long}\u0041", "a": ["{long}", "é\n"], "c": 1}}"#);
        let expected = format!(r#"{{"a":["{long}","é\n"],"b":"{long}A","c":1}}"#);
        assert_eq!(canonical(&sent).unwrap(), expected);
        assert_eq!(canonical(&expected).unwrap(), expected);
        let twice = r#"{"a": 1, "b": 2, "a": 3}"#;
        assert!(canonical(twice).is_err());
        let twice_in_order = r#"{"a": 1, "a": 1}"#;
        assert!(canonical(twice_in_order).is_err());
    }

    #[test]
    fn numbers_are_kept_as_sent() {
        for n in [
            "12345678901234567890123",
            "0.1000000000000000000001",
            "-0",
            "1E+2",
            "1.50",
            "-12.5e-7",
        ] {
            assert_eq!(canonical(n).as_deref(), Ok(n));
            assert_eq!(
                canonical(&format!("{{\"x\": [ {n} ]}}")),
                Ok(format!("{{\"x\":[{n}]}}"))
            );
        }
        for bad in [
            "01", "1.", ".5", "-", "1e", "+1", "0x10", "1.e3", "NaN", "Infinity",
        ] {
            assert!(canonical(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn keys_are_sorted_strings_normalised_and_duplicates_refused() {
        assert_eq!(
            canonical(r#" { "b" : {"z":null,"y":true} , "a":"\u00e9\/\n" } "#).as_deref(),
            Ok(r#"{"a":"é/\n","b":{"y":true,"z":null}}"#)
        );
        assert_eq!(
            canonical("\"\\u0000\\u001f\\b\"").as_deref(),
            Ok(r#""\u0000\u001f\b""#)
        );
        let dup = canonical(r#"{"a":{"k":1,"\u006b":2}}"#).expect_err("duplicate");
        assert!(dup.message.contains("\"k\""), "{dup}");
        assert!(canonical(r#"{"a":1,"b":2,"a":1}"#).is_err());
        assert!(canonical_members(r#"{"a":1,"a":1}"#).is_err());
    }

    #[test]
    fn malformed_text_is_refused() {
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\"}",
            "{\"a\":1,}",
            "[1 2]",
            "\"\\ud800\"",
            "\"a\u{1}\"",
            "\"\\x\"",
            "tru",
            "nul",
            "[] []",
            "{'a':1}",
            "\"open",
        ] {
            assert!(canonical(bad).is_err(), "{bad:?}");
        }
        let deep = "[".repeat(MAX_DEPTH + 1) + &"]".repeat(MAX_DEPTH + 1);
        assert!(canonical(&deep).is_err());
        let ok = "[".repeat(MAX_DEPTH) + &"]".repeat(MAX_DEPTH);
        assert!(canonical(&ok).is_ok());
    }

    #[test]
    fn members_say_when_the_text_is_not_an_object() {
        assert_eq!(canonical_members(" [1] "), Ok(None));
        assert!(canonical_members("[1").is_err());
        assert!(canonical_members("{} x").is_err());
        assert_eq!(
            canonical_members(r#"{"p": {"b":1,"a":2}, "t": "x"}"#),
            Ok(Some(vec![
                ("p".to_owned(), r#"{"a":2,"b":1}"#.to_owned()),
                ("t".to_owned(), r#""x""#.to_owned()),
            ]))
        );
    }

    #[test]
    fn pointers_find_values_in_canonical_text() {
        let text = canonical(
            r#"{"customer":{"id":12345678901234567890,"name":"A\"b"},"items":[{"sku":"x"},{"sku":"y"}],"a/b":1,"m~n":2,"":3}"#,
        )
        .expect("valid");
        assert_eq!(pointer(&text, "/customer/id"), Some("12345678901234567890"));
        assert_eq!(pointer(&text, "/customer/name"), Some(r#""A\"b""#));
        assert_eq!(pointer(&text, "/items/1/sku"), Some(r#""y""#));
        assert_eq!(pointer(&text, "/items/1"), Some(r#"{"sku":"y"}"#));
        assert_eq!(pointer(&text, "/a~1b"), Some("1"));
        assert_eq!(pointer(&text, "/m~0n"), Some("2"));
        assert_eq!(pointer(&text, "/"), Some("3"));
        assert_eq!(pointer(&text, ""), Some(text.as_str()));
        for missing in [
            "/items/2",
            "/items/01",
            "/items/-",
            "/customer/id/x",
            "/nope",
            "x",
        ] {
            assert_eq!(pointer(&text, missing), None, "{missing}");
        }
        assert_eq!(string_value(r#""A\"b\u0000""#).as_deref(), Some("A\"b\0"));
        assert_eq!(string_value("1"), None);
    }
}
