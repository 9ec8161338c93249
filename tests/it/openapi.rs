//! The OpenAPI document (docs/api.md, "The OpenAPI document") against the running
//! binary: `GET /openapi.json` is open, is OpenAPI 3.1, is what `hookbox openapi`
//! prints, and every operation it names is served. (The other direction, every
//! route of the router being in the document, is `api::routes::tests`, which walks
//! the router itself.)

use serde_json::Value;

use crate::harness::Hookbox;

const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// A request path for a documented path: `{id}` a UUID, other parameters a name.
fn concrete(path: &str) -> String {
    path.split('/')
        .map(|segment| match segment {
            "{id}" => "00000000-0000-7000-8000-000000000000",
            s if s.starts_with('{') => "nobody",
            s => s,
        })
        .collect::<Vec<_>>()
        .join("/")
}

#[test]
fn the_served_document_is_the_printed_one_and_every_operation_in_it_is_served() {
    let hb = Hookbox::start(&[("ADMIN_TOKEN", "an-admin-token-of-32-characters!")]);
    let served = hb.get("/openapi.json").expect("get");
    assert_eq!(
        served.status, 200,
        "open, even with an admin token: {}",
        served.text
    );
    assert_eq!(served.header("content-type"), Some("application/json"));
    let doc = served.json();
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        doc["openapi"]
    );

    let printed = crate::harness::hookbox_in(crate::harness::new_dir().path())
        .arg("openapi")
        .env("WORKER_COUNT", "not a number") // needs no (valid) configuration
        .output()
        .expect("hookbox openapi");
    assert!(printed.status.success(), "{printed:?}");
    let printed: Value = serde_json::from_slice(&printed.stdout).expect("JSON on stdout");
    assert_eq!(
        printed, doc,
        "hookbox openapi prints what GET /openapi.json serves"
    );

    let paths = doc["paths"].as_object().expect("paths");
    for path in [
        "/webhooks",
        "/webhooks/{id}",
        "/webhooks/{id}/attempts",
        "/webhooks/{id}/replay",
        "/dead-letters",
        "/dead-letters/replay",
        "/subscribers",
        "/subscribers/{name}",
        "/ingest/{name}",
        "/sources",
        "/sources/{name}/rejected",
        "/health",
        "/ready",
        "/metrics",
        "/openapi.json",
    ] {
        assert!(paths.contains_key(path), "{path} is not in the document");
    }
    // Every operation reaches a handler of the running binary: with the admin
    // token, none answers 405 or the router's "route not found".
    let mut operations = 0;
    for (path, item) in paths {
        for method in METHODS {
            if item.get(method).is_none() {
                continue;
            }
            operations += 1;
            let r = hb.call(
                &method.to_uppercase(),
                &concrete(path),
                None,
                &[("Authorization", "Bearer an-admin-token-of-32-characters!")],
            );
            assert_ne!(r.status, 405, "{method} {path}: {}", r.text);
            if r.status == 404 {
                assert_ne!(r.json()["detail"], "route not found", "{method} {path}");
            }
        }
    }
    assert!(operations >= 19, "{operations} operations");

    // Admin routes say they need the token; the attempts' schema is the model's.
    let security = &doc["paths"]["/dead-letters"]["get"]["security"];
    assert_eq!(
        security[0]["admin_token"],
        serde_json::json!([]),
        "{security}"
    );
    assert!(doc["paths"]["/webhooks/{id}/attempts"]["get"]["security"].is_null());
    let attempt = &doc["components"]["schemas"]["Attempt"]["properties"];
    for field in [
        "handler",
        "attempt",
        "started_at",
        "duration_ms",
        "outcome",
        "response_status",
        "response_body",
        "error",
    ] {
        assert!(attempt.get(field).is_some(), "Attempt.{field}: {attempt}");
    }
    let outcomes = &doc["components"]["schemas"]["AttemptOutcome"]["enum"];
    assert_eq!(
        outcomes,
        &serde_json::json!(["completed", "retry", "dead_letter", "cancelled"])
    );
}
