//! Subscriber secrets at rest (SPEC §14) on the real binary and both backends: the
//! stored value is not the secret, opens with the key (decrypted here with the
//! `chacha20poly1305` crate directly, not through hookbox) and signs deliveries
//! correctly; restarts with another key, with old keys, without a key; `hookbox
//! rotate-key`; bad keys exit 2 without echoing them.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::harness::{Db, Hookbox, hookbox_in, new_dir, on_both_backends};
use crate::receiver::Receiver;

const WAIT: Duration = Duration::from_secs(20);
const KEY_A: &str = "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=";
const KEY_B: &str = "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXoxMjM0NTY=";
const SECRET: &str = "whsec_c2VjcmV0LXNpZ25pbmcta2V5LW9mLTMyLWJ5dGVzIQ==";

/// What the database holds for the subscriber `name`: `(secret, secret_key_id)`.
fn stored(db: &Db, dir: &std::path::Path, name: &str) -> (String, Option<String>) {
    let sql = format!("SELECT secret, secret_key_id FROM subscribers WHERE name = '{name}'");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        use sqlx::{ConnectOptions, Connection, Row};
        let row = match db {
            Db::Postgres { url, .. } => {
                let mut conn = sqlx::postgres::PgConnection::connect(url)
                    .await
                    .expect("pg");
                let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .fetch_one(&mut conn)
                    .await;
                row.map(|r| (r.get::<String, _>(0), r.get::<Option<String>, _>(1)))
            }
            Db::Sqlite => {
                let mut conn = sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(dir.join("events.db"))
                    .read_only(true)
                    .connect()
                    .await
                    .expect("sqlite");
                let row = sqlx::query(sqlx::AssertSqlSafe(sql))
                    .fetch_one(&mut conn)
                    .await;
                row.map(|r| (r.get::<String, _>(0), r.get::<Option<String>, _>(1)))
            }
        };
        row.expect("the subscriber's row")
    })
}

