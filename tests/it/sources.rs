//! Sources (push webhooks as providers send them): manifests and `sources check`.

use std::process::Command;

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
];

fn check(dir: &std::path::Path, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = Command::new(crate::harness::bin())
        .args(["sources", "check"])
        .arg(dir)
        .env_clear()
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

#[test]
fn check_lists_every_shipped_example_without_its_secrets() {
    let (code, out) = check(&examples(), EXAMPLE_SECRETS);
    assert_eq!(code, Some(0), "{out}");
    for (name, path) in [
        ("github", "/ingest/github"),
        ("stripe", "/ingest/stripe"),
        ("partner", "/ingest/partner"),
        ("intranet", "/ingest/intranet"),
    ] {
        assert!(
            out.lines().any(|l| l.starts_with(name) && l.contains(path)),
            "{name}: {out}"
        );
    }
    assert!(out.contains("8 source(s)"), "{out}");
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

#[test]
fn a_missing_folder_has_no_sources() {
    let dir = crate::harness::new_dir();
    let (code, out) = check(&dir.path().join("nope"), &[]);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("0 source(s)"), "{out}");
}
