//! Sources (push webhooks as providers send them): manifests and `sources check`.

/// Every shipped example manifest, with its secrets set.
const EXAMPLE_SECRETS: &[(&str, &str)] = &[
    ("GITHUB_WEBHOOK_SECRET", "gh-secret-value-1"),
    ("STRIPE_WEBHOOK_SECRET", "whsec_stripe-secret-value"),
    ("SHOPIFY_WEBHOOK_SECRET", "shopify-secret-value"),
    ("SLACK_SIGNING_SECRET", "slack-secret-value"),
    (
        "PARTNER_WEBHOOK_SECRET",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    ),
    ("ACME_WEBHOOK_SECRET", "acme-secret-value"),
    ("LEGACY_WEBHOOK_TOKEN", "legacy-token-value"),
    ("LEDGER_API_AUTH", "Bearer ledger-token-value"),
    ("GITLAB_WEBHOOK_SECRET", "gitlab-secret-value"),
    (
        "DISCORD_WEBHOOK_SECRET",
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
    ),
    (
        "SENDGRID_WEBHOOK_SECRET",
        "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEyRvfcaVZvCVAm3S5fp2kg5wKjE0e4DZawSSRTVUkKf/xXUIAIZpE3Dvw8YCoS6BmNgZ3HjS1ZRJ33UFddOjaPA==",
    ),
    ("TWILIO_WEBHOOK_SECRET", "twilio-secret-value"),
    ("MAILGUN_WEBHOOK_SECRET", "mailgun-secret-value"),
    ("META_VERIFY_TOKEN", "meta-verify-value"),
    ("INTERCOM_WEBHOOK_SECRET", "intercom-secret-value"),
    ("META_WEBHOOK_SECRET", "meta-secret-value"),
    ("PADDLE_WEBHOOK_SECRET", "paddle-secret-value"),
    ("ZOOM_WEBHOOK_SECRET", "zoom-secret-value"),
    ("LINEAR_WEBHOOK_SECRET", "linear-secret-value"),
    ("ZENDESK_WEBHOOK_SECRET", "zendesk-secret-value"),
    ("TYPEFORM_WEBHOOK_SECRET", "typeform-secret-value"),
    ("CALENDLY_WEBHOOK_SECRET", "calendly-secret-value"),
    ("WORKOS_WEBHOOK_SECRET", "workos-secret-value"),
    ("VERCEL_WEBHOOK_SECRET", "vercel-secret-value"),
    ("BITBUCKET_WEBHOOK_SECRET", "bitbucket-secret-value"),
    ("JIRA_WEBHOOK_SECRET", "jira-secret-value"),
    ("WOOCOMMERCE_WEBHOOK_SECRET", "woocommerce-secret-value"),
    ("SENTRY_WEBHOOK_SECRET", "sentry-secret-value"),
    ("PAGERDUTY_WEBHOOK_SECRET", "pagerduty-secret-value"),
    ("HUBSPOT_WEBHOOK_SECRET", "hubspot-secret-value"),
    ("SQUARE_WEBHOOK_SECRET", "square-secret-value"),
];

fn check(dir: &std::path::Path, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = crate::harness::hookbox_in(crate::harness::new_dir().path())
        .args(["sources", "check"])
        .arg(dir)
        .envs(env.iter().copied())
        .output()
        .expect("run");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn examples() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sources/examples")
}

/// `sources check DIR` does what `handlers check DIR` does (SPEC §1): a folder
/// that does not exist is an error that names it, not "0 sources".
#[test]
fn check_of_a_folder_that_does_not_exist_fails_and_says_so() {
    let out = crate::harness::hookbox_in(crate::harness::new_dir().path())
        .args(["sources", "check", "typo-dir"])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("typo-dir") && stderr.contains("no such folder"),
        "{stderr}"
    );
}

#[test]
fn check_lists_every_shipped_example_without_its_secrets() {
    let (code, out) = check(&examples(), EXAMPLE_SECRETS);
    assert_eq!(code, Some(0), "{out}");
    for (name, path) in [
        ("github", "/ingest/github"),
        ("stripe", "/ingest/stripe"),
        ("partner", "/ingest/partner"),
        ("intranet", "/ingest/intranet"),
        ("paddle", "/ingest/paddle"),
        ("hubspot", "/ingest/hubspot"),
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(name) && l.contains(path)),
            "{name}: {out}"
        );
    }
    assert!(out.contains("32 source(s)"), "{out}");
    for (_, secret) in EXAMPLE_SECRETS {
        assert!(!out.contains(secret), "a secret was printed: {out}");
    }
}

#[test]
fn check_names_file_and_field_of_each_problem() {
    let (code, out) = check(&examples(), &EXAMPLE_SECRETS[1..]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.lines()
            .any(|l| l.contains("github.toml: secret_env:") && l.contains("GITHUB_WEBHOOK_SECRET")),
        "{out}"
    );
    assert!(out.contains("1 error(s)"), "{out}");
}

/// Without a folder named, a missing `SOURCES_DIR` is checked as the service
/// reads it: no sources (a folder named on the command line that does not
/// exist is an error: `check_of_a_folder_that_does_not_exist_fails_and_says_so`).
#[test]
fn a_missing_sources_dir_has_no_sources() {
    let dir = crate::harness::new_dir();
    let out = crate::harness::hookbox_in(dir.path())
        .args(["sources", "check"])
        .env("SOURCES_DIR", dir.path().join("nope"))
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("0 source(s)"), "{stdout}");
}

// ---------------------------------------------------------------------------
// POST /ingest/{name} on the real binary. Every signature below is computed here,
// with the hmac/sha2/base64 crates used by hand — never with hookbox's verifiers.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use crate::harness::{Db, Hookbox, Reply, new_dir, on_both_backends, write};

/// Each kind's secrets: the old one and the new one (rotation: requests are signed
/// with the second), and one the source does not know.
const OLD: &str = "old-secret-aaaa-1111";
const NEW: &str = "new-secret-bbbb-2222";
const WRONG: &str = "wrong-secret-cccc-3333";
/// Standard Webhooks keys are `whsec_` + base64.
const WH_OLD: &str = "whsec_b2xkLXdlYmhvb2stc2lnbmluZy1rZXktbnVtYmVyLW9uZQ==";
const WH_NEW: &str = "whsec_bmV3LXdlYmhvb2stc2lnbmluZy1rZXktbnVtYmVyLXR3bw==";
const WH_WRONG: &str = "whsec_d3Jvbmctd2ViaG9vay1zaWduaW5nLWtleS1udW1iZXItMw==";

fn hmac256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// One request as a provider would send it.
struct Signed {
    headers: Vec<(String, String)>,
    body: String,
    content_type: &'static str,
}

