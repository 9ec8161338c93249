//! Hardening (issue 9): what exec children may see, outbound requests and proxies,
//! credentials in subscriber URLs, durations that are too long, and request ids.

use std::io::Read;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::harness::{Hookbox, client, eventually, exec_manifest, new_dir, script, write};
use crate::receiver::Receiver;

const WAIT: Duration = Duration::from_secs(20);
const LOOPBACK: (&str, &str) = ("ALLOWED_TARGETS", "127.0.0.0/8");
const ADMIN_TOKEN: &str = "admin-token-never-for-children";
/// A valid `whsec_` secret (base64 of 32 bytes).
const SIGNING_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSwMfKQ9r8GKYo=";

fn post(hb: &Hookbox, event_type: &str) -> String {
    let r = hb.post(&json!({"event_type": event_type, "payload": {"n": 1}}), &[]);
    assert_eq!(r.status, 202, "{}", r.text);
    r.json()["id"].as_str().expect("id").to_owned()
}

/// Runs `hookbox` with `args` on `dir` (a clean environment plus `env`), and waits
/// for it to exit; `None` as the code when it was still running after `limit` (and
/// was killed then).
fn run_until_exit(dir: &Path, args: &[&str], env: &[(&str, &str)], limit: Duration) -> Output {
    let mut child = crate::harness::hookbox_in(dir)
        .env("DB_PATH", dir.join("events.db"))
        .env("BIND_ADDR", "127.0.0.1:0")
        .env("HANDLERS_DIR", dir.join("handlers"))
        .envs(env.iter().copied())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn hookbox");
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline && child.try_wait().expect("try_wait").is_none() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    child.wait_with_output().expect("output")
}

// ---------------------------------------------------------------------------
// Exec children: a clean environment (docs/handlers.md, "exec")
// ---------------------------------------------------------------------------

/// An http manifest that names `var` as its `secret_env` (it never delivers).
fn signed_manifest(dir: &Path, var: &str) {
    write(
        dir,
        "handlers/signed.toml",
        &format!(
            "event_types = [\"never.sent\"]\nkind = \"http\"\n[http]\nurl = \"https://example.com/hook\"\nsecret_env = \"{var}\"\n"
        ),
    );
}

