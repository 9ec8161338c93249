//! The real binary on a temporary folder: an event, a duplicate key, a bad body,
//! and the rows in the SQLite file afterwards.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, ChildStderr, Command, Stdio};

use sqlx::{Connection, SqliteConnection};

/// The running binary and its folder: both gone when dropped.
struct Floor {
    child: Child,
    /// Kept open, so that the server's later writes to stderr do not fail.
    _stderr: BufReader<ChildStderr>,
    dir: PathBuf,
    addr: String,
}

impl Floor {
    /// Starts `intake-floor` on a free port with a database in a new folder, and
    /// waits for its `listening on` line.
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("intake-floor-test-{}", uuid::Uuid::now_v7()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut child = Command::new(env!("CARGO_BIN_EXE_intake-floor"))
            .env("BIND_ADDR", "127.0.0.1:0")
            .env("DB_PATH", dir.join("floor.db"))
            .stderr(Stdio::piped())
            .spawn()
            .expect("start intake-floor");
        let mut line = String::new();
        let mut stderr = BufReader::new(child.stderr.take().expect("piped stderr"));
        stderr.read_line(&mut line).expect("first line");
        let addr = line
            .trim()
            .strip_prefix("intake-floor: listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line: {line:?}"))
            .to_owned();
        Self {
            child,
            _stderr: stderr,
            dir,
            addr,
        }
    }

    /// Posts `body` to /webhooks (with the key, if any); returns the status and
    /// the response's body.
    fn post(&self, key: Option<&str>, body: &str) -> (u16, String) {
        let key_header = key.map_or(String::new(), |key| format!("Idempotency-Key: {key}\r\n"));
        let request = format!(
            "POST /webhooks HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             {key_header}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        let mut stream = TcpStream::connect(&self.addr).expect("connect");
        stream.write_all(request.as_bytes()).expect("write");
        let mut response = String::new();
        stream.read_to_string(&mut response).expect("read");
        let status = response[9..12].parse().expect("status code");
        let body = response
            .split_once("\r\n\r\n")
            .expect("head and body")
            .1
            .to_owned();
        (status, body)
    }
}

impl Drop for Floor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The `id` member of a `{"id":…,"status":…}` answer.
fn id_of(body: &str) -> String {
    let value: serde_json::Value = serde_json::from_str(body).expect("JSON answer");
    value["id"].as_str().expect("an id").to_owned()
}

#[tokio::test]
async fn an_event_is_stored_once_and_a_bad_body_is_refused() {
    let floor = Floor::start();
    let event = r#"{"event_type": "order.created", "payload": {"order_id": 42}}"#;

    let (status, body) = floor.post(Some("order-42"), event);
    assert_eq!(status, 202, "{body}");
    assert!(body.contains(r#""status":"pending""#), "{body}");
    let id = id_of(&body);

    let (status, body) = floor.post(Some("order-42"), event);
    assert_eq!(status, 200, "{body}");
    assert_eq!(id_of(&body), id, "a duplicate names the stored event");

    for bad in ["{not json", r#"{"payload": 1}"#, r#"["order.created"]"#] {
        let (status, body) = floor.post(Some("bad"), bad);
        assert_eq!(status, 400, "{bad}: {body}");
    }

    let (status, _) = floor.post(None, r#"{"event_type": "no.key"}"#);
    assert_eq!(status, 202);

    let url = format!("sqlite://{}", floor.dir.join("floor.db").display());
    let mut conn = SqliteConnection::connect(&url).await.unwrap();
    let rows: Vec<(String, String, String, String)> =
        sqlx::query_as("SELECT id, idempotency_key, event_type, payload FROM events ORDER BY id")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert_eq!(
        rows[0],
        (
            id,
            "order-42".to_owned(),
            "order.created".to_owned(),
            r#"{"order_id": 42}"#.to_owned()
        )
    );
    assert_eq!(rows[1].1, rows[1].0, "without a key, the id is the key");
    assert_eq!((rows[1].2.as_str(), rows[1].3.as_str()), ("no.key", "null"));
}

/// Any argument (`--help` included) prints the usage and exits 2 without
/// starting a server or creating a database.
#[test]
fn an_argument_prints_the_usage_and_starts_nothing() {
    let dir = std::env::temp_dir().join(format!("floor-args-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_intake-floor"))
        .arg("--help")
        .current_dir(&dir)
        .env("BIND_ADDR", "127.0.0.1:0")
        .stderr(Stdio::piped())
        .spawn()
        .expect("run intake-floor");
    // A server that started instead would never exit: give it 10 s.
    let mut status = None;
    for _ in 0..100 {
        status = child.try_wait().expect("wait");
        if status.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{stderr}");
    assert!(stderr.contains("usage:"), "{stderr}");
    assert!(!dir.join("floor.db").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
