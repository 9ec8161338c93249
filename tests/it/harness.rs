//! Starting and stopping the real binary, and talking to it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running `hookbox serve` with its own data directory.
pub struct Hookbox {
    child: Child,
    pub url: String,
    pub dir: Arc<tempfile::TempDir>,
    pub logs: Arc<Mutex<Vec<String>>>,
}

/// The path of the binary under test: `HOOKBOX_TEST_BIN` if set (a copy that a
/// build sharing the target directory cannot replace mid-run), else cargo's.
pub fn bin() -> String {
    std::env::var("HOOKBOX_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_hookbox").to_owned())
}

/// The `hookbox` binary to run in `dir` with an empty environment but `PATH`:
/// nothing of the repository (its `handlers/`, `sources/`, `config/`, `.env`) nor
/// of the caller's environment reaches it, wherever `cargo test` runs. Every test
/// runs the binary through this (`docs::every_test_runs_the_binary_in_its_own_folder`).
pub fn hookbox_in(dir: &Path) -> Command {
    let mut cmd = Command::new(bin());
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    cmd
}

/// [`hookbox_in`], run as the user `nobody` (through `runuser`; the caller is
/// root): for what another user may not do.
pub fn hookbox_as_nobody_in(dir: &Path) -> Command {
    let mut cmd = Command::new("runuser");
    cmd.args(["-u", "nobody", "--"])
        .arg(bin())
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    cmd
}

impl Hookbox {
    /// Starts hookbox on a fresh directory and waits until `/ready` is 200.
    pub fn start(env: &[(&str, &str)]) -> Self {
        Self::restart(new_dir(), env)
    }

    /// Waits until the event reaches `status`, and returns it.
    pub fn wait_status(&self, id: &str, status: &str, timeout: Duration) -> Value {
        let mut last = Value::Null;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(r) = self.get(&format!("/webhooks/{id}")) {
                last = r.json();
                if last["status"] == status {
                    return last;
                }
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        panic!(
            "event {id} never became {status}: {last}\nlogs: {:?}",
            self.logs()
        );
    }

    /// Starts hookbox on `dir` and returns once it listens (not necessarily ready).
    pub fn spawn(dir: Arc<tempfile::TempDir>, env: &[(&str, &str)]) -> Self {
        let mut cmd = hookbox_in(dir.path());
        cmd.env("BIND_ADDR", "127.0.0.1:0")
            .env("DB_PATH", dir.path().join("events.db"))
            .env("HANDLERS_DIR", dir.path().join("handlers"))
            .env("LOG_LEVEL", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn hookbox");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let logs = logs.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if let Some(addr) = line.split("listening on ").nth(1) {
                        let addr: String = addr
                            .chars()
                            .take_while(|c| !c.is_whitespace() && *c != '"')
                            .collect();
                        let _ = tx.send(addr);
                    }
                    logs.lock().expect("logs").push(line);
                }
            });
        }
        let url = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(url) => url,
            Err(_) => {
                let _ = child.kill();
                panic!("hookbox did not start: {:?}", logs.lock().expect("logs"));
            }
        };
        Self {
            child,
            url,
            dir,
            logs,
        }
    }

    /// Polls `/ready` until it answers 200 (30 s at most).
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(r) = self.get("/ready") {
                if r.status == 200 {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("hookbox never became ready: {:?}", self.logs());
    }

    /// The log lines so far.
    pub fn logs(&self) -> Vec<String> {
        self.logs.lock().expect("logs").clone()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, and wait for the process to be gone.
    pub fn kill9(mut self) -> Arc<tempfile::TempDir> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.dir.clone()
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Waits for the process to exit (up to `timeout`) and returns its exit code.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Restarts on the same directory with the same settings, after a kill.
    pub fn restart(dir: Arc<tempfile::TempDir>, env: &[(&str, &str)]) -> Self {
        let hb = Self::spawn(dir, env);
        hb.wait_ready();
        hb
    }

    /// A blocking GET.
    pub fn get(&self, path: &str) -> Result<Reply, reqwest::Error> {
        request(client().get(format!("{}{path}", self.url)).send())
    }

    /// POSTs a JSON body to `/webhooks` with optional headers.
    pub fn post(&self, body: &Value, headers: &[(&str, &str)]) -> Reply {
        self.post_raw("/webhooks", &body.to_string(), "application/json", headers)
    }

    /// POSTs any body to `path`.
    pub fn post_raw(
        &self,
        path: &str,
        body: &str,
        content_type: &str,
        headers: &[(&str, &str)],
    ) -> Reply {
        let client = client();
        let mut req = client
            .post(format!("{}{path}", self.url))
            .header("content-type", content_type)
            .body(body.to_owned());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        request(req.send()).expect("request")
    }
}

impl Hookbox {
    /// Sends any method to `path` with an optional JSON body and headers.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = client().request(method, format!("{}{path}", self.url));
        if let Some(body) = body {
            req = req
                .header("content-type", "application/json")
                .body(body.to_string());
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        request(req.send()).expect("request")
    }
}

impl Drop for Hookbox {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Reply {
    /// The body as JSON (panics with the body when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|_| panic!("not JSON: {}", self.text))
    }

    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts a problem+json answer with this status and code.
    pub fn assert_problem(&self, status: u16, code: &str) {
        assert_eq!(self.status, status, "{}", self.text);
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let body = self.json();
        assert_eq!(body["code"], code, "{body}");
        assert_eq!(body["status"], status);
        assert!(
            body["type"].is_string() && body["title"].is_string() && body["detail"].is_string()
        );
    }
}

/// A shared blocking client.
/// POSTs one event to the hookbox at `base_url`, with `key` as its Idempotency-Key;
/// the answer's status and JSON body.
pub fn post_to(base_url: &str, body: &Value, key: Option<&str>) -> (u16, Value) {
    let mut req = client()
        .post(format!("{base_url}/webhooks"))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(key) = key {
        req = req.header("Idempotency-Key", key);
    }
    let res = req.send().expect("send");
    let status = res.status().as_u16();
    (status, res.json().expect("json"))
}

/// Sends every `(base_url, body, key)` POST at once, one thread each, released
/// together by a barrier; the answers in the order of `posts`.
pub fn post_all(posts: &[(String, Value, Option<String>)]) -> Vec<(u16, Value)> {
    let barrier = std::sync::Barrier::new(posts.len());
    std::thread::scope(|s| {
        let handles: Vec<_> = posts
            .iter()
            .map(|(url, body, key)| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    post_to(url, body, key.as_deref())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    })
}

pub fn client() -> reqwest::blocking::Client {
    static CLIENT: std::sync::OnceLock<reqwest::blocking::Client> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .expect("client")
        })
        .clone()
}