#[test]
fn exec_children_inherit_no_secrets_and_no_stray_variables() {
    let dir = new_dir();
    let env_file = dir.path().join("child.env");
    let s = script(
        dir.path(),
        "dump.sh",
        &format!("env > {}; env >&2; exit 1", env_file.display()),
    );
    exec_manifest(dir.path(), "dump", r#"["dump"]"#, &s, "max_attempts = 1");
    signed_manifest(dir.path(), "SIGNING_SECRET_FOR_TESTS");
    let database_url = format!("sqlite://{}", dir.path().join("events.db").display());
    let hb = Hookbox::restart(
        dir.clone(),
        &[
            ("ADMIN_TOKEN", ADMIN_TOKEN),
            ("DATABASE_URL", &database_url),
            ("SIGNING_SECRET_FOR_TESTS", SIGNING_SECRET),
            ("INHERITED_BY_ACCIDENT", "stray-value"),
            ("HOOKBOX_INHERITED", "stray-hookbox-value"),
            ("HOME", "/home/for-tests"),
            ("LANG", "C.UTF-8"),
            ("TZ", "UTC"),
        ],
    );
    let id = post(&hb, "dump");
    hb.wait_status(&id, "failed", WAIT);
    // With a token set, GET /webhooks/{id} without it shows status, not content;
    // with it, the child's stderr — which must still be harmless.
    let shown = hb.get(&format!("/webhooks/{id}")).expect("get");
    assert_eq!(shown.status, 200);
    assert!(shown.json()["last_error"].is_null(), "{}", shown.text);
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let open = hb.call(
        "GET",
        &format!("/webhooks/{id}"),
        None,
        &[("authorization", &auth)],
    );
    assert_eq!(open.status, 200);
    assert!(
        open.text.contains("PATH="),
        "the child's stderr is in last_error: {}",
        open.text
    );
    let child_env = std::fs::read_to_string(&env_file).expect("the child's env");
    for secret in [
        ADMIN_TOKEN,
        "DATABASE_URL",
        SIGNING_SECRET,
        "SIGNING_SECRET_FOR_TESTS",
        "stray-value",
        "HOOKBOX_INHERITED",
    ] {
        assert!(
            !open.text.contains(secret),
            "{secret} leaked into last_error: {}",
            open.text
        );
        assert!(
            !child_env.contains(secret),
            "{secret} leaked to the child:\n{child_env}"
        );
    }
    for expected in [
        "PATH=",
        "HOME=/home/for-tests",
        "LANG=C.UTF-8",
        "TZ=UTC",
        &format!("HOOKBOX_EVENT_ID={id}"),
        "HOOKBOX_EVENT_TYPE=dump",
        "HOOKBOX_ATTEMPT=1",
    ] {
        assert!(
            child_env.lines().any(|l| l.starts_with(expected)),
            "{expected} missing from the child's env:\n{child_env}"
        );
    }
}

#[test]
fn exec_children_get_the_variables_their_manifest_lists() {
    let dir = new_dir();
    let env_file = dir.path().join("child.env");
    let s = script(
        dir.path(),
        "dump.sh",
        &format!("env > {}", env_file.display()),
    );
    write(
        dir.path(),
        "handlers/dump.toml",
        &format!(
            "event_types = [\"dump\"]\nkind = \"exec\"\n[exec]\ncommand = [\"{}\"]\nenv = [\"SMTP_URL\"]\n",
            s.display()
        ),
    );
    let hb = Hookbox::restart(
        dir.clone(),
        &[
            ("SMTP_URL", "smtp://mail.example.com"),
            ("NOT_LISTED", "stray-value"),
        ],
    );
    let id = post(&hb, "dump");
    hb.wait_status(&id, "completed", WAIT);
    let child_env = std::fs::read_to_string(&env_file).expect("the child's env");
    assert!(
        child_env
            .lines()
            .any(|l| l == "SMTP_URL=smtp://mail.example.com"),
        "{child_env}"
    );
    assert!(!child_env.contains("stray-value"), "{child_env}");
}

#[test]
fn an_exec_env_list_naming_a_secret_or_an_unset_variable_exits_2() {
    for (listed, why) in [
        ("ADMIN_TOKEN", "ADMIN_TOKEN"),
        ("DATABASE_URL", "DATABASE_URL"),
        ("SIGNING_SECRET_FOR_TESTS", "secret_env"),
        ("HOOKBOX_EVENT_ID", "HOOKBOX_"),
        ("NOT_SET_ANYWHERE", "not set"),
    ] {
        let dir = new_dir();
        signed_manifest(dir.path(), "SIGNING_SECRET_FOR_TESTS");
        write(
            dir.path(),
            "handlers/leaky.toml",
            &format!(
                "event_types = [\"a\"]\nkind = \"exec\"\n[exec]\ncommand = [\"/bin/true\"]\nenv = [\"{listed}\"]\n"
            ),
        );
        let env = [
            ("ADMIN_TOKEN", ADMIN_TOKEN),
            ("SIGNING_SECRET_FOR_TESTS", SIGNING_SECRET),
            ("HOOKBOX_EVENT_ID", "x"),
        ];
        let out = run_until_exit(dir.path(), &["serve"], &env, Duration::from_secs(15));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{listed}: {stderr}");
        assert!(
            stderr.contains("leaky.toml")
                && stderr.contains("exec.env")
                && stderr.contains(listed)
                && stderr.contains(why),
            "{listed}: {stderr}"
        );
        assert!(!stderr.contains(ADMIN_TOKEN) && !stderr.contains(SIGNING_SECRET));
    }
}

/// Kills a process by the pid written in a file, when dropped.
struct KillPidFile(std::path::PathBuf);

impl Drop for KillPidFile {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(&self.0) {
            let _ = Command::new("kill").args(["-9", pid.trim()]).status();
        }
    }
}

