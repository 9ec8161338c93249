//! PostgreSQL restarting under load (issue 13, item 2), on a private cluster of its
//! own: `initdb` into a temporary directory, started on a free port, stopped and
//! started again while posts stream in (the shared server of the other tests is
//! never touched). Every 202 is stored, 503s are allowed, `/ready` and intake
//! answer 503 within a second while the database is away, and the instance recovers
//! by itself: every event completes.
//!
//! Runs when `HOOKBOX_TEST_PG` is set (like every PostgreSQL test), and then needs
//! the PostgreSQL 15 server binaries (`/usr/lib/postgresql/15/bin`, or
//! `HOOKBOX_TEST_PG_BIN`): missing, the test fails rather than skips. As root, the
//! cluster runs as the `postgres` user (`runuser`), since PostgreSQL refuses root.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::harness::{Hookbox, client, new_dir, pg_scalar, write};

/// A PostgreSQL cluster of this test's own; stopped (immediately) when dropped.
struct Cluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
}

impl Cluster {
    /// `initdb` (trust auth, user `postgres`) and start on a free port, or `None`
    /// when `HOOKBOX_TEST_PG` is unset.
    fn start() -> Option<Self> {
        if std::env::var("HOOKBOX_TEST_PG").map_or(true, |v| v.is_empty()) {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "skipped: pgrestart (set HOOKBOX_TEST_PG to run it)"
            );
            return None;
        }
        let bin = PathBuf::from(
            std::env::var("HOOKBOX_TEST_PG_BIN")
                .unwrap_or_else(|_| "/usr/lib/postgresql/15/bin".to_owned()),
        );
        assert!(
            bin.join("initdb").exists() && bin.join("pg_ctl").exists(),
            "HOOKBOX_TEST_PG is set but {} has no initdb/pg_ctl: install the PostgreSQL server",
            bin.display()
        );
        let dir = tempfile::Builder::new()
            .prefix("hookbox-pgrestart")
            .tempdir()
            .expect("temp dir");
        if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres:", &dir.path().display().to_string()])
                .status()
                .expect("chown");
            assert!(status.success(), "chown to postgres");
        }
        let port = free_port();
        let cluster = Self { bin, dir, port };
        cluster.run(
            "initdb",
            &[
                "-D",
                &cluster.data(),
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
            ],
        );
        cluster.pg_ctl("start");
        Some(cluster)
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs one of the server's programs (as `postgres` when root).
    fn run(&self, program: &str, args: &[&str]) {
        let path = self.bin.join(program);
        let output = if is_root() {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&path)
                .args(args)
                .current_dir(self.dir.path())
                .output()
        } else {
            Command::new(&path)
                .args(args)
                .current_dir(self.dir.path())
                .output()
        }
        .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            output.status.success(),
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// `pg_ctl start|stop` (waiting for it to be done).
    fn pg_ctl(&self, action: &str) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port,
            self.dir.path().display()
        );
        let log = self.dir.path().join("server.log").display().to_string();
        let data = self.data();
        let mut args = vec![action, "-D", &data, "-w", "-t", "60"];
        match action {
            "start" => args.extend(["-o", &options, "-l", &log]),
            _ => args.extend(["-m", "fast"]),
        }
        self.run("pg_ctl", &args);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let data = self.data();
        let path = self.bin.join("pg_ctl");
        let path = path.display().to_string();
        let args = [path.as_str(), "stop", "-D", &data, "-m", "immediate", "-w"];
        let _ = if is_root() {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .args(args)
                .output()
        } else {
            Command::new(args[0]).args(&args[1..]).output()
        };
    }
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// A GET or POST answer's status and how long it took.
fn timed(f: impl FnOnce() -> u16) -> (u16, Duration) {
    let started = Instant::now();
    let status = f();
    (status, started.elapsed())
}