/// The key id SPEC §14 keeps: the first 8 bytes of the key's SHA-256, in hex.
fn key_id(key: &str) -> String {
    let bytes = STANDARD.decode(key).expect("base64");
    Sha256::digest(&bytes)[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Opens a stored value independently of hookbox: base64 of a 24-byte nonce and
/// the XChaCha20-Poly1305 ciphertext, the subscriber's name as associated data.
fn open(key: &str, name: &str, text: &str) -> Option<String> {
    let cipher = XChaCha20Poly1305::new_from_slice(&STANDARD.decode(key).ok()?).ok()?;
    let bytes = STANDARD.decode(text).ok()?;
    let (nonce, sealed) = bytes.split_at(24);
    let nonce = XNonce::try_from(nonce).ok()?;
    let plain = cipher
        .decrypt(
            &nonce,
            Payload {
                msg: sealed,
                aad: name.as_bytes(),
            },
        )
        .ok()?;
    String::from_utf8(plain).ok()
}

fn subscribe(hb: &Hookbox, rx: &Receiver) {
    let created = hb.call(
        "POST",
        "/subscribers",
        Some(&json!({"name": "sealed", "event_types": ["sealed.*"], "url": format!("{}/s", rx.url), "secret": SECRET})),
        &[],
    );
    assert_eq!(created.status, 201, "{}", created.text);
}

/// Posts an event and checks its delivery is signed with [`SECRET`] (computed here).
fn delivers_signed(hb: &Hookbox, rx: &Receiver) {
    let before = rx.count();
    let r = hb.post(
        &json!({"event_type": "sealed.x", "payload": {"n": before}}),
        &[],
    );
    assert_eq!(r.status, 202, "{}", r.text);
    let id = r.json()["id"].as_str().expect("id").to_owned();
    // (An earlier instance killed mid-attempt may deliver its event again first.)
    let req = crate::harness::eventually(WAIT, "the delivery", || {
        rx.requests().into_iter().find(|r| r.webhook_id() == id)
    });
    let ts = req.header("webhook-timestamp").expect("timestamp");
    let expected = crate::delivery::signature(SECRET, &id, ts, &req.body);
    assert_eq!(
        req.header("webhook-signature"),
        Some(format!("v1,{expected}").as_str())
    );
}

fn rotate(dir: &std::path::Path, db: &Db, env: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let out = hookbox_in(dir)
        .env("DB_PATH", dir.join("events.db"))
        .envs(db.env(env))
        .arg("rotate-key")
        .output()
        .expect("rotate-key");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

on_both_backends! {
    fn secrets_are_sealed_open_with_old_keys_and_rotate(db: &Db) {
        let rx = Receiver::start();
        let dir = new_dir();
        let loopback = ("ALLOWED_TARGETS", "127.0.0.0/8");
        let hb = Hookbox::restart(dir.clone(), &db.env(&[loopback, ("ENCRYPTION_KEY", KEY_A)]));
        subscribe(&hb, &rx);
        let (text, id) = stored(db, dir.path(), "sealed");
        assert!(!text.contains("c2VjcmV0"), "the secret is stored as it is: {text}");
        assert_eq!(id, Some(key_id(KEY_A)));
        assert_eq!(open(KEY_A, "sealed", &text).as_deref(), Some(SECRET));
        assert_eq!(open(KEY_A, "another", &text), None, "bound to its subscriber");
        delivers_signed(&hb, &rx);
        drop(hb);

        // Without the key, or with another one only: exit 2 naming the subscriber.
        for env in [vec![loopback], vec![loopback, ("ENCRYPTION_KEY", KEY_B)]] {
            let (code, stderr) = crate::config::run_with(&db.env(&env), dir.path());
            assert_eq!(code, Some(2), "{env:?}: {stderr}");
            assert!(stderr.contains("\"sealed\""), "{stderr}");
            assert!(!stderr.contains(SECRET) && !stderr.contains(&text), "{stderr}");
        }
        // A new key with the former one among the old: serves, still signs right.
        let both = [loopback, ("ENCRYPTION_KEY", KEY_B), ("ENCRYPTION_KEYS_OLD", KEY_A)];
        let hb = Hookbox::restart(dir.clone(), &db.env(&both));
        delivers_signed(&hb, &rx);
        drop(hb);
        let (code, stdout, stderr) = rotate(dir.path(), db, &both);
        assert_eq!(code, Some(0), "{stderr}");
        assert!(stdout.contains("1 subscriber secrets sealed"), "{stdout}");
        let (text, id) = stored(db, dir.path(), "sealed");
        assert_eq!(id, Some(key_id(KEY_B)));
        assert_eq!(open(KEY_B, "sealed", &text).as_deref(), Some(SECRET));
        // The old key can go now.
        let hb = Hookbox::restart(dir, &db.env(&[loopback, ("ENCRYPTION_KEY", KEY_B)]));
        delivers_signed(&hb, &rx);
    }
}

on_both_backends! {
    fn secrets_kept_in_the_clear_are_sealed_by_rotate_key(db: &Db) {
        let rx = Receiver::start();
        let dir = new_dir();
        let loopback = ("ALLOWED_TARGETS", "127.0.0.0/8");
        let hb = Hookbox::restart(dir.clone(), &db.env(&[loopback]));
        let warned = hb
            .logs()
            .iter()
            .filter(|l| l.contains("ENCRYPTION_KEY is not set"))
            .count();
        assert_eq!(warned, 1, "one warning without a key");
        subscribe(&hb, &rx);
        assert_eq!(stored(db, dir.path(), "sealed"), (SECRET.to_owned(), None));
        drop(hb);
        let (code, _, stderr) = rotate(dir.path(), db, &[]);
        assert_eq!(code, Some(2), "rotate-key needs a key: {stderr}");
        assert!(stderr.contains("ENCRYPTION_KEY"), "{stderr}");
        let (code, _, stderr) = rotate(dir.path(), db, &[("ENCRYPTION_KEY", KEY_A)]);
        assert_eq!(code, Some(0), "{stderr}");
        if matches!(db, Db::Sqlite) {
            // Sealed in the files, not only in the table: the clear text's page
            // images (free space, WAL frames) are gone.
            for entry in std::fs::read_dir(dir.path()).expect("dir") {
                let path = entry.expect("entry").path();
                let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
                if name.starts_with("events.db") {
                    let bytes = std::fs::read(&path).expect("read");
                    let found = bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes());
                    assert!(!found, "the clear secret is still in {name}");
                }
            }
        }
        let (text, id) = stored(db, dir.path(), "sealed");
        assert_eq!(id, Some(key_id(KEY_A)));
        assert_eq!(open(KEY_A, "sealed", &text).as_deref(), Some(SECRET));
        let hb = Hookbox::restart(dir, &db.env(&[loopback, ("ENCRYPTION_KEY", KEY_A)]));
        assert!(!hb.logs().iter().any(|l| l.contains("ENCRYPTION_KEY is not set")));
        delivers_signed(&hb, &rx);
    }
}

#[test]
fn malformed_keys_exit_2_without_echoing_them() {
    let dir = new_dir();
    let short = STANDARD.encode([7u8; 31]);
    let file = dir.path().join("key");
    for (env, name) in [
        (vec![("ENCRYPTION_KEY", short.as_str())], "ENCRYPTION_KEY"),
        (
            vec![("ENCRYPTION_KEY", "not base64 at all!")],
            "ENCRYPTION_KEY",
        ),
        (
            vec![("ENCRYPTION_KEYS_OLD", short.as_str())],
            "ENCRYPTION_KEYS_OLD",
        ),
        (
            vec![
                ("ENCRYPTION_KEY", KEY_A),
                ("ENCRYPTION_KEY_FILE", "/nonexistent"),
            ],
            "ENCRYPTION_KEY_FILE",
        ),
        (
            vec![("ENCRYPTION_KEY_FILE", "/nonexistent/key")],
            "ENCRYPTION_KEY_FILE",
        ),
    ] {
        let (code, stderr) = crate::config::run_with(&env, dir.path());
        assert_eq!(code, Some(2), "{env:?}: {stderr}");
        assert!(stderr.contains(name), "{env:?}: {stderr}");
        assert!(
            !stderr.contains(&short) && !stderr.contains(KEY_A),
            "{stderr}"
        );
    }
    // A key file: the same base64 text, surrounding whitespace ignored.
    std::fs::write(&file, format!("\n  {KEY_A}\n")).expect("key file");
    let path = file.display().to_string();
    let hb = Hookbox::restart(dir, &[("ENCRYPTION_KEY_FILE", &path)]);
    assert!(
        !hb.logs()
            .iter()
            .any(|l| l.contains("ENCRYPTION_KEY is not set"))
    );
}
