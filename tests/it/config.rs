//! docs/configuration.md: layering and bad values (exit code 2, one line naming the
//! setting).

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::{Hookbox, write};

/// Runs `hookbox serve` with `env` and waits for it to exit: `None` as the code when
/// it was still serving after 15 s (it is killed then), as with a value it accepted.
pub(crate) fn run_with(env: &[(&str, &str)], dir: &std::path::Path) -> (Option<i32>, String) {
    let mut child = crate::harness::hookbox_in(dir)
        .env("DB_PATH", dir.join("events.db"))
        .env("BIND_ADDR", "127.0.0.1:0")
        .envs(env.iter().copied())
        .arg("serve")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run");
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut code = None;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("try_wait") {
            code = status.code();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().expect("output");
    (code, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_bad_value_exits_2_naming_the_setting() {
    let dir = tempfile::tempdir().expect("dir");
    for (name, value) in [
        ("WORKER_COUNT", "many"),
        ("QUEUE_MAXSIZE", "0"),
        ("RETRY_BASE_DELAY", "soon"),
        ("BIND_ADDR", "not-an-address"),
        ("SQLITE_SYNCHRONOUS", "off"),
        ("MAX_BODY_BYTES", "-5"),
        ("LOG_FORMAT", "xml"),
        ("METRICS_PUBLIC", "perhaps"),
        ("ALLOWED_TARGETS", "10.0.0.0/40"),
        ("DATABASE_URL", "mysql://db/events"),
        ("INSTANCE_ID", " "),
        ("INSTANCE_ID", "bell\u{7}"),
    ] {
        let (code, stderr) = run_with(&[(name, value)], dir.path());
        assert_eq!(code, Some(2), "{name}={value}: {stderr}");
        assert!(stderr.contains(name), "{name}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    }
}

#[test]
fn the_admin_token_is_not_echoed_in_errors() {
    let dir = tempfile::tempdir().expect("dir");
    let (code, stderr) = run_with(
        &[
            ("ADMIN_TOKEN", "s3cret-token-of-16+"),
            ("WORKER_COUNT", "x"),
        ],
        dir.path(),
    );
    assert_eq!(code, Some(2));
    assert!(!stderr.contains("s3cret-token"));
}

/// A `postgres://` URL the driver cannot use is a configuration mistake: exit 2,
/// one line naming `DATABASE_URL`, its password not shown (no server needed).
#[test]
fn an_unusable_postgres_url_exits_2_without_its_password() {
    let dir = tempfile::tempdir().expect("dir");
    for url in [
        "postgres://app:s3cretPW@127.0.0.1:notaport/db",
        "postgres://app:s3cretPW@127.0.0.1:5432/db?sslmode=bogus",
        "postgresql://app:s3cretPW@[bad/db",
    ] {
        let (code, stderr) = run_with(&[("DATABASE_URL", url)], dir.path());
        assert_eq!(code, Some(2), "{url}: {stderr}");
        assert!(stderr.contains("DATABASE_URL"), "{url}: {stderr}");
        assert!(!stderr.contains("s3cretPW"), "{url}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    }
}

#[test]
fn a_blank_or_short_admin_token_exits_2() {
    let dir = tempfile::tempdir().expect("dir");
    for token in ["", "   ", "short-secret-15"] {
        let (code, stderr) = run_with(&[("ADMIN_TOKEN", token)], dir.path());
        assert_eq!(
            code,
            Some(2),
            "ADMIN_TOKEN={token:?} was accepted: {stderr}"
        );
        assert!(stderr.contains("ADMIN_TOKEN"), "{stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(
            token.trim().is_empty() || !stderr.contains(token),
            "{stderr}"
        );
    }
    // The same from the configuration file.
    let file = write(dir.path(), "blank.toml", "admin_token = \"\"\n");
    let (code, stderr) = run_with(
        &[("HOOKBOX_CONFIG", file.to_str().expect("utf-8 path"))],
        dir.path(),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("ADMIN_TOKEN"), "{stderr}");
    // Sixteen characters are enough.
    let hb = Hookbox::start(&[("ADMIN_TOKEN", "sixteen-chars-ok")]);
    assert_eq!(hb.get("/subscribers").expect("get").status, 401);
}

#[test]
fn durations_over_30_days_and_zero_timeouts_exit_2() {
    let dir = tempfile::tempdir().expect("dir");
    for (name, value) in [
        ("RETRY_BASE_DELAY", "31days"),
        ("RETRY_MAX_DELAY", "100000000s"),
        ("HANDLER_TIMEOUT", "2592001"),
        ("SHUTDOWN_GRACE", "800h"),
        ("LEASE_TIMEOUT", "31days"),
        ("CLEANUP_INTERVAL_HOURS", "721"),
        ("HANDLER_TIMEOUT", "0"),
        ("LEASE_TIMEOUT", "0s"),
    ] {
        let (code, stderr) = run_with(&[(name, value)], dir.path());
        assert_eq!(code, Some(2), "{name}={value}: {stderr}");
        assert!(stderr.contains(name), "{name}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    }
}

#[test]
fn file_values_apply_and_env_wins_over_them() {
    let dir = tempfile::tempdir().expect("dir");
    let file = write(
        dir.path(),
        "custom.toml",
        "queue_maxsize = 1\nworker_count = 0\nmax_body_bytes = 5000\n",
    );
    let file = file.to_str().expect("utf-8 path").to_owned();
    // QUEUE_MAXSIZE=1 from the file, WORKER_COUNT=0 from the file: the 2nd post is 429.
    let hb = Hookbox::start(&[("HOOKBOX_CONFIG", &file)]);
    let ev = serde_json::json!({"event_type": "t", "payload": {}});
    assert_eq!(hb.post(&ev, &[]).status, 202);
    assert_eq!(hb.post(&ev, &[]).status, 429);
    drop(hb);
    // The environment overrides the file.
    let hb = Hookbox::start(&[("HOOKBOX_CONFIG", &file), ("QUEUE_MAXSIZE", "10")]);
    assert_eq!(hb.post(&ev, &[]).status, 202);
    assert_eq!(hb.post(&ev, &[]).status, 202);
}

#[test]
fn a_missing_or_wrong_config_file_exits_2() {
    let dir = tempfile::tempdir().expect("dir");
    let (code, stderr) = run_with(
        &[("HOOKBOX_CONFIG", "/nonexistent/hookbox.toml")],
        dir.path(),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent/hookbox.toml"));
    let typo = write(dir.path(), "typo.toml", "worker_cuont = 4\n");
    let (code, stderr) = run_with(
        &[("HOOKBOX_CONFIG", typo.to_str().expect("path"))],
        dir.path(),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("worker_cuont"), "{stderr}");
}

#[test]
fn the_shipped_config_file_matches_the_defaults() {
    // config/hookbox.toml lists every setting with its default (commented out), so
    // uncommenting it changes nothing.
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/hookbox.toml"))
        .expect("config/hookbox.toml");
    for (name, default) in hookbox::config::SETTINGS {
        let key = name.to_ascii_lowercase();
        let line = text
            .lines()
            .find(|l| {
                l.trim_start_matches(['#', ' '])
                    .starts_with(&format!("{key} ="))
            })
            .unwrap_or_else(|| panic!("{key} is not in config/hookbox.toml"));
        if let Some(d) = default {
            assert!(line.contains(d), "{line} should show the default {d}");
        }
    }
}

/// `hookbox migrate` in `dir` with `env` only: its exit code and stderr.
fn migrate_in(dir: &std::path::Path, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = crate::harness::hookbox_in(dir)
        .env("DB_PATH", dir.join("events.db"))
        .envs(env.iter().copied())
        .arg("migrate")
        .output()
        .expect("migrate");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_dot_env_file_in_the_working_directory_is_read_and_the_environment_wins() {
    let dir = crate::harness::new_dir();
    write(
        dir.path(),
        ".env",
        "# local settings\nLOG_LEVEL=\"verbose\"\n",
    );
    let (code, stderr) = migrate_in(dir.path(), &[]);
    assert_eq!(code, Some(2), "the .env value is read: {stderr}");
    assert!(stderr.contains("LOG_LEVEL"), "{stderr}");
    let (code, stderr) = migrate_in(dir.path(), &[("LOG_LEVEL", "warn")]);
    assert_eq!(code, Some(0), "the environment wins over .env: {stderr}");
    write(dir.path(), ".env", "NOT A LINE\n");
    let (code, stderr) = migrate_in(dir.path(), &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(".env"), "{stderr}");
    // A broken line is named, never quoted: it may hold a secret.
    write(
        dir.path(),
        ".env",
        "ADMIN_TOKEN=\"the-secret-admin-token-42\nLOG_LEVEL=warn\n",
    );
    let (code, stderr) = migrate_in(dir.path(), &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("ADMIN_TOKEN"), "{stderr}");
    assert!(!stderr.contains("the-secret-admin-token-42"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
}

/// A configuration file that is not TOML: exit 2, one line with where the
/// parser stopped, and the offending line not quoted (it may hold a secret).
#[test]
fn a_config_file_that_is_not_toml_is_one_line_without_its_text() {
    let dir = tempfile::tempdir().expect("dir");
    let bad = write(
        dir.path(),
        "bad.toml",
        "admin_token = \"the-secret-admin-token-42\nqueue_maxsize = 5\n",
    );
    let (code, stderr) = run_with(
        &[("HOOKBOX_CONFIG", bad.to_str().expect("path"))],
        dir.path(),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("bad.toml") && stderr.contains("line 1"),
        "{stderr}"
    );
    assert!(!stderr.contains("the-secret-admin-token-42"), "{stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
}

#[test]
fn hookbox_secret_prints_a_new_secret_of_32_random_bytes() {
    use base64::Engine as _;
    let secret = || {
        let out = crate::harness::hookbox_in(crate::harness::new_dir().path())
            .arg("secret")
            .output()
            .expect("secret");
        assert_eq!(out.status.code(), Some(0));
        String::from_utf8(out.stdout)
            .expect("utf-8")
            .trim()
            .to_owned()
    };
    let (a, b) = (secret(), secret());
    assert_ne!(a, b);
    let key = base64::engine::general_purpose::STANDARD
        .decode(a.strip_prefix("whsec_").expect("whsec_ prefix"))
        .expect("base64");
    assert_eq!(key.len(), 32);
}

/// The image bakes in no manifests of the build machine and names one folder per
/// kind under one mount point (docs/configuration.md says how to mount them). No
/// Docker daemon is needed to check what the Dockerfile says.
#[test]
fn the_image_mounts_manifests_per_kind_and_bakes_none_in() {
    let dockerfile = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Dockerfile"))
        .expect("Dockerfile");
    let instructions: Vec<&str> = dockerfile
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    assert!(
        !instructions
            .iter()
            .any(|l| l.contains("COPY handlers") || l.contains("COPY sources")),
        "manifests are baked into the image"
    );
    for wanted in [
        "HANDLERS_DIR=/etc/hookbox/handlers",
        "SOURCES_DIR=/etc/hookbox/sources",
        "mkdir -p /data /etc/hookbox/handlers /etc/hookbox/sources",
    ] {
        assert!(
            instructions.iter().any(|l| l.contains(wanted)),
            "the Dockerfile does not say {wanted}"
        );
    }
}

/// A data folder hookbox may not write (a bind mount owned by another user) is
/// one line, said once, naming the folder, its owner and the uid to `chown` it
/// to; exit 2. As root the test runs hookbox as `nobody` in a folder of root's;
/// as anyone else, in a folder without write permission.
#[test]
fn a_data_folder_owned_by_another_user_is_one_clear_error() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = crate::harness::new_dir();
    let root = std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .expect("id -u");
    let folder = if root {
        dir.path().to_owned() // root's, mode 0700: nobody may not even look in
    } else {
        let locked = dir.path().join("locked");
        std::fs::create_dir(&locked).expect("mkdir");
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o555)).expect("chmod");
        locked
    };
    let db = folder.join("data/events.db");
    let mut cmd = if root {
        crate::harness::hookbox_as_nobody_in(std::path::Path::new("/"))
    } else {
        crate::harness::hookbox_in(dir.path())
    };
    let out = cmd
        .env("DB_PATH", &db)
        .env("BIND_ADDR", "127.0.0.1:0")
        .env("HANDLERS_DIR", "/nonexistent/handlers")
        .env("SOURCES_DIR", "/nonexistent/sources")
        .arg("serve")
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("hookbox:"))
        .collect();
    assert_eq!(errors.len(), 1, "one line: {stderr}");
    let line = errors[0];
    let uid = if root {
        "65534".to_owned()
    } else {
        String::from_utf8_lossy(
            &std::process::Command::new("id")
                .arg("-u")
                .output()
                .expect("id")
                .stdout,
        )
        .trim()
        .to_owned()
    };
    let owner = if root { "0" } else { uid.as_str() };
    for said in [
        format!("cannot write in {}", folder.display()),
        format!("owned by uid {owner}"),
        format!("chown -R {uid} {}", folder.display()),
        "DB_PATH".to_owned(),
    ] {
        assert!(line.contains(&said), "{said:?} not in: {line}");
    }
    assert_eq!(line.matches("cannot write").count(), 1, "said once: {line}");
}
