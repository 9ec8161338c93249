//! The console over plain HTTP, on the real binary: the login and its cookie, the
//! anti-forgery check (a POST without the right `csrf` is 403 and changes nothing),
//! escaping, the security headers, and every page answering 200 on both backends.

use std::time::Duration;

use serde_json::json;

use crate::harness::{
    Db, Hookbox, Reply, eventually, exec_manifest, new_dir, on_both_backends, script, write,
};

const TOKEN: &str = "console-admin-token-0123456789";

/// A client that does not follow redirects and keeps no cookies (each test says
/// which cookie it sends).
fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

fn read(res: reqwest::blocking::Response) -> Reply {
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let text = res.text().expect("body");
    Reply {
        status,
        headers,
        text,
    }
}

/// GET `path` with `cookie` (a `name=value` pair), if any.
pub fn get(hb: &Hookbox, path: &str, cookie: Option<&str>) -> Reply {
    let mut req = client().get(format!("{}{path}", hb.url));
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    read(req.send().expect("get"))
}

/// POST a form to `path` with `cookie`.
pub fn post_form(hb: &Hookbox, path: &str, cookie: Option<&str>, form: &[(&str, &str)]) -> Reply {
    let body = serde_urlencoded::to_string(form).expect("form");
    let mut req = client()
        .post(format!("{}{path}", hb.url))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body);
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    read(req.send().expect("post"))
}

/// The `name=value` part of a `Set-Cookie` answer.
fn cookie_of(reply: &Reply) -> String {
    let set = reply.header("set-cookie").expect("a Set-Cookie");
    set.split(';').next().expect("pair").to_owned()
}

