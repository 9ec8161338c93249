//! Pretty-printing a stored payload for reading, token by token over its text:
//! nothing is parsed into numbers, so `12345678901234567890123` and `0.1000…1`
//! are shown digit for digit, exactly as stored and delivered.

/// Indents compact JSON text (as stored: canonical, no whitespace) two spaces a
/// level. Text that is not JSON comes out with its characters unchanged, only
/// spaced differently.
pub(crate) fn json(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 2);
    let mut depth = 0usize;
    let (mut in_string, mut escaped) = (false, false);
    let mut chars = text.chars().peekable();
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        for _ in 0..depth {
            out.push_str("  ");
        }
    };
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                let close = if c == '{' { '}' } else { ']' };
                if chars.peek() == Some(&close) {
                    out.push(close);
                    chars.next();
                } else {
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                newline(&mut out, depth);
            }
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_json_example() {
        use crate::console::pretty::json;
        assert_eq!(
            json(r#"{"a":[1,2],"b":{},"c":"x,{y}"}"#),
            "{\n  \"a\": [\n    1,\n    2\n  ],\n  \"b\": {},\n  \"c\": \"x,{y}\"\n}"
        );
        assert_eq!(json("12345678901234567890123"), "12345678901234567890123");
    }
}
