//! Property tests of the canonical identity: equal values have equal canonical
//! text, whatever the key order, whitespace and string escapes of their text, and
//! different values have different canonical text; numbers are kept as sent.
//!
//! The expected canonical text is rendered here from a generated tree of values,
//! independently of the parser under test; the parser reads a noisy rendering of the
//! same tree (shuffled keys, random whitespace, random escapes).

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::{canonical, canonical_members, pointer};

/// A JSON value; numbers are their text.
#[derive(Debug, Clone, PartialEq)]
enum J {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    Arr(Vec<J>),
    Obj(BTreeMap<String, J>),
}

fn digits(min: usize, max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(0u8..10, min..=max)
        .prop_map(|d| d.into_iter().map(|d| char::from(b'0' + d)).collect())
}

/// Any number of the JSON grammar, often longer than f64 or u64 can hold.
fn number() -> impl Strategy<Value = String> {
    let int = prop_oneof![
        Just("0".to_owned()),
        (1u8..10, digits(0, 30)).prop_map(|(d, rest)| format!("{d}{rest}")),
    ];
    let frac = proptest::option::of(digits(1, 30));
    let exp = proptest::option::of((
        prop_oneof![Just("e"), Just("E")],
        prop_oneof![Just(""), Just("+"), Just("-")],
        digits(1, 3),
    ));
    (any::<bool>(), int, frac, exp).prop_map(|(neg, int, frac, exp)| {
        let mut n = if neg { format!("-{int}") } else { int };
        if let Some(f) = frac {
            n.push('.');
            n.push_str(&f);
        }
        if let Some((e, sign, d)) = exp {
            n.push_str(e);
            n.push_str(sign);
            n.push_str(&d);
        }
        n
    })
}

/// Strings rich in what needs escaping.
fn text() -> impl Strategy<Value = String> {
    let c = prop_oneof![
        4 => any::<char>(),
        1 => Just('"'),
        1 => Just('\\'),
        1 => Just('/'),
        1 => Just('\0'),
        1 => Just('\n'),
        1 => Just('\u{1f}'),
        1 => Just('é'),
        1 => Just('😀'),
        2 => Just('a'),
    ];
    proptest::collection::vec(c, 0..6).prop_map(String::from_iter)
}

fn tree() -> impl Strategy<Value = J> {
    let leaf = prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        number().prop_map(J::Num),
        text().prop_map(J::Str),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(J::Arr),
            proptest::collection::btree_map(text(), inner, 0..6).prop_map(J::Obj),
        ]
    })
}