/// The manifests of one source per kind, all named after their kind, and the
/// environment holding their secrets (old and new).
fn manifests(dir: &std::path::Path) -> Vec<(&'static str, String)> {
    let m = [
        (
            "github",
            "kind = \"github\"\nsecret_env = \"GH\"\nevent_type_prefix = \"github.\"",
        ),
        ("stripe", "kind = \"stripe\"\nsecret_env = \"STRIPE\""),
        ("shopify", "kind = \"shopify\"\nsecret_env = \"SHOPIFY\""),
        ("slack", "kind = \"slack\"\nsecret_env = \"SLACK\""),
        ("sw", "kind = \"standard-webhooks\"\nsecret_env = \"SW\""),
        // A Svix-based sender (Clerk, Resend…): the same scheme under svix-* headers.
        ("svix", "kind = \"standard-webhooks\"\nsecret_env = \"SW\""),
        (
            "acme",
            "kind = \"hmac\"\nsecret_env = \"ACME\"\n[hmac]\nheader = \"X-Signature\"\nprefix = \"sha256=\"\nid = \"header:X-Delivery\"",
        ),
        ("tok", "kind = \"token\"\nsecret_env = \"TOK\""),
        ("lan", "kind = \"none\""),
    ];
    for (name, text) in m {
        write(dir, &format!("sources/{name}.toml"), text);
    }
    let pair = format!("{OLD} {NEW}");
    let wh = format!("{WH_OLD} {WH_NEW}");
    ["GH", "STRIPE", "SHOPIFY", "SLACK", "ACME", "TOK"]
        .into_iter()
        .map(|v| (v, pair.clone()))
        .chain([("SW", wh)])
        .collect()
}

fn start(db: &Db, extra: &[(&str, &str)]) -> Hookbox {
    let dir = new_dir();
    let secrets = manifests(dir.path());
    let sources_dir = dir.path().join("sources");
    let sources_dir = sources_dir.to_str().unwrap().to_owned();
    let mut env: Vec<(&str, &str)> = secrets.iter().map(|(k, v)| (*k, v.as_str())).collect();
    env.push(("SOURCES_DIR", &sources_dir));
    env.extend_from_slice(extra);
    Hookbox::restart(dir.clone(), &db.env(&env))
}

/// A request for `kind`, signed with `secret` at time `ts`, carrying delivery `id`.
fn sign(kind: &str, secret: &str, ts: i64, id: &str, body: &str) -> Signed {
    let b = body.as_bytes();
    let h = |pairs: &[(&str, String)]| {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect::<Vec<_>>()
    };
    let headers = match kind {
        "github" => h(&[
            ("X-GitHub-Event", "push".into()),
            ("X-GitHub-Delivery", id.into()),
            (
                "X-Hub-Signature-256",
                format!("sha256={}", hex(&hmac256(secret.as_bytes(), &[b]))),
            ),
        ]),
        "stripe" => {
            let sig = hex(&hmac256(
                secret.as_bytes(),
                &[ts.to_string().as_bytes(), b".", b],
            ));
            h(&[("Stripe-Signature", format!("t={ts},v1={sig},v0=00"))])
        }
        "shopify" => h(&[
            ("X-Shopify-Topic", "orders/create".into()),
            ("X-Shopify-Webhook-Id", id.into()),
            (
                "X-Shopify-Hmac-Sha256",
                B64.encode(hmac256(secret.as_bytes(), &[b])),
            ),
        ]),
        "slack" => {
            let base = format!("v0:{ts}:");
            let sig = hex(&hmac256(secret.as_bytes(), &[base.as_bytes(), b]));
            h(&[
                ("X-Slack-Request-Timestamp", ts.to_string()),
                ("X-Slack-Signature", format!("v0={sig}")),
            ])
        }
        "sw" | "svix" => {
            let key = B64.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
            let signed = format!("{id}.{ts}.");
            let sig = B64.encode(hmac256(&key, &[signed.as_bytes(), b]));
            let family = if kind == "svix" { "svix" } else { "webhook" };
            h(&[
                (&format!("{family}-id"), id.into()),
                (&format!("{family}-timestamp"), ts.to_string()),
                (&format!("{family}-signature"), format!("v1,{sig}")),
            ])
        }
        "acme" => h(&[
            ("X-Delivery", id.into()),
            (
                "X-Signature",
                format!("sha256={}", hex(&hmac256(secret.as_bytes(), &[b]))),
            ),
        ]),
        "tok" => h(&[("Authorization", format!("Bearer {secret}"))]),
        "lan" => Vec::new(),
        other => panic!("no kind {other}"),
    };
    Signed {
        headers,
        body: body.to_owned(),
        content_type: "application/json",
    }
}

/// A body each kind finds its type (and, where the body holds it, its id) in.
fn body_for(kind: &str, id: &str, n: u32) -> String {
    match kind {
        "stripe" => json!({"id": id, "type": "charge.succeeded", "n": n}),
        "slack" => {
            json!({"type": "event_callback", "event_id": id, "event": {"type": "message"}, "n": n})
        }
        // A number no f64 holds: it must be stored and delivered as sent.
        _ => {
            return format!(r#"{{"type":"thing.happened","n":{n},"big":12345678901234567890123}}"#);
        }
    }
    .to_string()
}

fn post(hb: &Hookbox, name: &str, s: &Signed) -> Reply {
    let headers: Vec<(&str, &str)> = s
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    hb.post_raw(
        &format!("/ingest/{name}"),
        &s.body,
        s.content_type,
        &headers,
    )
}

fn secrets_of(kind: &str) -> (&'static str, &'static str) {
    if matches!(kind, "sw" | "svix") {
        (WH_NEW, WH_WRONG)
    } else {
        (NEW, WRONG)
    }
}

/// The expected event type of each kind's correct request.
fn expected_type(kind: &str) -> &'static str {
    match kind {
        "github" => "github.push",
        "stripe" => "stripe.charge.succeeded",
        "shopify" => "shopify.orders/create",
        "slack" => "slack.message",
        "sw" => "sw.thing.happened",
        "svix" => "svix.thing.happened",
        "acme" => "acme.thing.happened",
        "tok" => "tok.thing.happened",
        "lan" => "lan.thing.happened",
        _ => unreachable!(),
    }
}

const KINDS: &[&str] = &[
    "github", "stripe", "shopify", "slack", "sw", "svix", "acme", "tok", "lan",
];

fn admin_listing(hb: &Hookbox) -> Vec<Value> {
    let r = hb.get("/webhooks?limit=500").unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()["items"].as_array().unwrap().clone()
}