fn request(
    res: Result<reqwest::blocking::Response, reqwest::Error>,
) -> Result<Reply, reqwest::Error> {
    let res = res?;
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let text = res.text()?;
    Ok(Reply {
        status,
        headers,
        text,
    })
}

/// Polls `f` every 20 ms until it returns `Some`, or panics after `timeout`.
pub fn eventually<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A fresh data directory with an empty `handlers/` folder.
pub fn new_dir() -> Arc<tempfile::TempDir> {
    let dir = Arc::new(tempfile::tempdir().expect("temp dir"));
    std::fs::create_dir_all(dir.path().join("handlers")).expect("handlers dir");
    dir
}

/// Writes an executable script under `dir`.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = write(dir, name, &format!("#!/bin/sh\n{body}\n"));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    path
}

/// Writes an exec handler manifest running `script` for `event_types`.
pub fn exec_manifest(dir: &Path, name: &str, event_types: &str, script: &Path, extra: &str) {
    write(
        dir,
        &format!("handlers/{name}.toml"),
        &format!(
            "event_types = {event_types}\nkind = \"exec\"\n{extra}\n[exec]\ncommand = [\"{}\"]\n",
            script.display()
        ),
    );
}

/// Writes a file under `dir`, creating folders.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(&path, text).expect("write");
    path
}

/// Writes a `kind = "http"` manifest: `extra` goes at the top level, `http_extra`
/// into the `[http]` section.
pub fn http_manifest(
    dir: &Path,
    name: &str,
    event_types: &str,
    url: &str,
    extra: &str,
    http_extra: &str,
) {
    write(
        dir,
        &format!("handlers/{name}.toml"),
        &format!(
            "event_types = {event_types}\nkind = \"http\"\n{extra}\n[http]\nurl = \"{url}\"\n{http_extra}\n"
        ),
    );
}

