//! Filters (SPEC §12): a JSON document that decides whether a handler gets an
//! event, matched against `{"event_type", "source", "payload"}` when the event is
//! routed.
//!
//! A value matches an equal value (same-type JSON equality; numbers by value); an
//! object matches when every key matches — a plain key descends into the field of
//! that name, a `$` key is an operator on the value at hand: `$eq`, `$neq`, `$gt`,
//! `$gte`, `$lt`, `$lte` (numbers with numbers, strings with strings), `$in` and
//! `$nin` (a list), `$startsWith` and `$endsWith` (strings), `$exist` (true or
//! false), `$or` and `$and` (lists of filters) and `$not` (a filter). A missing key
//! matches only `$exist: false` and `$neq` (and what `$not` makes of them).
//!
//! A filter is compiled once ([`Filter::compile`]: validated, keys split, lists
//! kept as vectors), then evaluated per event without allocating.
//!
//! ```
//! use hookbox::registry::filter::Filter;
//! use serde_json::json;
//!
//! let big = Filter::compile(&json!({
//!     "event_type": {"$startsWith": "order."},
//!     "payload": {"total": {"$gt": 100}, "currency": {"$in": ["EUR", "USD"]}}
//! })).unwrap();
//! let event = json!({"event_type": "order.created", "source": null,
//!                    "payload": {"total": 250, "currency": "EUR"}});
//! assert!(big.matches(&event));
//! assert!(!big.matches(&json!({"event_type": "order.created", "payload": {"total": 5}})));
//! assert!(Filter::compile(&json!({"total": {"$bigger": 1}})).is_err());
//! ```

use std::cmp::Ordering;

use serde_json::Value;

/// How deep a filter may nest (objects and operators).
const MAX_DEPTH: usize = 32;
/// How many rules one filter may hold.
const MAX_RULES: usize = 1024;

/// Why a filter was refused: where in it, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {why}")]
pub struct FilterError {
    /// The path to the offending part (`payload.total.$gt`), or `filter`.
    pub at: String,
    /// What is wrong.
    pub why: String,
}

/// A compiled filter.
#[derive(Debug, Clone, PartialEq)]
pub struct Filter {
    rule: Rule,
    /// As written (for listings).
    source: Value,
}

/// One compiled rule, evaluated against the value at hand (`None`: missing).
#[derive(Debug, Clone, PartialEq)]
enum Rule {
    /// Every rule holds (an object's keys, `$and`).
    All(Vec<Rule>),
    /// Some rule holds (`$or`).
    Any(Vec<Rule>),
    /// The rule does not hold.
    Not(Box<Rule>),
    /// The rule holds for the field of this name.
    Field(String, Box<Rule>),
    /// Equal to the value.
    Eq(Value),
    /// Not equal (a missing value is not equal).
    Neq(Value),
    /// Ordered against the value as one of these.
    Compare(Value, [Ordering; 2]),
    /// Equal to one of them.
    In(Vec<Value>),
    /// Present and equal to none of them.
    Nin(Vec<Value>),
    /// A string starting with this.
    StartsWith(String),
    /// A string ending with this.
    EndsWith(String),
    /// Present (true) or missing (false).
    Exist(bool),
}

impl Filter {
    /// Validates and compiles `filter` (a JSON object).
    pub fn compile(filter: &Value) -> Result<Self, FilterError> {
        if !filter.is_object() {
            return Err(FilterError {
                at: "filter".into(),
                why: "must be a JSON object".into(),
            });
        }
        let mut budget = MAX_RULES;
        let rule = compile(filter, "", 0, &mut budget)?;
        Ok(Self {
            rule,
            source: filter.clone(),
        })
    }

    /// Parses and compiles a filter written as JSON text.
    pub fn parse(text: &str) -> Result<Self, FilterError> {
        let value: Value = serde_json::from_str(text).map_err(|e| FilterError {
            at: "filter".into(),
            why: format!("not JSON: {e}"),
        })?;
        Self::compile(&value)
    }

    /// Whether `event` (`{"event_type", "source", "payload"}`) matches.
    pub fn matches(&self, event: &Value) -> bool {
        self.rule.eval(Some(event))
    }

    /// The filter as written.
    pub fn as_json(&self) -> &Value {
        &self.source
    }
}

/// What a filter is matched against: `{"event_type", "source", "payload"}` (a
/// payload that is not JSON — it always is, from intake — as `null`).
pub fn document(event_type: &str, source: Option<&str>, payload: &str) -> Value {
    let payload = serde_json::from_str(payload).unwrap_or(Value::Null);
    serde_json::json!({ "event_type": event_type, "source": source, "payload": payload })
}

fn err(at: &str, why: impl Into<String>) -> FilterError {
    FilterError {
        at: if at.is_empty() {
            "filter".into()
        } else {
            at.to_owned()
        },
        why: why.into(),
    }
}

fn join(at: &str, key: &str) -> String {
    if at.is_empty() {
        key.to_owned()
    } else {
        format!("{at}.{key}")
    }
}

