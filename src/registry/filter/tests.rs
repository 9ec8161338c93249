//! Every operator, the missing-key rules, validation, and two properties: a
//! filter never panics on any JSON, and `$not` of a filter is its complement.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn event(payload: Value) -> Value {
    json!({"event_type": "order.created", "source": "shop", "payload": payload})
}

fn check(filter: Value, payload: Value) -> bool {
    Filter::compile(&filter)
        .expect("valid")
        .matches(&event(payload))
}

#[test]
fn values_and_objects_match_by_equality_and_every_key() {
    assert!(check(json!({"event_type": "order.created"}), json!({})));
    assert!(!check(json!({"event_type": "order.paid"}), json!({})));
    assert!(check(
        json!({"payload": {"a": 1, "b": "x"}}),
        json!({"a": 1.0, "b": "x", "c": 3})
    ));
    assert!(!check(
        json!({"payload": {"a": 1, "b": "y"}}),
        json!({"a": 1, "b": "x"})
    ));
    assert!(
        !check(json!({"payload": {"a": "1"}}), json!({"a": 1})),
        "same type only"
    );
    assert!(check(
        json!({"payload": {"tags": ["a", "b"]}}),
        json!({"tags": ["a", "b"]})
    ));
    assert!(!check(
        json!({"payload": {"tags": ["a"]}}),
        json!({"tags": ["a", "b"]})
    ));
    assert!(check(json!({"payload": {"n": null}}), json!({"n": null})));
    assert!(
        !check(json!({"payload": {"n": null}}), json!({})),
        "missing is not null"
    );
    assert!(
        check(json!({}), json!({})),
        "the empty filter matches everything"
    );
}

#[test]
fn each_operator() {
    let p = json!({"total": 150, "cur": "EUR", "name": "order-42", "big": 12345678901234567890u64});
    let yes = [
        json!({"payload": {"total": {"$eq": 150}}}),
        json!({"payload": {"total": {"$neq": 151}}}),
        json!({"payload": {"total": {"$gt": 100}}}),
        json!({"payload": {"total": {"$gte": 150}}}),
        json!({"payload": {"total": {"$lt": 150.5}}}),
        json!({"payload": {"total": {"$lte": 150}}}),
        json!({"payload": {"cur": {"$gt": "DKK"}}}),
        json!({"payload": {"cur": {"$in": ["USD", "EUR"]}}}),
        json!({"payload": {"cur": {"$nin": ["USD", "GBP"]}}}),
        json!({"payload": {"name": {"$startsWith": "order-"}}}),
        json!({"payload": {"name": {"$endsWith": "-42"}}}),
        json!({"payload": {"name": {"$exist": true}}}),
        json!({"payload": {"nope": {"$exist": false}}}),
        json!({"payload": {"big": {"$gt": 12345678901234567889u64}}}),
        json!({"$or": [{"payload": {"cur": "USD"}}, {"payload": {"total": {"$gt": 100}}}]}),
        json!({"$and": [{"payload": {"cur": "EUR"}}, {"source": "shop"}]}),
        json!({"$not": {"payload": {"cur": "USD"}}}),
        json!({"payload": {"total": {"$gt": 100, "$lt": 200}}}),
    ];
    for f in yes {
        assert!(check(f.clone(), p.clone()), "{f}");
    }
    let no = [
        json!({"payload": {"total": {"$eq": 151}}}),
        json!({"payload": {"total": {"$gt": 150}}}),
        json!({"payload": {"total": {"$lt": 150}}}),
        json!({"payload": {"total": {"$gt": "100"}}}),
        json!({"payload": {"cur": {"$in": ["USD"]}}}),
        json!({"payload": {"cur": {"$nin": ["EUR"]}}}),
        json!({"payload": {"total": {"$startsWith": "1"}}}),
        json!({"payload": {"name": {"$exist": false}}}),
        json!({"$or": [{"payload": {"cur": "USD"}}, {"source": "other"}]}),
        json!({"$and": [{"payload": {"cur": "EUR"}}, {"source": "other"}]}),
        json!({"$not": {"payload": {"cur": "EUR"}}}),
    ];
    for f in no {
        assert!(!check(f.clone(), p.clone()), "{f}");
    }
}

#[test]
fn a_missing_key_matches_only_exist_false_and_neq() {
    for (f, expected) in [
        (json!({"$eq": 1}), false),
        (json!({"$neq": 1}), true),
        (json!({"$gt": 1}), false),
        (json!({"$lt": 1}), false),
        (json!({"$in": [1]}), false),
        (json!({"$nin": [1]}), false),
        (json!({"$startsWith": ""}), false),
        (json!({"$exist": true}), false),
        (json!({"$exist": false}), true),
        (json!(1), false),
        (json!({"inner": 1}), false),
    ] {
        assert_eq!(
            check(json!({"payload": {"gone": f.clone()}}), json!({})),
            expected,
            "{f}"
        );
    }
}

#[test]
fn invalid_filters_say_where_and_why() {
    for (f, at) in [
        (json!([1]), "filter"),
        (
            json!({"payload": {"t": {"$bigger": 1}}}),
            "payload.t.$bigger",
        ),
        (json!({"payload": {"t": {"$in": 1}}}), "payload.t.$in"),
        (json!({"payload": {"t": {"$gt": true}}}), "payload.t.$gt"),
        (json!({"t": {"$startsWith": 1}}), "t.$startsWith"),
        (json!({"t": {"$exist": "yes"}}), "t.$exist"),
        (json!({"$or": []}), "$or"),
        (json!({"$and": {"a": 1}}), "$and"),
        (json!({"$or": [{"a": {"$nope": 1}}]}), "$or[0].a.$nope"),
    ] {
        let e = Filter::compile(&f).expect_err(&f.to_string());
        assert_eq!(e.at, at, "{f}: {e}");
    }
    let mut deep = json!(1);
    for _ in 0..40 {
        deep = json!({"$not": deep});
    }
    assert!(Filter::compile(&deep).unwrap_err().why.contains("deeper"));
    assert!(Filter::parse("{not json").is_err());
    assert!(Filter::parse(r#"{"event_type": "a"}"#).is_ok());
}

/// Any JSON value, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "[a-z$]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z$]{1,5}|\\$(eq|neq|gt|in|not|or|exist)", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(crate::test_cases::cases(512))]

    /// Compiling any JSON either fails with an error or gives a filter; matching
    /// any event never panics, and `$not` of a filter is its complement.
    #[test]
    fn never_panics_and_not_is_the_complement(filter in any_json(), payload in any_json()) {
        let event = event(payload);
        if let Ok(f) = Filter::compile(&filter) {
            let negated = Filter::compile(&json!({"$not": filter})).expect("its negation compiles");
            prop_assert_eq!(negated.matches(&event), !f.matches(&event));
        }
    }
}