/// The canonical text, rendered from the tree.
fn expected(j: &J) -> String {
    let string = |s: &str| serde_json::to_string(s).expect("a string serialises");
    match j {
        J::Null => "null".into(),
        J::Bool(b) => b.to_string(),
        J::Num(n) => n.clone(),
        J::Str(s) => string(s),
        J::Arr(items) => format!(
            "[{}]",
            items.iter().map(expected).collect::<Vec<_>>().join(",")
        ),
        J::Obj(members) => format!(
            "{{{}}}",
            members
                .iter()
                .map(|(k, v)| format!("{}:{}", string(k), expected(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// A rendering of the same value with random whitespace, key order and escapes.
struct Noisy(fastrand::Rng);

impl Noisy {
    fn space(&mut self, out: &mut String) {
        const SPACES: [&str; 6] = ["", "", " ", "\n", "\t", "\r\n  "];
        out.push_str(SPACES[self.0.usize(..SPACES.len())]);
    }

    fn string(&mut self, s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            let short = match c {
                '"' => Some("\\\""),
                '\\' => Some("\\\\"),
                '/' => Some("\\/"),
                '\n' => Some("\\n"),
                '\r' => Some("\\r"),
                '\t' => Some("\\t"),
                '\u{8}' => Some("\\b"),
                '\u{c}' => Some("\\f"),
                _ => None,
            };
            let must_escape = matches!(c, '"' | '\\') || c < ' ';
            if !must_escape && self.0.u8(..4) != 0 {
                out.push(c);
            } else if let Some(short) = short.filter(|_| self.0.bool()) {
                out.push_str(short);
            } else {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let hex = format!("{unit:04x}");
                    let hex = if self.0.bool() {
                        hex.to_uppercase()
                    } else {
                        hex
                    };
                    out.push_str("\\u");
                    out.push_str(&hex);
                }
            }
        }
        out.push('"');
    }

    fn value(&mut self, j: &J, out: &mut String) {
        self.space(out);
        match j {
            J::Null => out.push_str("null"),
            J::Bool(b) => out.push_str(&b.to_string()),
            J::Num(n) => out.push_str(n),
            J::Str(s) => self.string(s, out),
            J::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    self.value(item, out);
                }
                self.space(out);
                out.push(']');
            }
            J::Obj(members) => {
                let mut members: Vec<_> = members.iter().collect();
                self.0.shuffle(&mut members);
                self.object(&members, out);
            }
        }
        self.space(out);
    }

    fn object(&mut self, members: &[(&String, &J)], out: &mut String) {
        out.push('{');
        for (i, (k, v)) in members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            self.space(out);
            self.string(k, out);
            self.space(out);
            out.push(':');
            self.value(v, out);
        }
        self.space(out);
        out.push('}');
    }
}

fn noisy(j: &J, seed: u64) -> String {
    let mut out = String::new();
    Noisy(fastrand::Rng::with_seed(seed)).value(j, &mut out);
    out
}

/// Every JSON pointer into `j` with the value it names.
fn paths<'j>(j: &'j J, at: String, all: &mut Vec<(String, &'j J)>) {
    match j {
        J::Arr(items) => {
            for (i, item) in items.iter().enumerate() {
                paths(item, format!("{at}/{i}"), all);
            }
        }
        J::Obj(members) => {
            for (k, v) in members {
                let token = k.replace('~', "~0").replace('/', "~1");
                paths(v, format!("{at}/{token}"), all);
            }
        }
        _ => {}
    }
    all.push((at, j));
}

proptest! {

    #![proptest_config(crate::test_cases::cases(256))]
    #[test]
    fn any_rendering_of_a_value_has_its_canonical_text(j in tree(), seed in any::<u64>()) {
        let text = noisy(&j, seed);
        prop_assert_eq!(canonical(&text), Ok(expected(&j)), "{}", text);
    }

    #[test]
    fn equal_values_and_only_they_have_one_canonical_text(
        a in tree(),
        b in tree(),
        same in any::<bool>(),
        seeds in any::<(u64, u64)>(),
    ) {
        let b = if same { a.clone() } else { b };
        let (ca, cb) = (canonical(&noisy(&a, seeds.0)), canonical(&noisy(&b, seeds.1)));
        prop_assert!(ca.is_ok() && cb.is_ok());
        prop_assert_eq!(a == b, ca == cb, "{:?} / {:?}", ca, cb);
    }

    #[test]
    fn canonical_text_is_its_own_canonical_text(j in tree(), seed in any::<u64>()) {
        let once = canonical(&noisy(&j, seed)).expect("valid");
        prop_assert_eq!(canonical(&once), Ok(once.clone()));
    }

    #[test]
    fn numbers_come_back_as_sent(n in number(), seed in any::<u64>()) {
        let j = J::Obj(BTreeMap::from([("n".to_owned(), J::Arr(vec![J::Num(n.clone())]))]));
        prop_assert_eq!(canonical(&noisy(&j, seed)), Ok(format!("{{\"n\":[{n}]}}")));
    }

    #[test]
    fn a_key_sent_twice_is_refused(
        members in proptest::collection::btree_map(text(), tree(), 1..5),
        twice in any::<prop::sample::Index>(),
        seed in any::<u64>(),
    ) {
        let mut listed: Vec<(&String, &J)> = members.iter().collect();
        listed.push(listed[twice.index(listed.len())]);
        let mut noise = Noisy(fastrand::Rng::with_seed(seed));
        noise.0.shuffle(&mut listed);
        let mut text = String::new();
        noise.object(&listed, &mut text);
        prop_assert!(canonical(&text).is_err(), "{}", text);
        prop_assert!(canonical(&format!("[{text}]")).is_err(), "{}", text);
        prop_assert!(canonical_members(&text).is_err(), "{}", text);
    }

    #[test]
    fn pointers_name_the_canonical_text_of_their_value(j in tree(), seed in any::<u64>()) {
        let text = canonical(&noisy(&j, seed)).expect("valid");
        let mut all = Vec::new();
        paths(&j, String::new(), &mut all);
        for (path, value) in all {
            let want = expected(value);
            prop_assert_eq!(pointer(&text, &path), Some(want.as_str()), "{}", path);
        }
    }
}