#[test]
fn a_grandchild_holding_stderr_does_not_turn_a_success_into_a_timeout() {
    let dir = new_dir();
    let pid_file = dir.path().join("grandchild.pid");
    let _cleanup = KillPidFile(pid_file.clone());
    // The grandchild leaves the process group (setsid), so killing the group at the
    // end of the attempt does not close the stderr it holds.
    let s = script(
        dir.path(),
        "daemon.sh",
        &format!(
            // The script waits for the pid file, so that the group kill at its exit
            // cannot catch the grandchild before it has left the group.
            "setsid sh -c 'echo $$ > {0}; exec sleep 30' &\n\
             while [ ! -s {0} ]; do sleep 0.05; done\necho started >&2\nexit 0",
            pid_file.display()
        ),
    );
    exec_manifest(
        dir.path(),
        "daemon",
        r#"["daemon"]"#,
        &s,
        "max_attempts = 1\ntimeout = \"3s\"",
    );
    let hb = Hookbox::restart(dir.clone(), &[]);
    let id = post(&hb, "daemon");
    let ev = hb.wait_status(&id, "completed", WAIT);
    assert_eq!(ev["attempts"], 1, "{ev}");
    eventually(WAIT, "the grandchild's pid", || {
        pid_file.exists().then_some(())
    });
}

// ---------------------------------------------------------------------------
// Outbound requests: no proxy from the environment, and credentials hidden
// ---------------------------------------------------------------------------

/// A listener that counts the connections it gets and closes each at once.
struct FakeProxy {
    url: String,
    contacted: Arc<AtomicUsize>,
}

impl FakeProxy {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let contacted = Arc::new(AtomicUsize::new(0));
        let count = contacted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                count.fetch_add(1, Ordering::SeqCst);
                let mut stream = stream;
                let mut buf = [0u8; 1024];
                let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
                let _ = stream.read(&mut buf);
                drop(stream);
            }
        });
        Self { url, contacted }
    }
}

#[test]
fn outbound_requests_ignore_proxy_variables() {
    let rx = Receiver::start();
    let proxy = FakeProxy::start();
    let dir = new_dir();
    crate::harness::http_manifest(
        dir.path(),
        "direct",
        r#"["direct"]"#,
        &format!("{}/hook", rx.url),
        "max_attempts = 1",
        "",
    );
    let hb = Hookbox::restart(
        dir,
        &[
            LOOPBACK,
            ("HTTP_PROXY", &proxy.url),
            ("http_proxy", &proxy.url),
            ("HTTPS_PROXY", &proxy.url),
            ("ALL_PROXY", &proxy.url),
        ],
    );
    let id = post(&hb, "direct");
    let ev = hb.wait_status(&id, "completed", WAIT);
    assert_eq!(ev["attempts"], 1, "{ev}");
    let got = rx.wait_for(1, WAIT);
    assert_eq!(got[0].webhook_id(), id);
    assert_eq!(
        proxy.contacted.load(Ordering::SeqCst),
        0,
        "the proxy was contacted"
    );
}

#[test]
fn subscriber_urls_are_answered_without_credentials_but_delivered_with_them() {
    let rx = Receiver::start();
    let hb = Hookbox::start(&[LOOPBACK]);
    let port = rx.port;
    let url = format!("http://hook-user:hook-password@127.0.0.1:{port}/sub");
    let shown = format!("http://127.0.0.1:{port}/sub");
    let body = json!({"name": "creds", "event_types": ["creds.*"], "url": url});
    let created = hb.call("POST", "/subscribers", Some(&body), &[]);
    assert_eq!(created.status, 201, "{}", created.text);
    let patched = hb.call(
        "PATCH",
        "/subscribers/creds",
        Some(&json!({"url": url.replace("/sub", "/sub2")})),
        &[],
    );
    assert_eq!(patched.status, 200, "{}", patched.text);
    let one = hb.call("GET", "/subscribers/creds", None, &[]);
    let list = hb.call("GET", "/subscribers", None, &[]);
    for (what, reply) in [
        ("POST", &created),
        ("PATCH", &patched),
        ("GET one", &one),
        ("GET list", &list),
    ] {
        assert!(
            !reply.text.contains("hook-password") && !reply.text.contains("hook-user"),
            "{what} shows the credentials: {}",
            reply.text
        );
    }
    assert_eq!(created.json()["url"], shown);
    assert_eq!(one.json()["url"], format!("{shown}2"));
    assert_eq!(list.json()["items"][0]["url"], format!("{shown}2"));
    // The stored URL keeps them: the delivery carries them as basic auth.
    let id = post(&hb, "creds.sent");
    hb.wait_status(&id, "completed", WAIT);
    let got = rx.wait_for(1, WAIT);
    assert_eq!(got[0].path, "/sub2");
    assert_eq!(
        got[0].header("authorization"),
        Some("Basic aG9vay11c2VyOmhvb2stcGFzc3dvcmQ="),
        "base64 of hook-user:hook-password"
    );
}

