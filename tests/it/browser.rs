//! The console in a real browser: headless Chromium driven through chromedriver
//! (WebDriver) with fantoccini, against the real binary. One scenario, as an
//! operator lives it: log in, find an event through the filters, open it, see its
//! deliveries and answers, replay its dead letter and watch it complete, create a
//! subscriber and edit it, send a test event, read a pull source's cursor; and a
//! payload carrying a stored-XSS attempt shows as text and runs
//! nothing. A PNG of each page is kept in `target/console-screenshots/`.
//!
//! Without `/usr/bin/chromedriver` (or the path in `CHROMEDRIVER`) the test skips
//! with one line; with `HOOKBOX_REQUIRE_BROWSER=1` (CI) it fails instead.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use crate::harness::{Hookbox, exec_manifest, new_dir, script, write};
use crate::receiver::{Answer, Receiver};

const TOKEN: &str = "browser-admin-token-0123456789";

/// chromedriver, started on a free port; killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The chromedriver to use, or `None` after saying (once) that the browser tests
/// are skipped. Panics instead when `HOOKBOX_REQUIRE_BROWSER=1`.
fn chromedriver() -> Option<PathBuf> {
    let path = PathBuf::from(
        std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into()),
    );
    if path.exists() {
        return Some(path);
    }
    let required = std::env::var("HOOKBOX_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "HOOKBOX_REQUIRE_BROWSER=1 but there is no chromedriver at {} (apt-get install chromium chromium-driver)",
        path.display()
    );
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "skipped: browser tests (no chromedriver at {}; apt-get install chromium chromium-driver)",
        path.display()
    );
    None
}

fn start_driver(path: &Path) -> Driver {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(path)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn chromedriver");
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while reqwest::blocking::get(format!("{url}/status")).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    Driver { child, url }
}

/// A headless Chromium session with a fresh profile.
async fn browser(driver: &Driver, profile: &Path) -> Client {
    let mut caps = fantoccini::wd::Capabilities::new();
    let binary = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": binary,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,900",
                format!("--user-data-dir={}", profile.display()),
            ],
        }),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a Chromium session")
}

/// Where screenshots go: `<target>/console-screenshots/`.
fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("console-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    dir
}

async fn snap(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    std::fs::write(screenshot_dir().join(format!("{name}.png")), png).expect("write png");
}