/// The first `csrf` hidden field's value in a page.
pub fn csrf_in(page: &str) -> String {
    let at = page
        .find(r#"name="csrf" value=""#)
        .unwrap_or_else(|| panic!("no csrf field in {page}"));
    let rest = &page[at + r#"name="csrf" value=""#.len()..];
    rest[..rest.find('"').expect("end")].to_owned()
}

/// Logs in with the token; the session cookie.
pub fn log_in(hb: &Hookbox) -> String {
    let res = post_form(hb, "/console/login", None, &[("token", TOKEN)]);
    assert_eq!(res.status, 303, "{}", res.text);
    cookie_of(&res)
}

/// A hookbox whose `dead.*` events dead-letter at once (exit 65) and whose
/// `ok.*` events complete.
fn start(db: &Db, extra: &[(&str, &str)]) -> Hookbox {
    let dir = new_dir();
    let fail = script(
        dir.path(),
        "fail.sh",
        "echo 'receiver said no' >&2; exit 65",
    );
    exec_manifest(dir.path(), "refuser", r#"["dead.*"]"#, &fail, "");
    let ok = script(dir.path(), "ok.sh", "cat >/dev/null; exit 0");
    exec_manifest(dir.path(), "acceptor", r#"["ok.*"]"#, &ok, "");
    write(
        dir.path(),
        "sources/hooks.toml",
        "kind = \"token\"\nsecret_env = \"HOOKS_TOKEN\"\n",
    );
    let sources = dir.path().join("sources");
    let mut env = vec![
        ("SOURCES_DIR", sources.to_str().expect("utf-8")),
        ("HOOKS_TOKEN", "a-token-for-the-hooks-source"),
    ];
    env.extend_from_slice(extra);
    Hookbox::restart(dir.clone(), &db.env(&env))
}

/// Posts an event; its id.
fn post(hb: &Hookbox, event_type: &str, payload: serde_json::Value) -> String {
    let r = hb.post(&json!({"event_type": event_type, "payload": payload}), &[]);
    assert_eq!(r.status, 202, "{}", r.text);
    r.json()["id"].as_str().expect("id").to_owned()
}

fn assert_security_headers(r: &Reply) {
    let csp = r.header("content-security-policy").expect("CSP");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(!csp.contains("script-src"), "no script may run: {csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(r.header("x-frame-options"), Some("DENY"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
}

#[test]
fn with_a_token_the_console_asks_for_it_once_and_keeps_a_strict_cookie() {
    let hb = start(&Db::sqlite(), &[("ADMIN_TOKEN", TOKEN)]);
    let res = get(&hb, "/console/events?status=failed", None);
    assert_eq!(res.status, 303);
    assert_eq!(
        res.header("location"),
        Some("/console/login?next=%2Fconsole%2Fevents%3Fstatus%3Dfailed")
    );
    let form = get(&hb, "/console/login", None);
    assert_eq!(form.status, 200);
    assert!(form.text.contains(r#"name="token""#), "{}", form.text);
    assert!(!form.text.contains("No ADMIN_TOKEN is set"));
    assert_security_headers(&form);

    let wrong = post_form(
        &hb,
        "/console/login",
        None,
        &[("token", "not-the-token-at-all")],
    );
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());

    let res = post_form(
        &hb,
        "/console/login",
        None,
        &[("token", TOKEN), ("next", "/console/events?status=failed")],
    );
    assert_eq!(res.status, 303);
    assert_eq!(
        res.header("location"),
        Some("/console/events?status=failed")
    );
    let set = res.header("set-cookie").expect("cookie");
    for attr in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=43200",
    ] {
        assert!(set.contains(attr), "{attr} missing from {set}");
    }
    assert!(!set.contains("Secure"), "plain HTTP: {set}");
    let cookie = cookie_of(&res);
    assert!(cookie.len() > 64, "a long random id: {cookie}");

    let behind_tls = client()
        .post(format!("{}/console/login", hb.url))
        .header("x-forwarded-proto", "https")
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={TOKEN}"))
        .send()
        .expect("post");
    let set = behind_tls.headers()["set-cookie"].to_str().expect("text");
    assert!(set.ends_with("; Secure"), "{set}");

    let page = get(&hb, "/console", Some(&cookie));
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("Log out"));
    assert_security_headers(&page);

    let off_site = post_form(
        &hb,
        "/console/login",
        None,
        &[("token", TOKEN), ("next", "https://evil.example/")],
    );
    assert_eq!(
        off_site.header("location"),
        Some("/console"),
        "no open redirect"
    );

    let csrf = csrf_in(&page.text);
    let out = post_form(&hb, "/console/logout", Some(&cookie), &[("csrf", &csrf)]);
    assert_eq!(out.status, 303);
    assert!(
        out.header("set-cookie")
            .expect("cleared")
            .contains("Max-Age=0")
    );
    assert_eq!(
        get(&hb, "/console", Some(&cookie)).status,
        303,
        "the session ended"
    );
    assert_eq!(
        post_form(&hb, "/console/logout", Some(&cookie), &[("csrf", &csrf)]).status,
        403
    );
}

#[test]
fn a_post_without_the_right_csrf_is_refused_and_changes_nothing() {
    let hb = start(&Db::sqlite(), &[("ADMIN_TOKEN", TOKEN)]);
    let id = post(&hb, "dead.letter", json!({"n": 1}));
    hb.wait_status(&id, "failed", Duration::from_secs(20));
    let cookie = log_in(&hb);
    let page = get(&hb, "/console/dead-letters", Some(&cookie));
    assert_eq!(page.status, 200);
    let csrf = csrf_in(&page.text);
    let other = log_in(&hb);
    let other_csrf = csrf_in(&get(&hb, "/console", Some(&other)).text);
    assert_ne!(csrf, other_csrf, "one token per session");

    let replay = format!("/console/events/{id}/replay");
    let subscriber = [
        ("name", "sneaky"),
        ("event_types", "order.*"),
        ("url", "https://example.com/hook"),
        ("active", "true"),
    ];
    for forged in [None, Some(""), Some("0000"), Some(other_csrf.as_str())] {
        let mut form = vec![("back", "/console/dead-letters")];
        if let Some(c) = forged {
            form.push(("csrf", c));
        }
        for (path, fields) in [
            (replay.as_str(), form.clone()),
            ("/console/dead-letters/replay", form.clone()),
            (
                "/console/subscribers",
                [form.clone(), subscriber.to_vec()].concat(),
            ),
            ("/console/subscribers/x/delete", form.clone()),
        ] {
            let res = post_form(&hb, path, Some(&cookie), &fields);
            assert_eq!(res.status, 403, "{path} with csrf {forged:?}: {}", res.text);
        }
    }
    // Without a session at all.
    assert_eq!(
        post_form(&hb, &replay, None, &[("csrf", &csrf)]).status,
        403
    );
    let ev = hb.get(&format!("/webhooks/{id}")).expect("get").json();
    assert_eq!(ev["status"], "failed", "nothing was replayed: {ev}");
    assert_eq!(ev["attempts"], 1);
    let auth = format!("Bearer {TOKEN}");
    let subs = hb
        .call("GET", "/subscribers", None, &[("authorization", &auth)])
        .json();
    assert_eq!(subs["items"], json!([]), "nothing was created");

    let res = post_form(
        &hb,
        &replay,
        Some(&cookie),
        &[("csrf", &csrf), ("back", "/console/dead-letters")],
    );
    assert_eq!(res.status, 303, "{}", res.text);
    assert_eq!(res.header("location"), Some("/console/dead-letters"));
    eventually(Duration::from_secs(20), "the replayed attempt", || {
        let ev = hb.get(&format!("/webhooks/{id}")).ok()?.json();
        (ev["attempts"] == 2 && ev["status"] == "failed").then_some(())
    });
    let after = get(&hb, "/console/dead-letters", Some(&cookie));
    assert!(
        after.text.contains("Replayed 1 delivery"),
        "the message: {}",
        after.text
    );
}

#[test]
fn payloads_and_errors_are_shown_as_text() {
    let hb = start(&Db::sqlite(), &[]);
    let xss = "<script>alert('x')</script><img src=x onerror=alert(1)>";
    let id = post(&hb, "dead.xss", json!({"html": xss}));
    hb.wait_status(&id, "failed", Duration::from_secs(20));
    let page = get(&hb, &format!("/console/events/{id}"), None);
    assert_eq!(page.status, 200);
    assert!(!page.text.contains("<script>alert"), "{}", page.text);
    assert!(!page.text.contains("<img src=x"), "{}", page.text);
    assert!(page.text.contains("&lt;script&gt;alert("), "{}", page.text);
    assert!(
        page.text.contains("receiver said no"),
        "the handler's answer"
    );
    assert!(page.text.contains("Replay failed deliveries"));
    // The attempt history: one row per attempt, the last one a dead letter.
    assert!(
        page.text.contains("<tr class=\"attempt\">"),
        "{}",
        page.text
    );
    assert!(page.text.contains("dead_letter"), "{}", page.text);
    let list = get(&hb, "/console/events?event_type=dead.xss", None);
    assert!(list.text.contains(&id), "{}", list.text);
    let dead = get(&hb, "/console/dead-letters", None);
    assert!(!dead.text.contains("<script>alert"));
}

#[test]
fn without_a_token_the_console_is_open_and_says_so() {
    let hb = start(&Db::sqlite(), &[]);
    let page = get(&hb, "/console", None);
    assert_eq!(page.status, 200);
    assert!(page.text.contains("No ADMIN_TOKEN is set"), "{}", page.text);
    assert!(!page.text.contains("Log out"));
    let set = page.header("set-cookie").expect("a session for the forms");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert_eq!(
        get(&hb, "/console/login", None).header("location"),
        Some("/console"),
        "nothing to log in to"
    );
    let cookie = cookie_of(&page);
    let csrf = csrf_in(&get(&hb, "/console/subscribers", Some(&cookie)).text);
    let form = [
        ("name", "shop"),
        ("event_types", "ok.*, order.*"),
        ("url", "https://example.com/hook"),
        ("active", "true"),
    ];
    assert_eq!(
        post_form(&hb, "/console/subscribers", Some(&cookie), &form).status,
        403
    );
    let mut with = form.to_vec();
    with.push(("csrf", &csrf));
    let res = post_form(&hb, "/console/subscribers", Some(&cookie), &with);
    assert_eq!(res.status, 303);
    let sub = hb.call("GET", "/subscribers/shop", None, &[]).json();
    assert_eq!(sub["event_types"], json!(["ok.*", "order.*"]), "{sub}");
    assert_eq!(sub["active"], true);
    let page = get(&hb, "/console/subscribers", Some(&cookie));
    assert!(
        page.text.contains("Subscriber shop created"),
        "{}",
        page.text
    );

    let res = post_form(
        &hb,
        "/console/subscribers/shop/active",
        Some(&cookie),
        &[("csrf", &csrf), ("active", "false")],
    );
    assert_eq!(res.status, 303);
    assert_eq!(
        hb.call("GET", "/subscribers/shop", None, &[]).json()["active"],
        false
    );
    // A refused change shows the API's reason.
    let res = post_form(&hb, "/console/subscribers", Some(&cookie), &with);
    assert_eq!(res.status, 303);
    let page = get(&hb, "/console/subscribers", Some(&cookie));
    assert!(page.text.contains("Not created"), "{}", page.text);
    let res = post_form(
        &hb,
        "/console/subscribers/shop/delete",
        Some(&cookie),
        &[("csrf", &csrf)],
    );
    assert_eq!(res.status, 303);
    assert_eq!(hb.call("GET", "/subscribers/shop", None, &[]).status, 404);
}

on_both_backends! {
fn every_page_answers(db: &Db) {
    let hb = start(db, &[]);
    let ok = post(&hb, "ok.done", json!({"a": 1}));
    let dead = post(&hb, "dead.one", json!({"b": 2}));
    hb.wait_status(&ok, "completed", Duration::from_secs(20));
    hb.wait_status(&dead, "failed", Duration::from_secs(20));
    let refused = hb.post_raw("/ingest/hooks", "{\"type\":\"x\"}", "application/json", &[]);
    assert_eq!(refused.status, 401);
    let pages = [
        "/console".to_owned(),
        "/console/events".into(),
        "/console/events?status=failed&event_type=dead.one&source=&key=".into(),
        format!("/console/events?key={ok}"),
        format!("/console/events/{ok}"),
        format!("/console/events/{dead}"),
        "/console/dead-letters".into(),
        "/console/dead-letters?handler=refuser".into(),
        "/console/dead-letters/replay?event_type=dead.one".into(),
        "/console/subscribers".into(),
        "/console/destinations".into(),
        "/console/sources".into(),
        "/console/assets/console.css".into(),
    ];
    for path in &pages {
        let res = get(&hb, path, None);
        assert_eq!(res.status, 200, "{path}: {}", res.text);
        if !path.ends_with(".css") {
            assert!(res.text.starts_with("<!DOCTYPE html>"), "{path}");
            assert_security_headers(&res);
        }
    }
    let overview = get(&hb, "/console", None).text;
    assert!(overview.contains("<svg"), "the chart");
    assert!(overview.contains("refuser") && overview.contains("acceptor"), "handlers");
    assert!(overview.contains(r#"id="dead-letters">1<"#), "{overview}");
    let events = get(&hb, "/console/events?status=failed", None).text;
    assert!(events.contains(&dead) && !events.contains(&ok));
    let by_key = get(&hb, &format!("/console/events?key={ok}"), None).text;
    assert!(by_key.contains(&format!("/console/events/{ok}")));
    let confirm = get(&hb, "/console/dead-letters/replay?event_type=dead.one", None).text;
    assert!(confirm.contains(r#"id="confirm-count">1<"#), "{confirm}");
    let sources = get(&hb, "/console/sources", None).text;
    assert!(sources.contains("/ingest/hooks") && sources.contains("invalid_signature"), "{sources}");
    assert_eq!(get(&hb, &format!("/console/events/{}", uuid::Uuid::now_v7()), None).status, 404);
    assert_eq!(get(&hb, "/console/events/not-a-uuid", None).status, 404);
    assert_eq!(get(&hb, "/console/events?status=bogus", None).status, 400);
}
}

/// The destinations page lists every handler and pauses or resumes one with a
/// form carrying `csrf`; without it, nothing changes.
#[test]
fn destinations_are_paused_and_resumed_from_the_console() {
    let hb = start(&Db::sqlite(), &[("ADMIN_TOKEN", TOKEN)]);
    let cookie = log_in(&hb);
    let page = get(&hb, "/console/destinations", Some(&cookie));
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(
        page.text.contains("acceptor") && page.text.contains("refuser"),
        "{}",
        page.text
    );
    let token = csrf_in(&page.text);
    let state = |hb: &Hookbox| {
        let auth = format!("Bearer {TOKEN}");
        hb.call(
            "GET",
            "/destinations/acceptor",
            None,
            &[("authorization", &auth)],
        )
        .json()["state"]
            .clone()
    };
    let forged = post_form(
        &hb,
        "/console/destinations/acceptor/pause",
        Some(&cookie),
        &[("csrf", "forged")],
    );
    assert_eq!(forged.status, 403);
    assert_eq!(state(&hb), "healthy");
    let paused = post_form(
        &hb,
        "/console/destinations/acceptor/pause",
        Some(&cookie),
        &[("csrf", &token)],
    );
    assert_eq!(paused.status, 303, "{}", paused.text);
    assert_eq!(state(&hb), "paused");
    let page = get(&hb, "/console/destinations", Some(&cookie)).text;
    assert!(
        page.contains("/console/destinations/acceptor/resume"),
        "{page}"
    );
    let resumed = post_form(
        &hb,
        "/console/destinations/acceptor/resume",
        Some(&cookie),
        &[("csrf", &token)],
    );
    assert_eq!(resumed.status, 303, "{}", resumed.text);
    assert_eq!(state(&hb), "healthy");
}

#[test]
fn a_browser_at_the_root_goes_to_the_console_and_the_log_names_its_url() {
    let hb = start(&Db::sqlite(), &[]);
    let browser = read(
        client()
            .get(format!("{}/", hb.url))
            .header("accept", "text/html,application/xhtml+xml")
            .send()
            .expect("get /"),
    );
    assert!((300..400).contains(&browser.status), "{}", browser.status);
    assert_eq!(browser.header("location"), Some("/console"));
    let api = read(client().get(format!("{}/", hb.url)).send().expect("get /"));
    assert_eq!(api.status, 404, "an API client still gets problem+json");
    assert_eq!(api.json()["code"], "not_found");
    let console = format!("{}/console", hb.url);
    assert!(
        hb.logs().iter().any(|l| l.contains(&console)),
        "the startup log names {console}: {:?}",
        hb.logs()
    );
}

#[test]
fn a_test_event_sent_from_the_console_goes_through_intake_and_opens() {
    let hb = start(&Db::sqlite(), &[("ADMIN_TOKEN", TOKEN)]);
    let cookie = log_in(&hb);
    let page = get(&hb, "/console/events", Some(&cookie));
    assert!(page.text.contains("Send a test event"), "{}", page.text);
    let csrf = csrf_in(&page.text);
    let forged = post_form(
        &hb,
        "/console/events/test",
        Some(&cookie),
        &[("csrf", "0000"), ("event_type", "ok.forged")],
    );
    assert_eq!(forged.status, 403, "{}", forged.text);
    let sent = post_form(
        &hb,
        "/console/events/test",
        Some(&cookie),
        &[
            ("csrf", &csrf),
            ("event_type", "ok.test"),
            ("payload", r#"{"hello": "world"}"#),
        ],
    );
    assert_eq!(sent.status, 303, "{}", sent.text);
    let to = sent.header("location").expect("location").to_owned();
    let id = to.strip_prefix("/console/events/").expect("an event page");
    let ev = hb.wait_status(id, "completed", Duration::from_secs(20));
    assert_eq!(ev["event_type"], "ok.test", "routed to the acceptor: {ev}");
    let shown = get(&hb, &to, Some(&cookie));
    assert!(
        shown.text.contains("Test event ok.test accepted"),
        "{}",
        shown.text
    );
    let bad = post_form(
        &hb,
        "/console/events/test",
        Some(&cookie),
        &[
            ("csrf", &csrf),
            ("event_type", "ok.test"),
            ("payload", "{not json"),
        ],
    );
    assert_eq!(bad.header("location"), Some("/console/events"));
    let after = get(&hb, "/console/events", Some(&cookie));
    assert!(
        after.text.contains("The payload is not JSON"),
        "{}",
        after.text
    );
}

/// The sources page lists a source's rejected requests with a retry form (with
/// `csrf`); once the secret is fixed, retrying ingests the request and empties
/// the log; a forged form changes nothing.
#[test]
fn a_rejected_request_is_retried_from_the_sources_page() {
    use hmac::{Hmac, KeyInit, Mac};
    let dir = new_dir();
    write(
        dir.path(),
        "sources/gh.toml",
        "kind = \"github\"\nsecret_env = \"GH\"\n",
    );
    let sources = dir
        .path()
        .join("sources")
        .to_str()
        .expect("utf-8")
        .to_owned();
    let start = |secret: &str| {
        let env = [
            ("SOURCES_DIR", sources.as_str()),
            ("GH", secret),
            ("ADMIN_TOKEN", TOKEN),
        ];
        Hookbox::restart(dir.clone(), &env)
    };
    let hb = start("the-old-secret");
    let body = r#"{"zen":"retry me"}"#;
    let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(b"the-new-secret").expect("key");
    mac.update(body.as_bytes());
    let sig: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let sig = format!("sha256={sig}");
    let headers = [
        ("x-github-event", "ping"),
        ("x-github-delivery", "d-1"),
        ("x-hub-signature-256", sig.as_str()),
    ];
    assert_eq!(
        hb.post_raw("/ingest/gh", body, "application/json", &headers)
            .status,
        401
    );
    drop(hb);
    let hb = start("the-new-secret");
    let cookie = log_in(&hb);
    let page = get(&hb, "/console/sources", Some(&cookie));
    assert!(
        page.text.contains("retry me") && page.text.contains("Retry all"),
        "{}",
        page.text
    );
    let token = csrf_in(&page.text);
    let listing = |hb: &Hookbox| {
        let auth = format!("Bearer {TOKEN}");
        hb.call(
            "GET",
            "/sources/gh/rejected",
            None,
            &[("authorization", &auth)],
        )
        .json()["items"]
            .clone()
    };
    let id = listing(&hb)[0]["id"].as_str().expect("id").to_owned();
    let action = "/console/sources/gh/rejected/retry";
    let forged = post_form(
        &hb,
        action,
        Some(&cookie),
        &[("csrf", "forged"), ("id", &id)],
    );
    assert_eq!(forged.status, 403);
    assert_eq!(listing(&hb).as_array().expect("items").len(), 1);
    let done = post_form(&hb, action, Some(&cookie), &[("csrf", &token), ("id", &id)]);
    assert_eq!(done.status, 303, "{}", done.text);
    assert_eq!(listing(&hb).as_array().expect("items").len(), 0);
    let page = get(&hb, "/console/sources", Some(&cookie)).text;
    assert!(page.contains("ingested"), "the flash says so: {page}");
}

/// Issue 27, item 12: subscribers are listed in pages by name, in the API
/// (`limit`, `cursor`, `next_cursor`) and in the console (100 a page, "Next"),
/// instead of all at once (8,000 made a 7 MB console page).
#[test]
fn subscribers_are_listed_in_pages_by_name() {
    let hb = start(&Db::sqlite(), &[]);
    let names: Vec<String> = (0..130).rev().map(|i| format!("sub-{i:03}")).collect();
    for name in &names {
        let r = hb.call(
            "POST",
            "/subscribers",
            Some(&json!({"name": name, "event_types": ["x.*"], "url": "https://example.com/hook"})),
            &[],
        );
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("/subscribers?limit=50&cursor={c}"),
            None => "/subscribers?limit=50".to_owned(),
        };
        let page = hb.get(&path).expect("list").json();
        pages += 1;
        let items = page["items"].as_array().expect("items");
        assert!(items.len() <= 50, "{}", items.len());
        seen.extend(
            items
                .iter()
                .map(|s| s["name"].as_str().expect("name").to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!((pages, seen), (3, sorted), "every subscriber once, by name");
    assert_eq!(hb.get("/subscribers?limit=0").expect("list").status, 400);
    // The console: 100 on the first page, the rest after "Next".
    let first = get(&hb, "/console/subscribers", None);
    assert_eq!(first.text.matches("id=\"subscriber-").count(), 100);
    assert!(
        first.text.contains("/console/subscribers?cursor=sub-099"),
        "no next link"
    );
    let cookie = cookie_of(&first);
    let second = get(&hb, "/console/subscribers?cursor=sub-099", Some(&cookie));
    assert_eq!(second.text.matches("id=\"subscriber-").count(), 30);
    assert!(second.text.contains("id=\"subscriber-sub-129\""));
}