#[test]
fn handlers_check_shows_manifest_urls_without_credentials() {
    let dir = new_dir();
    crate::harness::http_manifest(
        dir.path(),
        "creds",
        r#"["a"]"#,
        "https://hook-user:hook-password@example.com/hook",
        "",
        "",
    );
    let out = run_until_exit(
        dir.path(),
        &["handlers", "check"],
        &[],
        Duration::from_secs(15),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("https://example.com/hook"), "{stdout}");
    assert!(!stdout.contains("hook-password"), "{stdout}");
}

// ---------------------------------------------------------------------------
// Durations: over 30 days is bad configuration (docs/configuration.md)
// ---------------------------------------------------------------------------

#[test]
fn manifest_durations_over_30_days_exit_2_naming_file_and_field() {
    for (extra, field) in [
        // Past the retry timer's range: the timer task panicked on the first retry.
        ("backoff = [\"100000000s\"]", "backoff"),
        ("backoff = [\"1s\", \"31days\"]", "backoff"),
        ("timeout = \"100000000s\"", "timeout"),
        ("timeout = \"0s\"", "timeout"),
    ] {
        let dir = new_dir();
        let s = script(dir.path(), "fail.sh", "exit 1");
        exec_manifest(dir.path(), "years", r#"["years"]"#, &s, extra);
        let out = run_until_exit(dir.path(), &["serve"], &[], Duration::from_secs(15));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra}: {stderr}");
        assert!(
            stderr.contains("years.toml") && stderr.contains(field),
            "{extra}: {stderr}"
        );
    }
    // Exactly 30 days is fine.
    let dir = new_dir();
    let s = script(dir.path(), "fail.sh", "exit 1");
    exec_manifest(
        dir.path(),
        "month",
        r#"["month"]"#,
        &s,
        "backoff = [\"30days\"]\ntimeout = \"30days\"",
    );
    let out = run_until_exit(
        dir.path(),
        &["handlers", "check"],
        &[],
        Duration::from_secs(15),
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_subscriber_backoff_over_30_days_is_422() {
    let rx = Receiver::start();
    let hb = Hookbox::start(&[LOOPBACK]);
    let body = |backoff: Value| json!({"name": "slow", "event_types": ["slow"], "url": rx.url, "backoff": backoff});
    let r = hb.call(
        "POST",
        "/subscribers",
        Some(&body(json!(["100000000s"]))),
        &[],
    );
    r.assert_problem(422, "invalid_subscriber");
    assert!(
        r.json()["detail"]
            .as_str()
            .expect("detail")
            .contains("backoff")
    );
    let ok = hb.call("POST", "/subscribers", Some(&body(json!(["30days"]))), &[]);
    assert_eq!(ok.status, 201, "{}", ok.text);
    let r = hb.call(
        "PATCH",
        "/subscribers/slow",
        Some(&json!({"backoff": ["1s", "31days"]})),
        &[],
    );
    r.assert_problem(422, "invalid_subscriber");
}

// ---------------------------------------------------------------------------
// X-Request-ID: echoed only when 1–200 visible ASCII characters (docs/api.md)
// ---------------------------------------------------------------------------

#[test]
fn request_ids_that_are_too_long_or_not_printable_are_replaced() {
    let hb = Hookbox::start(&[]);
    let echoed = |value: &[u8]| -> String {
        let res = client()
            .get(format!("{}/health", hb.url))
            .header(
                "x-request-id",
                reqwest::header::HeaderValue::from_bytes(value).expect("header value"),
            )
            .send()
            .expect("send");
        res.headers()["x-request-id"]
            .to_str()
            .expect("ascii")
            .to_owned()
    };
    let longest = "r".repeat(200);
    for good in ["a", "caller-id_1.2:3/~!", longest.as_str()] {
        assert_eq!(echoed(good.as_bytes()), good);
    }
    let too_long = "r".repeat(201);
    for bad in [
        too_long.as_bytes(),
        b"",
        b"has space",
        b"tab\there",
        "caf\u{e9}".as_bytes(),
    ] {
        let got = echoed(bad);
        assert!(
            uuid::Uuid::parse_str(&got).is_ok(),
            "{:?} should be replaced by a UUID, got {got:?}",
            String::from_utf8_lossy(bad)
        );
    }
}