fn post(url: &str, key: &str) -> u16 {
    client()
        .post(format!("{url}/webhooks"))
        .header("content-type", "application/json")
        .header("Idempotency-Key", key)
        .body(json!({"event_type": "work", "payload": {"key": key}}).to_string())
        .send()
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

fn write_handler(dir: &Path) {
    write(
        dir,
        "handlers/work.toml",
        "event_types = [\"work\"]\nkind = \"log\"\n",
    );
}

#[test]
fn postgres_restarting_under_load_loses_nothing_and_recovers_by_itself() {
    let Some(cluster) = Cluster::start() else {
        return;
    };
    let dir = new_dir();
    write_handler(dir.path());
    let url = cluster.url();
    let hb = Hookbox::restart(
        dir,
        &[
            ("DATABASE_URL", &url),
            ("WORKER_COUNT", "4"),
            ("LOG_LEVEL", "hookbox=info,tower_http=warn"),
        ],
    );
    let stop = AtomicBool::new(false);
    // While the database is away: /ready's and intake's answers, and how long each
    // took (asserted after the scope, so that a failure cannot leave the posters
    // running).
    let mut while_down = Vec::new();
    let answers: Vec<(String, u16)> = std::thread::scope(|s| {
        let posters: Vec<_> = (0..4)
            .map(|t| {
                let (hb, stop) = (&hb, &stop);
                s.spawn(move || {
                    let mut answers = Vec::new();
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let key = format!("t{t}-{n}");
                        let status = post(&hb.url, &key);
                        answers.push((key, status));
                        n += 1;
                        // While the database is away each post fails fast; keep
                        // the stream going without spinning.
                        if status != 202 {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                    answers
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(1500));
        cluster.pg_ctl("stop");
        std::thread::sleep(Duration::from_millis(300));
        for round in 0..3 {
            let ready = timed(|| hb.get("/ready").map(|r| r.status).unwrap_or(0));
            let posted = timed(|| post(&hb.url, &format!("down-{round}")));
            while_down.push((ready, posted));
            std::thread::sleep(Duration::from_millis(300));
        }
        cluster.pg_ctl("start");
        std::thread::sleep(Duration::from_millis(2500));
        stop.store(true, Ordering::Relaxed);
        posters
            .into_iter()
            .flat_map(|p| p.join().expect("poster"))
            .collect()
    });
    for ((ready, ready_took), (posted, post_took)) in &while_down {
        assert_eq!(*ready, 503, "/ready while PostgreSQL is down");
        assert!(
            *ready_took < Duration::from_secs(1),
            "/ready took {ready_took:?}"
        );
        assert_eq!(*posted, 503, "intake while PostgreSQL is down");
        assert!(
            *post_took < Duration::from_secs(1),
            "intake's 503 took {post_took:?}"
        );
    }
    let accepted: Vec<&String> = answers
        .iter()
        .filter(|(_, s)| *s == 202)
        .map(|(k, _)| k)
        .collect();
    let unexpected: Vec<_> = answers
        .iter()
        .filter(|(_, s)| *s != 202 && *s != 503)
        .collect();
    assert!(unexpected.is_empty(), "only 202 or 503: {unexpected:?}");
    assert!(
        accepted.len() > 50,
        "too few posts accepted: {}",
        accepted.len()
    );
    assert!(
        answers.iter().any(|(_, s)| *s == 503),
        "no 503 while PostgreSQL was down: the test proves nothing"
    );
    // Intake works again by itself.
    let deadline = Instant::now() + Duration::from_secs(30);
    while post(&hb.url, &format!("after-{}", accepted.len())) != 202 {
        assert!(
            Instant::now() < deadline,
            "intake never recovered: {:?}",
            hb.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Every 202 was stored.
    let keys = accepted
        .iter()
        .map(|k| format!("'{k}'"))
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(
        pg_scalar(
            &url,
            &format!("SELECT count(*) FROM events WHERE idempotency_key IN ({keys})")
        ),
        accepted.len() as i64
    );
    // Every event completes, and /ready is 200 again.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = pg_scalar(
            &url,
            "SELECT count(*) FROM events WHERE status <> 'completed'",
        );
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} events never completed: {:?}",
            hb.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    hb.wait_ready();
}