/// Compiles `pattern` found at `at`.
fn compile(
    pattern: &Value,
    at: &str,
    depth: usize,
    budget: &mut usize,
) -> Result<Rule, FilterError> {
    if depth > MAX_DEPTH {
        return Err(err(at, format!("nested deeper than {MAX_DEPTH}")));
    }
    *budget = budget
        .checked_sub(1)
        .ok_or_else(|| err(at, format!("more than {MAX_RULES} rules")))?;
    let Value::Object(map) = pattern else {
        return Ok(Rule::Eq(pattern.clone()));
    };
    let mut rules = Vec::with_capacity(map.len());
    for (key, arg) in map {
        let here = join(at, key);
        let rule = match key.strip_prefix('$') {
            None => Rule::Field(
                key.clone(),
                Box::new(compile(arg, &here, depth + 1, budget)?),
            ),
            Some(op) => operator(op, arg, &here, depth, budget)?,
        };
        rules.push(rule);
    }
    Ok(match rules.len() {
        1 => rules.pop().unwrap_or(Rule::All(Vec::new())),
        _ => Rule::All(rules),
    })
}

/// Compiles operator `$op` with its argument.
fn operator(
    op: &str,
    arg: &Value,
    at: &str,
    depth: usize,
    budget: &mut usize,
) -> Result<Rule, FilterError> {
    let list = |arg: &Value| -> Result<Vec<Value>, FilterError> {
        arg.as_array()
            .cloned()
            .ok_or_else(|| err(at, "takes a list"))
    };
    let text = |arg: &Value| -> Result<String, FilterError> {
        arg.as_str()
            .map(str::to_owned)
            .ok_or_else(|| err(at, "takes a string"))
    };
    let filters = |arg: &Value, budget: &mut usize| -> Result<Vec<Rule>, FilterError> {
        let items = arg
            .as_array()
            .filter(|a| !a.is_empty())
            .ok_or_else(|| err(at, "takes a non-empty list of filters"))?;
        items
            .iter()
            .enumerate()
            .map(|(i, f)| compile(f, &format!("{at}[{i}]"), depth + 1, budget))
            .collect()
    };
    let bound = |arg: &Value, ways: [Ordering; 2]| -> Result<Rule, FilterError> {
        match arg {
            Value::Number(_) | Value::String(_) => Ok(Rule::Compare(arg.clone(), ways)),
            _ => Err(err(at, "takes a number or a string")),
        }
    };
    use Ordering::{Equal, Greater, Less};
    Ok(match op {
        "eq" => Rule::Eq(arg.clone()),
        "neq" => Rule::Neq(arg.clone()),
        "gt" => bound(arg, [Greater, Greater])?,
        "gte" => bound(arg, [Greater, Equal])?,
        "lt" => bound(arg, [Less, Less])?,
        "lte" => bound(arg, [Less, Equal])?,
        "in" => Rule::In(list(arg)?),
        "nin" => Rule::Nin(list(arg)?),
        "startsWith" => Rule::StartsWith(text(arg)?),
        "endsWith" => Rule::EndsWith(text(arg)?),
        "exist" => Rule::Exist(
            arg.as_bool()
                .ok_or_else(|| err(at, "takes true or false"))?,
        ),
        "or" => Rule::Any(filters(arg, budget)?),
        "and" => Rule::All(filters(arg, budget)?),
        "not" => Rule::Not(Box::new(compile(arg, at, depth + 1, budget)?)),
        other => {
            return Err(err(
                at,
                format!(
                    "unknown operator ${other} (known: $eq $neq $gt $gte $lt $lte $in $nin \
                     $startsWith $endsWith $exist $or $and $not)"
                ),
            ));
        }
    })
}

impl Rule {
    fn eval(&self, value: Option<&Value>) -> bool {
        match self {
            Self::All(rules) => rules.iter().all(|r| r.eval(value)),
            Self::Any(rules) => rules.iter().any(|r| r.eval(value)),
            Self::Not(rule) => !rule.eval(value),
            Self::Field(key, rule) => rule.eval(value.and_then(|v| v.get(key.as_str()))),
            Self::Eq(want) => value.is_some_and(|v| same(v, want)),
            Self::Neq(want) => !value.is_some_and(|v| same(v, want)),
            Self::Compare(bound, ways) => value
                .and_then(|v| order(v, bound))
                .is_some_and(|o| ways.contains(&o)),
            Self::In(list) => value.is_some_and(|v| list.iter().any(|w| same(v, w))),
            Self::Nin(list) => value.is_some_and(|v| !list.iter().any(|w| same(v, w))),
            Self::StartsWith(p) => value
                .and_then(Value::as_str)
                .is_some_and(|s| s.starts_with(p.as_str())),
            Self::EndsWith(p) => value
                .and_then(Value::as_str)
                .is_some_and(|s| s.ends_with(p.as_str())),
            Self::Exist(present) => value.is_some() == *present,
        }
    }
}

/// Same-type JSON equality, numbers by value (`1` equals `1.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(_), Value::Number(_)) => order(a, b) == Some(Ordering::Equal),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// The order of two numbers or two strings; `None` for other pairs.
fn order(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => Some(x.cmp(&y)),
            _ => match (x.as_u64(), y.as_u64()) {
                (Some(x), Some(y)) => Some(x.cmp(&y)),
                _ => x.as_f64()?.partial_cmp(&y.as_f64()?),
            },
        },
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