/// The page's text (what a reader sees); waits while a page is still loading
/// (its body not there yet).
async fn text(c: &Client) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let read = async { c.find(Locator::Css("body")).await?.text().await };
        match read.await {
            Ok(t) => return t,
            Err(e) => assert!(Instant::now() < deadline, "no page body: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the browser's address contains `what`: a submission or a click
/// returns before its navigation is done, and the old page may already hold the
/// text the next step waits for.
async fn until_url(c: &Client, what: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let url = c.current_url().await.expect("url").to_string();
        if url.contains(what) {
            return;
        }
        assert!(Instant::now() < deadline, "never at {what:?}; at {url}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the page a form submission leads to shows `what` (its flash
/// message), without reloading: the flash is shown once, and the submission's
/// navigation may still be under way when the first look reads the old page.
async fn until_flash(c: &Client, what: &str, timeout: Duration) -> String {
    until_page_says(c, what, timeout, false).await
}

/// Waits until the page's text contains `what`, reloading every half second.
async fn until_text(c: &Client, what: &str, timeout: Duration) -> String {
    until_page_says(c, what, timeout, true).await
}

/// Reads the page's text until it contains `what`: every half second after a
/// reload when `reload`, else every 100 ms as it stands.
async fn until_page_says(c: &Client, what: &str, timeout: Duration, reload: bool) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        let now = text(c).await;
        if now.contains(what) {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "never saw {what:?}; the page says:\n{now}"
        );
        if reload {
            tokio::time::sleep(Duration::from_millis(500)).await;
            c.refresh().await.expect("refresh");
        } else {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Whether the XSS payload ran anywhere: it would set `window.pwned` or the title.
async fn assert_nothing_ran(c: &Client) {
    let ran = c
        .execute(
            "return [window.pwned === true, document.title.includes('pwned'), \
             document.querySelectorAll('script').length, \
             document.querySelectorAll('img[src=\"x\"]').length];",
            vec![],
        )
        .await
        .expect("execute");
    assert_eq!(
        ran,
        json!([false, false, 0, 0]),
        "the payload ran or became markup"
    );
}

#[test]
fn an_operator_finds_replays_and_subscribes_in_a_real_browser() {
    let Some(path) = chromedriver() else { return };
    let dir = new_dir();
    let go = dir.path().join("go");
    let flaky = script(
        dir.path(),
        "flaky.sh",
        &format!(
            "cat >/dev/null; if [ -e {} ]; then exit 0; fi; echo 'billing said 503: try later' >&2; exit 65",
            go.display()
        ),
    );
    exec_manifest(dir.path(), "billing", r#"["order.*"]"#, &flaky, "");
    // A pull source whose upstream always has one item, 7: its cursor becomes 7.
    let upstream = Receiver::start();
    upstream
        .set_default(Answer::status(200).body(r#"{"data": [{"id": 7, "type": "entry.posted"}]}"#));
    write(
        dir.path(),
        "sources/ledger.toml",
        &format!(
            "kind = \"poll\"\nevent_type_prefix = \"ledger.\"\n[poll]\nurl = \"{}/v1/entries\"\n\
             cursor_param = \"after\"\ninterval = \"1s\"\nitems = \"/data\"\nid = \"/id\"\n\
             event_type = \"/type\"\ncursor = \"/id\"\n",
            upstream.url
        ),
    );
    let sources = dir.path().join("sources").display().to_string();
    let hb = Hookbox::restart(
        dir.clone(),
        &[("ADMIN_TOKEN", TOKEN), ("SOURCES_DIR", &sources)],
    );
    let xss = "<script>window.pwned=true;document.title='pwned'</script>\
               <img src=\"x\" onerror=\"window.pwned=true\">";
    let posted = hb.post(
        &json!({"event_type": "order.created", "payload": {"note": xss, "order": 42}}),
        &[("Idempotency-Key", "order-42")],
    );
    assert_eq!(posted.status, 202, "{}", posted.text);
    let id = posted.json()["id"].as_str().expect("id").to_owned();
    for n in 0..3 {
        hb.post(
            &json!({"event_type": "other.thing", "payload": {"n": n}}),
            &[],
        );
    }
    hb.wait_status(&id, "failed", Duration::from_secs(30));

    let driver = start_driver(&path);
    let profile = tempfile::tempdir().expect("profile dir");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let c = browser(&driver, profile.path()).await;
        let base = &hb.url;

        // Log in: the console sends an unknown visitor to the form first.
        c.goto(&format!("{base}/console/events"))
            .await
            .expect("goto");
        assert!(
            c.current_url()
                .await
                .expect("url")
                .path()
                .ends_with("/console/login")
        );
        snap(&c, "login").await;
        let form = c.form(Locator::Css("form")).await.expect("login form");
        form.set_by_name("token", TOKEN).await.expect("token");
        form.submit().await.expect("submit");
        let page = until_text(&c, "Events", Duration::from_secs(10)).await;
        assert!(
            c.current_url()
                .await
                .expect("url")
                .path()
                .ends_with("/console/events")
        );
        assert!(page.contains("Log out"), "{page}");

        // Find the event through the filters.
        let filters = c.form(Locator::Css("form.filters")).await.expect("filters");
        c.find(Locator::Css("select[name=status]"))
            .await
            .expect("status")
            .select_by_value("failed")
            .await
            .expect("select");
        filters
            .set_by_name("event_type", "order.created")
            .await
            .expect("type");
        filters.submit().await.expect("filter");
        until_url(&c, "status=failed", Duration::from_secs(10)).await;
        let listed = until_text(&c, &id, Duration::from_secs(10)).await;
        assert!(!listed.contains("other.thing"), "filtered: {listed}");
        snap(&c, "events").await;

        // Open it: the payload shows as text, the handler's answer is there.
        c.find(Locator::Css(&format!("a[href='/console/events/{id}']")))
            .await
            .expect("the event's link")
            .click()
            .await
            .expect("click");
        until_url(
            &c,
            &format!("/console/events/{id}"),
            Duration::from_secs(10),
        )
        .await;
        let event = until_text(&c, "billing said 503", Duration::from_secs(10)).await;
        assert!(
            event.contains("<script>window.pwned=true"),
            "shown as text: {event}"
        );
        assert!(event.contains("order-42"));
        // Every attempt is a row, with its outcome and the answer.
        let attempts = c
            .find_all(Locator::Css("tr.attempt"))
            .await
            .expect("attempt rows");
        assert!(!attempts.is_empty(), "attempt rows: {event}");
        let first = attempts[0].text().await.expect("row text");
        assert!(first.contains("503"), "the first attempt's answer: {first}");
        assert_nothing_ran(&c).await;
        snap(&c, "event").await;

        // The overview counts it as a dead letter.
        c.goto(&format!("{base}/console")).await.expect("goto");
        let overview = text(&c).await;
        assert!(overview.contains("Dead letters"), "{overview}");
        let dead = c
            .find(Locator::Id("dead-letters"))
            .await
            .expect("tile")
            .text()
            .await
            .expect("text");
        assert_eq!(dead, "1");
        snap(&c, "overview").await;
        c.set_window_size(390, 844).await.expect("phone size");
        snap(&c, "overview-phone").await;
        c.set_window_size(1280, 900).await.expect("desktop size");

        // Replay the dead letter once the receiver is fixed, and watch it complete.
        std::fs::write(&go, "").expect("go");
        c.goto(&format!("{base}/console/dead-letters"))
            .await
            .expect("goto");
        until_text(&c, "billing said 503", Duration::from_secs(10)).await;
        assert_nothing_ran(&c).await;
        snap(&c, "dead-letters").await;
        c.find(Locator::Css("article.delivery form button"))
            .await
            .expect("replay button")
            .click()
            .await
            .expect("replay");
        until_flash(&c, "Replayed 1 delivery", Duration::from_secs(10)).await;
        c.goto(&format!("{base}/console/events/{id}"))
            .await
            .expect("goto");
        until_text(&c, "completed", Duration::from_secs(30)).await;
        let badge = c
            .find(Locator::Css("h1 .badge"))
            .await
            .expect("status")
            .text()
            .await
            .expect("text");
        assert_eq!(badge, "completed");

        // Create a subscriber.
        c.goto(&format!("{base}/console/subscribers"))
            .await
            .expect("goto");
        let form = c
            .form(Locator::Css("form#new-subscriber"))
            .await
            .expect("form");
        form.set_by_name("name", "crm").await.expect("name");
        form.set_by_name("event_types", "order.*, customer.*")
            .await
            .expect("types");
        form.set_by_name("url", "https://crm.example.com/hooks")
            .await
            .expect("url");
        form.set_by_name("backoff", "5s, 30s")
            .await
            .expect("backoff");
        form.submit().await.expect("create");
        let page = until_flash(&c, "Subscriber crm created", Duration::from_secs(10)).await;
        assert!(page.contains("https://crm.example.com/hooks"), "{page}");
        snap(&c, "subscribers").await;

        // Edit it: only customer events from now on, four attempts at once.
        c.find(Locator::Css("#subscriber-crm details.edit summary"))
            .await
            .expect("the edit toggle")
            .click()
            .await
            .expect("open");
        let edit = c
            .form(Locator::Css("#subscriber-crm form.edit-subscriber"))
            .await
            .expect("edit form");
        edit.set_by_name("event_types", "customer.*")
            .await
            .expect("types");
        edit.set_by_name("max_in_flight", "4")
            .await
            .expect("max in flight");
        snap(&c, "subscriber-edit").await;
        edit.submit().await.expect("save");
        until_flash(&c, "Subscriber crm changed", Duration::from_secs(10)).await;

        // Send a test event from the Events page; it opens, and billing takes it.
        c.goto(&format!("{base}/console/events"))
            .await
            .expect("goto");
        c.find(Locator::Css("details.test-event summary"))
            .await
            .expect("the test event toggle")
            .click()
            .await
            .expect("open");
        let test = c
            .form(Locator::Css("details.test-event form"))
            .await
            .expect("test form");
        test.set_by_name("event_type", "order.tested")
            .await
            .expect("type");
        test.submit().await.expect("send");
        until_flash(
            &c,
            "Test event order.tested accepted",
            Duration::from_secs(10),
        )
        .await;
        until_url(&c, "/console/events/", Duration::from_secs(10)).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let badge = c
                .find(Locator::Css("h1 .badge"))
                .await
                .expect("status")
                .text()
                .await
                .expect("text");
            if badge == "completed" {
                break;
            }
            assert!(Instant::now() < deadline, "the test event stayed {badge}");
            tokio::time::sleep(Duration::from_millis(500)).await;
            c.refresh().await.expect("refresh");
        }
        let tested = text(&c).await;
        assert!(
            tested.contains("order.tested") && tested.contains("billing"),
            "{tested}"
        );

        // The pull source's cursor, as GET /sources says it.
        c.goto(&format!("{base}/console/sources"))
            .await
            .expect("goto");
        let mut cursor = String::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while cursor != "7" {
            assert!(
                Instant::now() < deadline,
                "the cursor never showed 7: {cursor:?}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
            c.refresh().await.expect("refresh");
            cursor = c
                .find(Locator::Css("#source-ledger code.cursor"))
                .await
                .expect("the ledger's cursor")
                .text()
                .await
                .expect("text");
        }
        snap(&c, "sources").await;
        c.close().await.expect("close");
    });
    let auth = format!("Bearer {TOKEN}");
    let sub = hb.call("GET", "/subscribers/crm", None, &[("authorization", &auth)]);
    assert_eq!(sub.status, 200, "{}", sub.text);
    let sub = sub.json();
    assert_eq!(sub["event_types"], json!(["customer.*"]), "edited: {sub}");
    assert_eq!(sub["max_in_flight"], 4, "edited: {sub}");
    assert_eq!(sub["backoff"], json!(["5s", "30s"]), "kept: {sub}");
    assert_eq!(sub["url"], "https://crm.example.com/hooks", "kept: {sub}");
    let listed = hb
        .call("GET", "/sources", None, &[("authorization", &auth)])
        .json();
    assert_eq!(listed["items"][0]["cursor"], 7, "{listed}");
}