on_both_backends! {
    /// Each kind: a request signed with the newer of two secrets (rotation) is
    /// accepted with its prefixed type and its source; a wrong or missing
    /// signature, a body changed after signing, and (timestamped kinds) a stale or
    /// future timestamp are refused with 401 and store nothing; no secret shows
    /// in any answer, in the rejected log or in the log.
    fn each_kind_verifies_and_refuses(db: &Db) {
        let hb = start(db, &[]);
        let mut answers = Vec::new();
        let mut accepted = 0;
        for kind in KINDS {
            let (good, wrong) = secrets_of(kind);
            let id = format!("{kind}-d1");
            let body = body_for(kind, &id, 1);
            let r = post(&hb, kind, &sign(kind, good, now(), &id, &body));
            assert_eq!(r.status, 202, "{kind}: {}", r.text);
            accepted += 1;
            let event = r.json();
            assert_eq!(event["event_type"], expected_type(kind), "{kind}");
            let stored = hb.get(&format!("/webhooks/{}", event["id"].as_str().unwrap())).unwrap().json();
            assert_eq!(stored["source"], *kind);
            assert_eq!(stored["received_count"], 1);
            assert_eq!(stored["last_received_at"], stored["created_at"]);
            answers.push(r.text);
            if *kind == "lan" {
                continue;
            }
            let refusals = [
                ("wrong", sign(kind, wrong, now(), "x-2", &body_for(kind, "x-2", 2))),
                ("missing", Signed { headers: Vec::new(), ..sign(kind, good, now(), "x-3", &body_for(kind, "x-3", 3)) }),
                ("changed", Signed { body: body_for(kind, "x-4", 5), ..sign(kind, good, now(), "x-4", &body_for(kind, "x-4", 4)) }),
            ];
            for (what, s) in refusals {
                if what == "changed" && *kind == "tok" {
                    continue; // a token signs no body
                }
                let r = post(&hb, kind, &s);
                r.assert_problem(401, "invalid_signature");
                answers.push(r.text);
            }
            if matches!(*kind, "stripe" | "slack" | "sw" | "svix") {
                for ts in [now() - 600, now() + 600] {
                    let r = post(&hb, kind, &sign(kind, good, ts, "x-5", &body_for(kind, "x-5", 6)));
                    r.assert_problem(401, "invalid_signature");
                    assert!(r.json()["detail"].as_str().unwrap().contains("tolerance"), "{}", r.text);
                    answers.push(r.text);
                }
            }
            let log = hb.get(&format!("/sources/{kind}/rejected")).unwrap();
            assert_eq!(log.status, 200);
            let items = log.json()["items"].as_array().unwrap().clone();
            let expected = match *kind {
                "stripe" | "slack" | "sw" | "svix" => 5,
                "tok" => 2,
                _ => 3,
            };
            assert_eq!(items.len(), expected, "{kind}: {}", log.text);
            if expected == 5 {
                assert_eq!(items[0]["reason"], "timestamp", "newest first: {}", log.text);
                assert_eq!(items[1]["reason"], "timestamp");
            }
            assert_eq!(items[expected - 1]["reason"], "signature");
            assert_eq!(items[expected - 1]["status"], 401);
            assert!(items[expected - 1]["body"].as_str().unwrap().contains("\"n\":2"));
            answers.push(log.text);
        }
        // Nothing refused was stored.
        assert_eq!(admin_listing(&hb).len(), accepted);
        let listed = hb.get("/sources").unwrap();
        assert_eq!(listed.status, 200);
        let items = listed.json()["items"].as_array().unwrap().clone();
        assert_eq!(items.len(), KINDS.len());
        let gh = items.iter().find(|s| s["name"] == "github").unwrap();
        assert_eq!(gh["kind"], "github");
        assert_eq!(gh["path"], "/ingest/github");
        assert_eq!(gh["event_type_prefix"], "github.");
        assert_eq!((gh["accepted"].as_u64(), gh["rejected"].as_u64()), (Some(1), Some(3)));
        assert!(gh["last_accepted_at"].is_string() && gh["last_rejected_at"].is_string());
        answers.push(listed.text);
        let metrics = hb.get("/metrics").unwrap().text;
        assert!(metrics.contains(r#"hookbox_source_rejected_total{source="stripe",reason="timestamp"} 2"#), "{metrics}");
        assert!(metrics.contains(r#"hookbox_source_requests_total{source="github",outcome="accepted"} 1"#), "{metrics}");
        answers.extend(hb.logs());
        let everything = answers.join("\n");
        for secret in [OLD, NEW, WRONG, WH_OLD, WH_NEW, WH_WRONG] {
            assert!(!everything.contains(secret), "{secret} was shown");
            let b64 = secret.strip_prefix("whsec_").unwrap_or(secret);
            assert!(!everything.contains(b64), "{secret} was shown");
        }
    }
}

on_both_backends! {
    /// A redelivery (same delivery id, same body) is one event: 200, the same id,
    /// `received_count` 2 and a later `last_received_at`; the same delivery id with
    /// another body is 422 and counts nothing. `POST /webhooks` retries are counted
    /// too, and its keys may not enter a source's namespace.
    fn redeliveries_are_one_event_and_counted(db: &Db) {
        let hb = start(db, &[]);
        let body = body_for("github", "d-1", 1);
        let first = post(&hb, "github", &sign("github", NEW, now(), "d-1", &body));
        assert_eq!(first.status, 202, "{}", first.text);
        let id = first.json()["id"].as_str().unwrap().to_owned();
        std::thread::sleep(Duration::from_millis(20));
        let again = post(&hb, "github", &sign("github", OLD, now(), "d-1", &body));
        assert_eq!(again.status, 200, "{}", again.text);
        assert_eq!(again.json()["id"], id.as_str());
        assert_eq!(again.json()["idempotency_key"], "github:d-1");
        let other = post(&hb, "github", &sign("github", NEW, now(), "d-1", &body_for("github", "d-1", 2)));
        other.assert_problem(422, "idempotency_key_reused");
        let stored = hb.get(&format!("/webhooks/{id}")).unwrap().json();
        assert_eq!(stored["received_count"], 2, "{stored}");
        assert!(stored["last_received_at"].as_str() > stored["created_at"].as_str(), "{stored}");
        assert_eq!(admin_listing(&hb).len(), 1);
        let by_key = hb.get("/webhooks?idempotency_key=github:d-1").unwrap().json();
        assert_eq!(by_key["received_count"], 2);
    }
}

on_both_backends! {
    /// `POST /webhooks` retries are counted in the commit that answers them
    /// (`received_count`, `last_received_at`); a 422 counts nothing; its keys may
    /// not enter a configured source's namespace.
    fn webhooks_retries_are_counted(db: &Db) {
        let hb = start(db, &[]);
        let e = json!({"event_type": "order.created", "payload": {"a": 1}});
        let first = hb.post(&e, &[("Idempotency-Key", "k-1")]);
        assert_eq!(first.status, 202);
        let fresh = hb.get("/webhooks?idempotency_key=k-1").unwrap().json();
        assert_eq!(fresh["received_count"], 1, "{fresh}");
        assert_eq!(fresh["last_received_at"], fresh["created_at"]);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(hb.post(&e, &[("Idempotency-Key", "k-1")]).status, 200);
        assert_eq!(hb.post(&e, &[("Idempotency-Key", "k-1")]).status, 200);
        let changed = json!({"event_type": "order.created", "payload": {"a": 2}});
        hb.post(&changed, &[("Idempotency-Key", "k-1")]).assert_problem(422, "idempotency_key_reused");
        let stored = hb.get("/webhooks?idempotency_key=k-1").unwrap().json();
        assert_eq!(stored["received_count"], 3, "{stored}");
        assert!(stored["last_received_at"].as_str() > stored["created_at"].as_str(), "{stored}");
        assert_eq!(stored["source"], Value::Null);
        // At once (one SQLite batch, or racing PostgreSQL inserts): every request
        // is counted, once.
        let posts: Vec<_> = (0..24)
            .map(|_| (hb.url.clone(), e.clone(), Some("k-burst".to_owned())))
            .collect();
        let answers = crate::harness::post_all(&posts);
        assert_eq!(answers.iter().filter(|(s, _)| *s == 202).count(), 1, "{answers:?}");
        assert_eq!(answers.iter().filter(|(s, _)| *s == 200).count(), 23, "{answers:?}");
        let burst = hb.get("/webhooks?idempotency_key=k-burst").unwrap().json();
        assert_eq!(burst["received_count"], 24, "{burst}");
        hb.post(&e, &[("Idempotency-Key", "github:forged")])
            .assert_problem(422, "invalid_idempotency_key");
        assert_eq!(hb.post(&e, &[("Idempotency-Key", "gitlab:fine")]).status, 202);
    }
}

on_both_backends! {
    /// Slack's url_verification is answered with its challenge and not stored; a
    /// slash command (a form body) becomes an object of its fields; a source's
    /// events reach the handler routing its prefix, their numbers as sent.
    fn slack_challenges_forms_and_routing(db: &Db) {
        let dir = new_dir();
        let out = dir.path().join("handled");
        let s = crate::harness::script(
            dir.path(),
            "h.sh",
            // One append per event (two handlers run at once: separate appends of
            // payload and type could interleave).
            &format!("line=\"$(cat) $HOOKBOX_EVENT_TYPE\"; echo \"$line\" >> {}", out.display()),
        );
        crate::harness::exec_manifest(dir.path(), "h", "[\"slack.*\", \"github.*\"]", &s, "");
        let secrets = manifests(dir.path());
        let mut env: Vec<(&str, &str)> = secrets.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let sources_dir = dir.path().join("sources").to_str().unwrap().to_owned();
        env.push(("SOURCES_DIR", &sources_dir));
        let hb = Hookbox::restart(dir.clone(), &db.env(&env));

        let challenge = json!({"token": "t", "challenge": "3eZbrw1aB", "type": "url_verification"}).to_string();
        let r = post(&hb, "slack", &sign("slack", NEW, now(), "-", &challenge));
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.json(), json!({"challenge": "3eZbrw1aB"}));
        let unsigned = post(&hb, "slack", &sign("slack", WRONG, now(), "-", &challenge));
        unsigned.assert_problem(401, "invalid_signature");
        assert_eq!(admin_listing(&hb).len(), 0, "a challenge is not stored");

        let form = "command=%2Fdeploy&text=prod+now&trigger_id=tr-1";
        let mut slash = sign("slack", NEW, now(), "-", form);
        slash.content_type = "application/x-www-form-urlencoded";
        let r = post(&hb, "slack", &slash);
        assert_eq!(r.status, 202, "{}", r.text);
        assert_eq!(r.json()["event_type"], "slack.slash_command");
        assert_eq!(r.json()["idempotency_key"], "slack:tr-1");
        let slash_id = r.json()["id"].as_str().unwrap().to_owned();
        let gh = post(&hb, "github", &sign("github", NEW, now(), "g-1", &body_for("github", "g-1", 1)));
        assert_eq!(gh.status, 202);
        let gh_id = gh.json()["id"].as_str().unwrap().to_owned();
        hb.wait_status(&slash_id, "completed", Duration::from_secs(20));
        hb.wait_status(&gh_id, "completed", Duration::from_secs(20));
        let handled = std::fs::read_to_string(&out).unwrap();
        assert!(handled.contains(r#"{"command":"/deploy","text":"prod now","trigger_id":"tr-1"} slack.slash_command"#), "{handled}");
        assert!(handled.contains("\"big\":12345678901234567890123"), "numbers as sent: {handled}");
        assert!(handled.contains(" github.push"), "{handled}");

        // An interaction (a button pressed): a form whose payload field is JSON.
        let action = json!({"type": "block_actions", "trigger_id": "tr-2", "actions": [{"value": "approve"}]});
        let form = serde_urlencoded::to_string([("payload", action.to_string())]).unwrap();
        let mut pressed = sign("slack", NEW, now(), "-", &form);
        pressed.content_type = "application/x-www-form-urlencoded";
        let r = post(&hb, "slack", &pressed);
        assert_eq!(r.status, 202, "{}", r.text);
        assert_eq!(r.json()["event_type"], "slack.block_actions");
        assert_eq!(r.json()["idempotency_key"], "slack:tr-2");
    }
}

on_both_backends! {
    /// A body that is neither JSON nor a form (XML here, and bytes that are not
    /// UTF-8) is verified over its raw bytes and kept whole with its content type;
    /// the receiver gets it back exactly.
    fn any_body_is_kept_whole_with_its_content_type(db: &Db) {
        let dir = new_dir();
        let out = dir.path().join("handled");
        let s = crate::harness::script(dir.path(), "h.sh", &format!("cat >> {}", out.display()));
        crate::harness::exec_manifest(dir.path(), "h", "[\"github.*\"]", &s, "");
        let secrets = manifests(dir.path());
        let mut env: Vec<(&str, &str)> = secrets.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let sources_dir = dir.path().join("sources").to_str().unwrap().to_owned();
        env.push(("SOURCES_DIR", &sources_dir));
        let hb = Hookbox::restart(dir.clone(), &db.env(&env));
        let xml = r#"<?xml version="1.0"?><push ref="main"/>"#;
        let mut s = sign("github", NEW, now(), "x-1", xml);
        s.content_type = "application/xml";
        let r = post(&hb, "github", &s);
        assert_eq!(r.status, 202, "{}", r.text);
        assert_eq!(r.json()["event_type"], "github.push");
        let id = r.json()["id"].as_str().unwrap().to_owned();
        hb.wait_status(&id, "completed", Duration::from_secs(20));
        let handled: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
        assert_eq!(handled, json!({"content_type": "application/xml", "body": xml}));
        // The same delivery again is a duplicate, as for JSON.
        assert_eq!(post(&hb, "github", &s).status, 200);
    }
}

#[test]
fn ingest_refuses_unknown_sources_missing_types_and_bad_bodies() {
    let hb = start(&Db::sqlite(), &[]);
    hb.post_raw("/ingest/nope", "{}", "application/json", &[])
        .assert_problem(404, "not_found");
    let mut no_type = sign("github", NEW, now(), "d-9", "{}");
    no_type.headers.retain(|(k, _)| k != "X-GitHub-Event");
    let r = post(&hb, "github", &no_type);
    r.assert_problem(422, "invalid_event_type");
    assert!(r.text.contains("x-github-event"), "{}", r.text);
    post(&hb, "lan", &sign("lan", "", now(), "-", "{not json")).assert_problem(400, "invalid_body");
    post(
        &hb,
        "lan",
        &sign("lan", "", now(), "-", r#"{"type": "a", "type": "b"}"#),
    )
    .assert_problem(400, "invalid_body");
    post(
        &hb,
        "lan",
        &sign("lan", "", now(), "-", r#"{"type": "a b"}"#),
    )
    .assert_problem(422, "invalid_event_type");
    let log = hb.get("/sources/lan/rejected").unwrap().json();
    assert_eq!(log["items"].as_array().unwrap().len(), 3, "{log}");
    assert_eq!(log["items"][0]["reason"], "other");
    assert_eq!(log["items"][0]["code"], "invalid_event_type");
    hb.get("/sources/nope/rejected")
        .unwrap()
        .assert_problem(404, "not_found");
    assert_eq!(admin_listing(&hb).len(), 0);
}

#[test]
fn a_full_queue_refuses_source_requests_with_429_and_stores_nothing() {
    let dir = new_dir();
    let block = crate::harness::script(dir.path(), "block.sh", "sleep 30");
    crate::harness::exec_manifest(dir.path(), "block", "[\"*\"]", &block, "");
    let secrets = manifests(dir.path());
    let mut env: Vec<(&str, &str)> = secrets.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let sources_dir = dir.path().join("sources").to_str().unwrap().to_owned();
    env.push(("SOURCES_DIR", &sources_dir));
    env.extend([("QUEUE_MAXSIZE", "1"), ("WORKER_COUNT", "1")]);
    let hb = Hookbox::restart(dir.clone(), &env);
    let first = post(
        &hb,
        "lan",
        &sign("lan", "", now(), "-", &body_for("lan", "-", 1)),
    );
    assert_eq!(first.status, 202, "{}", first.text);
    let refused = crate::harness::eventually(Duration::from_secs(10), "a 429", || {
        let r = post(
            &hb,
            "lan",
            &sign("lan", "", now(), "-", &body_for("lan", "-", 2)),
        );
        (r.status != 202).then_some(r)
    });
    refused.assert_problem(429, "overloaded");
    assert!(refused.header("retry-after").is_some());
    assert_eq!(admin_listing(&hb).len(), 1);
}

#[test]
fn the_source_admin_routes_need_the_admin_token() {
    let hb = start(&Db::sqlite(), &[("ADMIN_TOKEN", "a-long-admin-token-0123")]);
    hb.get("/sources")
        .unwrap()
        .assert_problem(401, "unauthorized");
    hb.get("/sources/github/rejected")
        .unwrap()
        .assert_problem(401, "unauthorized");
    // Senders need no admin token.
    let r = post(
        &hb,
        "github",
        &sign("github", NEW, now(), "d-1", &body_for("github", "d-1", 1)),
    );
    assert_eq!(r.status, 202, "{}", r.text);
}

#[test]
fn bad_source_manifests_stop_serve_with_exit_2_naming_file_and_field() {
    for (file, text, env, field) in [
        (
            "gh.toml",
            "kind = \"github\"\nsecret_env = \"UNSET_SECRET\"",
            vec![],
            "secret_env",
        ),
        (
            "x.toml",
            "kind = \"gitea\"\nsecret_env = \"S\"",
            vec![("S", "v")],
            "kind",
        ),
        (
            "t.toml",
            "kind = \"none\"\ntolerance = \"forever\"",
            vec![],
            "tolerance",
        ),
        (
            "r.toml",
            "kind = \"none\"\nretention = \"40d\"",
            vec![],
            "retention",
        ),
    ] {
        let dir = new_dir();
        write(dir.path(), &format!("sources/{file}"), text);
        let out = crate::harness::hookbox_in(dir.path())
            .env("DB_PATH", dir.path().join("events.db"))
            .env("BIND_ADDR", "127.0.0.1:0")
            .env("SOURCES_DIR", dir.path().join("sources"))
            .envs(env)
            .arg("serve")
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file}: {stderr}");
        assert!(
            stderr
                .lines()
                .any(|l| l.contains(&format!("{file}: {field}:"))),
            "{file}: {stderr}"
        );
    }
}

on_both_backends! {
    /// `split`: each item of a batched body is its own event, keyed by its
    /// `split_id`; the answer lists every item's event, duplicates included, in
    /// body order (200 when none was new); a body that is no array is one event;
    /// an item without a type refuses the whole request before anything is stored.
    fn a_batched_body_is_split_into_events(db: &Db) {
        let dir = new_dir();
        write(
            dir.path(),
            "sources/mail.toml",
            "kind = \"none\"\nevent_type_prefix = \"mail.\"\nsplit = \"/\"\nsplit_id = \"/sg_event_id\"",
        );
        let sources = dir.path().join("sources").display().to_string();
        let hb = Hookbox::restart(dir.clone(), &db.env(&[("SOURCES_DIR", &sources)]));
        let send = |body: Value| hb.post_raw("/ingest/mail", &body.to_string(), "application/json", &[]);
        let a = json!({"type": "delivered", "sg_event_id": "a", "n": 1});
        let b = json!({"type": "open", "sg_event_id": "b", "n": 2});
        let c = json!({"type": "click", "sg_event_id": "c", "n": 3});

        let first = send(json!([a, b]));
        assert_eq!(first.status, 202, "{}", first.text);
        let answer = first.json();
        assert_eq!((answer["accepted"].as_u64(), answer["duplicates"].as_u64()), (Some(2), Some(0)), "{answer}");
        let ids: Vec<String> = answer["events"].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_owned()).collect();
        assert_eq!(ids.len(), 2);
        let stored = hb.get(&format!("/webhooks/{}", ids[1])).unwrap().json();
        assert_eq!(stored["event_type"], "mail.open");
        assert_eq!(stored["idempotency_key"], "mail:b");

        let again = send(json!([a, b]));
        assert_eq!(again.status, 200, "{}", again.text);
        assert_eq!(again.json()["duplicates"], 2);
        assert_eq!(again.json()["events"], json!(ids));

        let mixed = send(json!([c, a]));
        assert_eq!(mixed.status, 202, "{}", mixed.text);
        assert_eq!((mixed.json()["accepted"].as_u64(), mixed.json()["duplicates"].as_u64()), (Some(1), Some(1)));
        assert_eq!(mixed.json()["events"][1], json!(ids[0]), "body order");

        // No array at the pointer: one event, answered as usual.
        let single = send(json!({"type": "bounce", "sg_event_id": "d"}));
        assert_eq!(single.status, 202, "{}", single.text);
        assert_eq!(single.json()["event_type"], "mail.bounce");

        // One item without a type: 422, and its neighbour was not stored.
        let bad = send(json!([{"type": "spam", "sg_event_id": "e"}, {"sg_event_id": "f"}]));
        bad.assert_problem(422, "invalid_event_type");
        let listed = hb.get("/webhooks?limit=500").unwrap().json();
        let keys: Vec<&str> = listed["items"].as_array().unwrap().iter().filter_map(|e| e["idempotency_key"].as_str()).collect();
        assert!(!keys.contains(&"mail:e"), "{keys:?}");
        assert_eq!(keys.len(), 4, "{keys:?}");
    }
}

#[test]
fn a_split_that_is_no_pointer_stops_startup_naming_the_field() {
    let dir = new_dir();
    write(
        dir.path(),
        "sources/mail.toml",
        "kind = \"none\"\nsplit = \"events\"",
    );
    let out = crate::harness::hookbox_in(dir.path())
        .env("SOURCES_DIR", dir.path().join("sources"))
        .env("DB_PATH", dir.path().join("events.db"))
        .env("BIND_ADDR", "127.0.0.1:0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("mail.toml: split:"), "{err}");
}

/// Paddle's `ts=…;h1=…` over `{ts}:{body}`, signed here as Paddle documents it,
/// through the real binary: accepted with its type and id; stale refused. A kind
/// that signs its URL without `public_url` stops startup naming the field.
#[test]
fn a_built_in_kind_verifies_through_the_binary_and_url_kinds_need_public_url() {
    let dir = new_dir();
    write(
        dir.path(),
        "sources/paddle.toml",
        "kind = \"paddle\"\nsecret_env = \"PADDLE\"",
    );
    let sources = dir.path().join("sources").display().to_string();
    let hb = Hookbox::restart(dir.clone(), &[("SOURCES_DIR", &sources), ("PADDLE", NEW)]);
    let body =
        r#"{"event_id":"evt_01","event_type":"transaction.completed","data":{"total":"10.00"}}"#;
    let paddle = |ts: i64| {
        let sig = hex(&hmac256(
            NEW.as_bytes(),
            &[ts.to_string().as_bytes(), b":", body.as_bytes()],
        ));
        hb.post_raw(
            "/ingest/paddle",
            body,
            "application/json",
            &[("Paddle-Signature", &format!("ts={ts};h1={sig}"))],
        )
    };
    let r = paddle(now());
    assert_eq!(r.status, 202, "{}", r.text);
    assert_eq!(r.json()["event_type"], "paddle.transaction.completed");
    assert_eq!(r.json()["idempotency_key"], "paddle:evt_01");
    paddle(now() - 3600).assert_problem(401, "invalid_signature");

    let dir = new_dir();
    write(
        dir.path(),
        "sources/hs.toml",
        "kind = \"hubspot\"\nsecret_env = \"HS\"",
    );
    let out = crate::harness::hookbox_in(dir.path())
        .env("SOURCES_DIR", dir.path().join("sources"))
        .env("HS", NEW)
        .env("DB_PATH", dir.path().join("events.db"))
        .env("BIND_ADDR", "127.0.0.1:0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("hs.toml: public_url:"), "{err}");
}

/// Mailgun refuses a token seen before (a replay), but a request that verified
/// and was then refused (here: no event type) does not spend its token, so the
/// sender's corrected retry is accepted. Signed here with the hmac crate.
#[test]
fn a_mailgun_token_is_spent_only_by_an_accepted_request() {
    let dir = new_dir();
    write(
        dir.path(),
        "sources/mg.toml",
        "kind = \"mailgun\"\nsecret_env = \"MG\"",
    );
    let sources = dir.path().join("sources").display().to_string();
    let hb = Hookbox::restart(dir, &[("SOURCES_DIR", &sources), ("MG", "mg-signing-key")]);
    let ts = now().to_string();
    let sig = hex(&hmac256(
        b"mg-signing-key",
        &[format!("{ts}tok-77").as_bytes()],
    ));
    let signature = json!({"timestamp": ts, "token": "tok-77", "signature": sig});
    let post = |event_data: Value| {
        let body = json!({"signature": signature, "event-data": event_data}).to_string();
        hb.post_raw("/ingest/mg", &body, "application/json", &[])
    };
    post(json!({"id": "m-1"})).assert_problem(422, "invalid_event_type");
    let ok = post(json!({"id": "m-1", "event": "delivered"}));
    assert_eq!(ok.status, 202, "{}", ok.text);
    assert_eq!(ok.json()["event_type"], "mg.delivered", "{}", ok.text);
    post(json!({"id": "m-2", "event": "opened"})).assert_problem(401, "invalid_signature");
}

/// Mailgun and Linear sign each delivery afresh inside the body (Mailgun's
/// `/signature` block with a new token, Linear's `/webhookTimestamp`): a
/// redelivery of the same event is a duplicate (200, `received_count` 2), not a
/// reused key, while another event body under the same id still is (422).
/// Signed here with the hmac crate.
#[test]
fn a_resigned_redelivery_in_the_body_is_a_duplicate() {
    let dir = new_dir();
    write(
        dir.path(),
        "sources/mg.toml",
        "kind = \"mailgun\"\nsecret_env = \"MG\"",
    );
    write(
        dir.path(),
        "sources/lin.toml",
        "kind = \"linear\"\nsecret_env = \"LIN\"",
    );
    // The same with a transform that changes the payload: still a duplicate.
    write(
        dir.path(),
        "sources/mgt.toml",
        "kind = \"mailgun\"\nsecret_env = \"MG\"\ntransform = \"tag.js\"",
    );
    write(
        dir.path(),
        "sources/tag.js",
        "function handler(w) { w.payload.tagged = true; return w; }",
    );
    let sources = dir.path().join("sources").display().to_string();
    let hb = Hookbox::restart(
        dir,
        &[
            ("SOURCES_DIR", &sources),
            ("MG", "mg-signing-key"),
            ("LIN", "lin-signing-key"),
        ],
    );
    let mailgun_to = |path: &str, token: &str, event: &str| {
        let ts = now().to_string();
        let sig = hex(&hmac256(
            b"mg-signing-key",
            &[format!("{ts}{token}").as_bytes()],
        ));
        let body = json!({
            "signature": {"timestamp": ts, "token": token, "signature": sig},
            "event-data": {"id": "m-9", "event": event},
        })
        .to_string();
        hb.post_raw(path, &body, "application/json", &[])
    };
    let mailgun = |token: &str, event: &str| mailgun_to("/ingest/mg", token, event);
    assert_eq!(mailgun_to("/ingest/mgt", "tok-x", "delivered").status, 202);
    let again = mailgun_to("/ingest/mgt", "tok-y", "delivered");
    assert_eq!(again.status, 200, "through a transform: {}", again.text);
    assert_eq!(mailgun("tok-a", "delivered").status, 202);
    let again = mailgun("tok-b", "delivered");
    assert_eq!(again.status, 200, "{}", again.text);
    let id = again.json()["id"].as_str().expect("id").to_owned();
    let ev = hb.get(&format!("/webhooks/{id}")).expect("get").json();
    assert_eq!(ev["received_count"], 2, "{ev}");
    mailgun("tok-c", "opened").assert_problem(422, "idempotency_key_reused");

    let linear = |sent_ms: i64, action: &str| {
        let body =
            json!({"type": "Issue", "action": action, "webhookTimestamp": sent_ms}).to_string();
        let sig = hex(&hmac256(b"lin-signing-key", &[body.as_bytes()]));
        hb.post_raw(
            "/ingest/lin",
            &body,
            "application/json",
            &[("Linear-Signature", &sig), ("Linear-Delivery", "d-1")],
        )
    };
    let ms = now() * 1000;
    assert_eq!(linear(ms, "create").status, 202);
    assert_eq!(linear(ms + 1500, "create").status, 200, "re-sent later");
    linear(ms + 3000, "update").assert_problem(422, "idempotency_key_reused");
}

/// Meta's subscription check (`GET /ingest/{name}?hub.mode=subscribe…`): the
/// challenge as text for the source's verify token, else 403 — also for a meta
/// source configured without `[meta]` — 405 (`Allow: POST`) for a source of
/// another kind, and 404 for a name that is no source.
#[test]
fn meta_subscription_checks_echo_the_challenge_for_the_token_only() {
    let dir = new_dir();
    write(
        dir.path(),
        "sources/fb.toml",
        "kind = \"meta\"\nsecret_env = \"META\"\n[meta]\nverify_token_env = \"META_VERIFY\"\n",
    );
    write(
        dir.path(),
        "sources/bare.toml",
        "kind = \"meta\"\nsecret_env = \"META\"\n",
    );
    write(
        dir.path(),
        "sources/gh.toml",
        "kind = \"github\"\nsecret_env = \"GH\"",
    );
    let sources = dir.path().join("sources").display().to_string();
    let hb = Hookbox::restart(
        dir,
        &[
            ("SOURCES_DIR", &sources),
            ("META", "app-secret-1"),
            ("META_VERIFY", "verify-me-123"),
            ("GH", "gh-secret"),
        ],
    );
    let check = |name: &str, mode: &str, token: &str| {
        hb.get(&format!(
            "/ingest/{name}?hub.mode={mode}&hub.verify_token={token}&hub.challenge=1158201444"
        ))
        .unwrap()
    };
    let ok = check("fb", "subscribe", "verify-me-123");
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert_eq!(ok.text, "1158201444");
    check("fb", "subscribe", "verify-me-124").assert_problem(403, "forbidden");
    check("fb", "unsubscribe", "verify-me-123").assert_problem(403, "forbidden");
    check("bare", "subscribe", "verify-me-123").assert_problem(403, "forbidden");
    check("bare", "subscribe", "").assert_problem(403, "forbidden");
    let gh = check("gh", "subscribe", "verify-me-123");
    gh.assert_problem(405, "method_not_allowed");
    assert_eq!(
        gh.header("allow"),
        Some("POST"),
        "a source of another kind takes POST"
    );
    check("nope", "subscribe", "verify-me-123").assert_problem(404, "not_found");
}

/// Handshakes, answered once verified and never stored: Discord's PING (ed25519,
/// signed here with ed25519-dalek's own signer) and Zoom's url_validation (its
/// encryptedToken checked with the hmac crate); a Discord interaction is an event
/// `interaction.{type}`; GitLab's token; an unsigned PING is 401.
#[test]
fn handshakes_are_answered_once_verified_and_other_kinds_verify() {
    use ed25519_dalek::{Signer, SigningKey};
    let app = SigningKey::from_bytes(&[5u8; 32]);
    let public = hex(app.verifying_key().as_bytes());
    let dir = new_dir();
    write(
        dir.path(),
        "sources/discord.toml",
        "kind = \"discord\"\nsecret_env = \"DISCORD\"",
    );
    write(
        dir.path(),
        "sources/zoom.toml",
        "kind = \"zoom\"\nsecret_env = \"ZOOM\"",
    );
    write(
        dir.path(),
        "sources/gitlab.toml",
        "kind = \"gitlab\"\nsecret_env = \"GITLAB\"",
    );
    let sources = dir.path().join("sources").display().to_string();
    // Zoom mid-rotation: it signs with the new secret, listed second.
    let zoom_secrets = format!("{OLD} {NEW}");
    let hb = Hookbox::restart(
        dir.clone(),
        &[
            ("SOURCES_DIR", &sources),
            ("DISCORD", &public),
            ("ZOOM", &zoom_secrets),
            ("GITLAB", "gl-token-1"),
        ],
    );
    let discord = |body: &str, signer: &SigningKey| {
        let ts = now().to_string();
        let sig = hex(&signer.sign(format!("{ts}{body}").as_bytes()).to_bytes());
        hb.post_raw(
            "/ingest/discord",
            body,
            "application/json",
            &[
                ("X-Signature-Ed25519", &sig),
                ("X-Signature-Timestamp", &ts),
            ],
        )
    };
    let ping = discord(r#"{"type":1,"id":"p1"}"#, &app);
    assert_eq!(ping.status, 200, "{}", ping.text);
    assert_eq!(ping.json(), json!({"type": 1}));
    discord(
        r#"{"type":1,"id":"p1"}"#,
        &SigningKey::from_bytes(&[6u8; 32]),
    )
    .assert_problem(401, "invalid_signature");
    let command = discord(r#"{"type":2,"id":"i-1","data":{"name":"deploy"}}"#, &app);
    assert_eq!(command.status, 202, "{}", command.text);
    assert_eq!(command.json()["event_type"], "discord.interaction.2");
    assert_eq!(command.json()["idempotency_key"], "discord:i-1");

    let validation =
        r#"{"event":"endpoint.url_validation","payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"}}"#;
    let ts = now().to_string();
    let sig = hex(&hmac256(
        NEW.as_bytes(),
        &[format!("v0:{ts}:{validation}").as_bytes()],
    ));
    let zoom = hb.post_raw(
        "/ingest/zoom",
        validation,
        "application/json",
        &[
            ("x-zm-request-timestamp", &ts),
            ("x-zm-signature", &format!("v0={sig}")),
        ],
    );
    assert_eq!(zoom.status, 200, "{}", zoom.text);
    // Answered with the secret that verified the request, not the list's first.
    let expected = hex(&hmac256(NEW.as_bytes(), &[b"qgg8vlvZRS6UYooatFL8Aw"]));
    assert_eq!(
        zoom.json(),
        json!({"plainToken": "qgg8vlvZRS6UYooatFL8Aw", "encryptedToken": expected})
    );

    let push = r#"{"object_kind":"push","ref":"refs/heads/main"}"#;
    let gl = hb.post_raw(
        "/ingest/gitlab",
        push,
        "application/json",
        &[
            ("X-Gitlab-Token", "gl-token-1"),
            ("X-Gitlab-Event-UUID", "uuid-1"),
        ],
    );
    assert_eq!(gl.status, 202, "{}", gl.text);
    assert_eq!(gl.json()["event_type"], "gitlab.push");
    assert_eq!(gl.json()["idempotency_key"], "gitlab:uuid-1");
    hb.post_raw(
        "/ingest/gitlab",
        push,
        "application/json",
        &[("X-Gitlab-Token", "nope")],
    )
    .assert_problem(401, "invalid_signature");
    // Only the two events were stored: no handshake.
    assert_eq!(admin_listing(&hb).len(), 2);
}

on_both_backends! {
    /// The durable rejected log: requests signed with a secret the source does not
    /// know yet survive kill -9; once the secret is fixed, a retry verifies each
    /// one as of when it came (its timestamp older than the tolerance by then) and
    /// ingests it; what passes leaves the log, a redelivery as a duplicate, and the
    /// unsigned junk stays.
    fn rejected_requests_survive_a_crash_and_pass_once_the_secret_is_fixed(db: &Db) {
        let dir = new_dir();
        write(
            dir.path(),
            "sources/stripe.toml",
            "kind = \"stripe\"\nsecret_env = \"STRIPE\"\ntolerance = \"2s\"",
        );
        let sources_dir = dir.path().join("sources").to_str().unwrap().to_owned();
        let env = |secret: &'static str| {
            db.env(&[("STRIPE", secret), ("SOURCES_DIR", sources_dir.as_str())])
        };
        let hb = Hookbox::restart(dir.clone(), &env(OLD));
        let signed: Vec<Signed> = ["a1", "a2", "a3"]
            .iter()
            .map(|id| sign("stripe", NEW, now(), id, &body_for("stripe", id, 1)))
            .collect();
        for s in &signed {
            post(&hb, "stripe", s).assert_problem(401, "invalid_signature");
        }
        let junk = Signed { headers: Vec::new(), ..sign("stripe", NEW, now(), "j", &body_for("stripe", "j", 1)) };
        post(&hb, "stripe", &junk).assert_problem(401, "invalid_signature");
        let dir = hb.kill9();
        std::thread::sleep(Duration::from_secs(3)); // past the tolerance
        let hb = Hookbox::restart(dir, &env(NEW));

        let items = hb.get("/sources/stripe/rejected").unwrap().json()["items"].as_array().unwrap().clone();
        assert_eq!(items.len(), 4, "{items:?}");
        let a1 = items.iter().find(|i| i["body"].as_str().unwrap().contains("\"a1\"")).unwrap();
        assert_eq!(a1["reason"], "signature");
        assert_eq!(a1["retryable"], true);
        assert!(a1["received_at"].is_string() && a1["detail"].is_string());
        assert!(a1["headers"]["stripe-signature"].as_str().unwrap().starts_with("t="), "{a1}");
        let one = |id: &str| hb.call("POST", &format!("/sources/stripe/rejected/{id}/retry"), None, &[]);

        let r = one(a1["id"].as_str().unwrap());
        assert_eq!(r.status, 202, "{}", r.text);
        assert_eq!(r.json()["event_type"], "stripe.charge.succeeded");
        one(a1["id"].as_str().unwrap()).assert_problem(404, "not_found");
        one("not-an-id").assert_problem(404, "not_found");
        // The sender redelivers a2 itself (signed anew): the retry finds it stored.
        assert_eq!(post(&hb, "stripe", &sign("stripe", NEW, now(), "a2", &body_for("stripe", "a2", 1))).status, 202);
        let all = hb.call("POST", "/sources/stripe/rejected/retry", None, &[]);
        assert_eq!(all.status, 200, "{}", all.text);
        assert_eq!(all.json(), json!({"accepted": 1, "duplicates": 1, "still_rejected": 1}));
        let left = hb.get("/sources/stripe/rejected").unwrap().json()["items"].clone();
        assert_eq!(left.as_array().unwrap().len(), 1, "{left}");
        assert_eq!(left[0]["reason"], "signature");
        assert_eq!(admin_listing(&hb).len(), 3);
        hb.call("POST", "/sources/nope/rejected/retry", None, &[]).assert_problem(404, "not_found");
    }
}

on_both_backends! {
    /// Issue 27, item 11: a flood of forged requests past the log's quota neither
    /// evicts nor hides a real sender's refusals — they keep their own quota, and
    /// the listing shows every entry the log keeps (before, it showed the newest
    /// 1,000, all of them junk, though the real ones were still stored).
    fn a_flood_of_forged_requests_hides_no_real_refusal(db: &Db) {
        let dir = new_dir();
        write(dir.path(), "sources/stripe.toml", "kind = \"stripe\"\nsecret_env = \"STRIPE\"");
        let sources_dir = dir.path().join("sources").to_str().unwrap().to_owned();
        let hb = Hookbox::restart(dir.clone(), &db.env(&[("STRIPE", NEW), ("SOURCES_DIR", sources_dir.as_str())]));
        for id in ["r1", "r2", "r3"] {
            // Signed with the right secret, but without a type: refused after verification.
            let untyped = sign("stripe", NEW, now(), id, &format!("{{\"id\":\"{id}\"}}"));
            post(&hb, "stripe", &untyped).assert_problem(422, "invalid_event_type");
        }
        const FORGED: usize = 1_050;
        std::thread::scope(|scope| {
            for t in 0..6 {
                let hb = &hb;
                scope.spawn(move || {
                    for i in (t..FORGED).step_by(6) {
                        let forged = sign("stripe", OLD, now(), &format!("f{i}"), &body_for("stripe", &format!("f{i}"), 1));
                        post(hb, "stripe", &forged).assert_problem(401, "invalid_signature");
                    }
                });
            }
        });
        let items = hb.get("/sources/stripe/rejected").unwrap().json()["items"].as_array().unwrap().clone();
        let real: Vec<_> = items.iter().filter(|i| i["reason"] != "signature").collect();
        assert_eq!(real.len(), 3, "{real:?}");
        assert!(real.iter().all(|i| i["status"] == 422 && i["retryable"] == true), "{real:?}");
        let forged = items.len() - real.len();
        match db {
            Db::Sqlite => assert_eq!(forged, 1_000, "the junk's quota is the newest 1,000"),
            // Each refusal's trim sees what was committed when it ran: six at once
            // may leave a few more.
            _ => assert!((1_000..=1_006).contains(&forged), "{forged}"),
        }
        let newest = items[0]["body"].as_str().unwrap();
        assert!(newest.contains("\"f"), "newest first: {newest}");
    }
}

/// A `token` source's proof is its secret: kept as `[redacted]`, so the entry
/// cannot be verified again (409 `not_retryable`).
#[test]
fn a_token_sources_rejected_requests_keep_no_credential_and_are_not_retryable() {
    let hb = start(&Db::sqlite(), &[]);
    post(
        &hb,
        "tok",
        &sign("tok", WRONG, now(), "-", &body_for("tok", "-", 1)),
    )
    .assert_problem(401, "invalid_signature");
    let log = hb.get("/sources/tok/rejected").unwrap();
    assert!(!log.text.contains(WRONG), "{}", log.text);
    let item = &log.json()["items"][0];
    assert_eq!(item["headers"]["authorization"], "[redacted]");
    assert_eq!(item["retryable"], false);
    hb.call(
        "POST",
        &format!(
            "/sources/tok/rejected/{}/retry",
            item["id"].as_str().unwrap()
        ),
        None,
        &[],
    )
    .assert_problem(409, "not_retryable");
}
