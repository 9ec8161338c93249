//! The sandbox's promises, each tried: limits enforced by the engine (and the
//! runtime replaced, so the next run works), no I/O, errors with their line.

use std::time::Instant;

use serde_json::json;

use super::*;

fn compile(source: &str) -> Transform {
    Transform::compile("t.js", source).expect("compiles")
}

#[test]
fn a_transform_reshapes_and_keeps_what_it_does_not_touch() {
    let t = compile(
        "function handler(w) { w.payload = {sum: w.payload.a + w.payload.b, big: w.payload.n}; \
         w.headers['x-total'] = String(w.payload.sum); return w; }",
    );
    let out = t
        .run(&json!({"payload": {"a": 1, "b": 2.5, "n": 10}, "headers": {}, "url": "u"}))
        .expect("runs");
    assert_eq!(
        out,
        json!({"payload": {"sum": 3.5, "big": 10}, "headers": {"x-total": "3.5"}, "url": "u"})
    );
}

#[test]
fn an_endless_loop_is_stopped_within_the_limit_and_the_next_run_works() {
    let t = compile("function handler(w) { if (w.spin) { while (true) {} } return w; }");
    let started = Instant::now();
    assert_eq!(t.run(&json!({"spin": true})), Err(TransformError::Timeout));
    let took = started.elapsed();
    assert!(took < TIME_LIMIT * 3, "stopped after {took:?}");
    assert_eq!(t.run(&json!({"spin": false})), Ok(json!({"spin": false})));
}

#[test]
fn a_huge_allocation_is_stopped_and_the_next_run_works() {
    // Growth by 1 MB buffers: the limit is reached in 16 steps, well inside the
    // time limit even on a loaded machine (1 MB `repeat`s, built a character at a
    // time, ran past it in a debug build on a busy CI machine).
    let t = compile(
        "function handler(w) { if (w.grow) { const a = []; \
         for (;;) { a.push(new ArrayBuffer(1 << 20)); } } return w; }",
    );
    assert_eq!(t.run(&json!({"grow": true})), Err(TransformError::Memory));
    let t2 = compile(
        "function handler(w) { if (w.grow) { new Array(100 * 1024 * 1024).fill(1); } return w; }",
    );
    assert_eq!(t2.run(&json!({"grow": true})), Err(TransformError::Memory));
    assert_eq!(t.run(&json!({"grow": false})), Ok(json!({"grow": false})));
}

#[test]
fn there_is_no_io_no_timers_no_network() {
    let t = compile(
        "function handler(w) { return {types: [typeof fetch, typeof require, typeof setTimeout, \
         typeof XMLHttpRequest, typeof process, typeof std, typeof os]}; }",
    );
    let out = t.run(&json!({})).expect("runs");
    assert_eq!(out["types"], json!(vec!["undefined"; 7]));
    let calls = compile("function handler(w) { fetch('http://127.0.0.1:1/'); return w; }");
    assert!(matches!(calls.run(&json!({})), Err(TransformError::Threw(m)) if m.contains("fetch")));
}

#[test]
fn throws_and_bad_answers_are_errors_with_their_message() {
    let t = compile("function handler(w) {\n  throw new Error('no refunds here');\n}");
    match t.run(&json!({})) {
        Err(TransformError::Threw(m)) => {
            assert!(m.contains("no refunds here") && m.contains("line 2"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    for source in [
        "function handler(w) { return 3; }",
        "function handler(w) { return [w]; }",
        "function handler(w) {}",
    ] {
        assert!(
            matches!(
                compile(source).run(&json!({})),
                Err(TransformError::Answer(_))
            ),
            "{source}"
        );
    }
}

#[test]
fn compile_errors_name_the_file_and_line() {
    let e =
        Transform::compile("billing.js", "function handler(w) {\n  return w +;\n}").unwrap_err();
    let TransformError::Compile(m) = e else {
        panic!("{e:?}")
    };
    assert!(m.starts_with("billing.js: ") && m.contains("line 2"), "{m}");
    let none = Transform::compile("x.js", "const y = 1;").unwrap_err();
    assert!(none.to_string().contains("handler"), "{none}");
    assert!(Transform::compile("big.js", &"x".repeat(MAX_SOURCE_BYTES + 1)).is_err());
}

#[test]
fn runs_on_several_threads_at_once() {
    let t = std::sync::Arc::new(compile("function handler(w) { w.n = w.n * 2; return w; }"));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let t = t.clone();
            std::thread::spawn(move || {
                (0..200).all(|n| t.run(&json!({"n": n + i})) == Ok(json!({"n": (n + i) * 2})))
            })
        })
        .collect();
    assert!(threads.into_iter().all(|h| h.join().expect("thread")));
}