/// The database a test runs on: SQLite in the instance's directory (the default),
/// or a fresh PostgreSQL database of its own, dropped when this is dropped.
pub enum Db {
    /// `DB_PATH` in the test's directory.
    Sqlite,
    /// `hookbox_test_<random>` on the local server.
    Postgres {
        /// The server's URL (`HOOKBOX_TEST_PG`).
        server: String,
        /// The database's name.
        name: String,
        /// Its URL, passed as `DATABASE_URL`.
        url: String,
    },
}

/// The server the PostgreSQL tests use: `HOOKBOX_TEST_PG` (for example
/// `postgres://postgres@127.0.0.1:5432`, trust auth). Unset, those tests skip.
fn pg_server() -> Option<String> {
    std::env::var("HOOKBOX_TEST_PG")
        .ok()
        .filter(|v| !v.is_empty())
}

/// Says once, on the terminal, that the PostgreSQL tests are skipped. Written to
/// the stderr handle itself, which the test runner does not capture.
fn say_postgres_skipped() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipped: PostgreSQL tests (set HOOKBOX_TEST_PG=postgres://postgres@127.0.0.1:5432 to run them)"
        );
    });
}

/// Runs one admin statement on the `postgres` database.
fn pg_admin(server: &str, sql: String) {
    pg_scalar(&format!("{server}/postgres"), &sql);
}

/// Runs `sql` (simple protocol, so no transaction around a lone statement) on the
/// database at `url` and returns the first column of its last row as a number (0
/// when it returns no rows).
pub fn pg_scalar(url: &str, sql: &str) -> i64 {
    use sqlx::{Connection, Executor, Row};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let mut conn = sqlx::postgres::PgConnection::connect(url)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {url}: {e} (is it running?)"));
        let rows = conn
            .fetch_all(sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned())))
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let _ = conn.close().await;
        rows.last()
            .map_or(0, |r| r.try_get::<i64, _>(0).expect("a bigint"))
    })
}

impl Db {
    /// SQLite.
    pub fn sqlite() -> Self {
        Self::Sqlite
    }

    /// A new, empty PostgreSQL database; `None` (and one line on the terminal)
    /// when `HOOKBOX_TEST_PG` is not set.
    pub fn postgres() -> Option<Self> {
        let Some(server) = pg_server() else {
            say_postgres_skipped();
            return None;
        };
        let name = format!("hookbox_test_{}", uuid::Uuid::now_v7().simple());
        pg_admin(&server, format!("CREATE DATABASE {name}"));
        let url = format!("{server}/{name}");
        Some(Self::Postgres { server, name, url })
    }

    /// Runs `sql` on this PostgreSQL database; the first column of its last row.
    pub fn scalar(&self, sql: &str) -> i64 {
        match self {
            Self::Postgres { url, .. } => pg_scalar(url, sql),
            Self::Sqlite => panic!("scalar() is for PostgreSQL"),
        }
    }

    /// True for PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        matches!(self, Self::Postgres { .. })
    }

    /// `extra` settings plus the ones that select this database.
    pub fn env<'a>(&'a self, extra: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
        let mut env = extra.to_vec();
        if let Self::Postgres { url, .. } = self {
            env.push(("DATABASE_URL", url));
        }
        env
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Self::Postgres { server, name, .. } = self {
            pg_admin(
                server,
                format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            );
        }
    }
}

/// Defines a test that runs once on SQLite and once on its own PostgreSQL
/// database: `fn name(db: &Db) { … }` becomes the tests `name::sqlite` and
/// `name::postgres` (which passes without running when `HOOKBOX_TEST_PG` is unset).
macro_rules! on_both_backends {
    ($(#[$meta:meta])* fn $name:ident($db:ident: &Db) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn run($db: &crate::harness::Db) $body

            #[test]
            fn sqlite() {
                run(&crate::harness::Db::sqlite());
            }

            #[test]
            fn postgres() {
                if let Some(db) = crate::harness::Db::postgres() {
                    run(&db);
                }
            }
        }
    };
}
pub(crate) use on_both_backends;
