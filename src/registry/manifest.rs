//! Handler manifests: every `*.toml` in `HANDLERS_DIR` is one handler
//! (docs/handlers.md).
//!
//! ```toml
//! name = "billing-sync"                 # unique; defaults to the file stem
//! event_types = ["order.created", "invoice.*"]
//! kind = "http"                         # http | exec | log
//! max_attempts = 8                      # optional overrides of the global policy
//! backoff = ["5s", "30s", "300s"]       # explicit schedule (the last one repeats)
//! timeout = "10s"
//! ordering_key = "/customer_id"         # any kind; also accepted under [http]
//! max_in_flight = 8                     # this destination's attempts at once
//! rate_limit = "50/s"                   # optional: starts per s, m or h, spread evenly
//! disable_after = "72h"                 # optional: failing this long → disabled
//!
//! [http]
//! url = "https://billing.example.com/hooks"
//! secret_env = "BILLING_WEBHOOK_SECRET" # names the variable, never the secret
//!
//! [exec]
//! command = ["./handlers/bin/notify.sh", "--fast"]
//! env = ["SMTP_URL"]                    # passed through from hookbox's environment
//! ```
//!
//! Every problem names the file and the field. Unknown fields are errors (a typo in
//! `max_atempts` must not silently fall back to the default). Durations (`backoff`,
//! `timeout`) over 30 days are refused.
//!
//! An exec child gets `PATH`, `HOME`, `LANG`, `TZ`, the `HOOKBOX_*` variables hookbox
//! sets, and the variables its `[exec] env` lists — nothing else. The list may not
//! name a secret: `ADMIN_TOKEN`, `DATABASE_URL`, a `HOOKBOX_*` variable, or any
//! variable that some manifest in the folder names as its `secret_env`; nor a
//! variable that is not set. Any of these stops startup naming the file and
//! `exec.env` (a child that prints its environment would otherwise publish the
//! secret in `last_error`, which `GET /webhooks/{id}` shows without a token).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::kinds::{exec, http, log};
use super::{Pattern, Registry, Route};
use crate::config::parse_limited_duration;
use crate::retry::Policy;
use crate::signing::Secret;
use crate::ssrf::TargetGuard;

/// A problem in one manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    /// The manifest file.
    pub file: PathBuf,
    /// The field at fault (`-` when the file as a whole is).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {}: {}",
            self.file.display(),
            self.field,
            self.message
        )
    }
}

impl std::error::Error for ManifestError {}

/// The manifest file format.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    name: Option<String>,
    event_types: Vec<String>,
    kind: String,
    max_attempts: Option<u32>,
    backoff: Option<Vec<String>>,
    timeout: Option<String>,
    ordering_key: Option<String>,
    max_in_flight: Option<i64>,
    rate_limit: Option<String>,
    disable_after: Option<String>,
    /// A TOML inline table, or the filter as a JSON string.
    filter: Option<toml::Value>,
    /// A JavaScript file, relative to the manifest (kind http).
    transform: Option<String>,
    http: Option<HttpSection>,
    exec: Option<ExecSection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpSection {
    url: String,
    secret_env: Option<String>,
    ordering_key: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecSection {
    command: Vec<String>,
    #[serde(default)]
    env: Vec<String>,
}

/// Variables an exec `env` list may never pass through (besides `HOOKBOX_*` and the
/// folder's `secret_env` variables).
const NEVER_PASSED: &[&str] = &["ADMIN_TOKEN", "DATABASE_URL"];

/// Reads an environment variable by name.
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// What building handlers needs from the outside.
#[derive(Clone)]
pub struct Context {
    /// The global retry policy (manifests override it per handler).
    pub policy: Policy,
    /// The SSRF guard for http handlers.
    pub guard: Arc<TargetGuard>,
    /// The shared HTTP clients.
    pub client: crate::registry::kinds::outbound::Outbound,
    /// Reads an environment variable (`secret_env`); tests pass their own.
    pub env: EnvLookup,
}

/// Reads every `*.toml` of `dir` (sorted by name) into a registry. A missing folder
/// is an empty registry. Returns every problem found, not just the first.
pub fn load_dir(dir: &Path, ctx: &Context) -> Result<Registry, Vec<ManifestError>> {
    let files = match manifest_files(dir, "handlers") {
        Ok(files) => files,
        Err(e) => return Err(vec![e]),
    };
    let mut routes = Vec::new();
    let mut errors = Vec::new();
    let mut names: HashMap<String, PathBuf> = HashMap::new();
    let secrets = secret_vars(&files);
    for file in files {
        match load(&file, ctx, &secrets) {
            Ok(route) => match names.get(&route.name) {
                Some(first) => errors.push(ManifestError {
                    file: file.clone(),
                    field: "name".into(),
                    message: format!(
                        "{:?} is already the name of {}",
                        route.name,
                        first.display()
                    ),
                }),
                None => {
                    names.insert(route.name.clone(), file);
                    routes.push(route);
                }
            },
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    Registry::new(routes).map_err(|e| {
        vec![ManifestError {
            file: dir.to_owned(),
            field: "name".into(),
            message: e.to_string(),
        }]
    })
}

/// Where in `text` a TOML error is, as " (line L, column C)" (1-based), or
/// nothing when the parser gave no place.
pub(crate) fn toml_position(text: &str, e: &toml::de::Error) -> String {
    let Some(span) = e.span() else {
        return String::new();
    };
    let before = text.get(..span.start).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    format!(" (line {line}, column {column})")
}

/// The `*.toml` files of a manifests folder (`what`: "handlers", "sources"), sorted;
/// none when the folder does not exist.
pub(crate) fn manifest_files(dir: &Path, what: &str) -> Result<Vec<PathBuf>, ManifestError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(ManifestError {
                file: dir.to_owned(),
                field: "-".into(),
                message: format!("cannot read the {what} folder: {e}"),
            });
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    Ok(files)
}

/// The `secret_env` variables of every manifest that parses (the others are
/// reported by the main pass).
fn secret_vars(files: &[PathBuf]) -> HashSet<String> {
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .filter_map(|text| toml::from_str::<Manifest>(&text).ok())
        .filter_map(|m| m.http.and_then(|h| h.secret_env))
        .collect()
}

/// Parses and validates one manifest into a route.
pub fn load_file(file: &Path, ctx: &Context) -> Result<Route, ManifestError> {
    load(file, ctx, &secret_vars(&[file.to_owned()]))
}

/// A context for tests: the default policy, no allowed targets, `PATH` only.
#[cfg(test)]
pub(crate) fn test_context() -> Context {
    Context {
        policy: super::default_policy(),
        guard: Arc::new(crate::ssrf::TargetGuard::default()),
        client: crate::registry::kinds::http::client(Arc::new(TargetGuard::default()))
            .expect("clients"),
        env: Arc::new(|name: &str| (name == "PATH").then(|| "/bin".to_owned())),
    }
}

/// [`load_file`], with the `secret_env` variables of the whole folder.
fn load(file: &Path, ctx: &Context, secrets: &HashSet<String>) -> Result<Route, ManifestError> {
    let err = |field: &str, message: String| ManifestError {
        file: file.to_owned(),
        field: field.to_owned(),
        message,
    };
    let text = std::fs::read_to_string(file).map_err(|e| err("-", format!("cannot read: {e}")))?;
    let m: Manifest = toml::from_str(&text).map_err(|e| {
        let field = toml_field(&text, &e);
        err(
            &field,
            format!("{}{}", e.message(), toml_position(&text, &e)),
        )
    })?;
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = m.name.clone().unwrap_or(stem);
    if name.is_empty() || name.len() > 255 || name.chars().any(char::is_control) {
        return Err(err("name", "must be 1 to 255 printable characters".into()));
    }
    if m.event_types.is_empty() {
        return Err(err(
            "event_types",
            "list at least one event type or pattern".into(),
        ));
    }
    let patterns = m
        .event_types
        .iter()
        .map(|p| Pattern::parse(p))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err("event_types", e.to_string()))?;
    let policy = policy(&m, &ctx.policy).map_err(|(field, msg)| err(field, msg))?;
    let ordering_key = m
        .ordering_key
        .clone()
        .or_else(|| m.http.as_ref().and_then(|h| h.ordering_key.clone()));
    super::check_ordering_key(ordering_key.as_deref()).map_err(|(f, m)| err(f, m))?;
    let flow = super::flow::FlowControl::from_fields(
        m.max_in_flight,
        m.rate_limit.as_deref(),
        m.disable_after.as_deref(),
    )
    .map_err(|(f, m)| err(f, m))?;
    let filter = m
        .filter
        .as_ref()
        .map(filter)
        .transpose()
        .map_err(|m| err("filter", m))?;
    if m.transform.is_some() && m.kind != "http" {
        return Err(err(
            "transform",
            "a transform reshapes an http request: only kind = \"http\" takes one".into(),
        ));
    }
    let mut http_target_of_route = None;
    let (handler, target) = match m.kind.as_str() {
        "log" => (log::handler(&name), "log".to_owned()),
        "exec" => {
            let exec = m
                .exec
                .as_ref()
                .ok_or_else(|| err("exec", "kind = \"exec\" needs an [exec] section".into()))?;
            if exec.command.first().is_none_or(String::is_empty) {
                return Err(err("exec.command", "name the program to run".into()));
            }
            let env = child_env(&exec.env, ctx, secrets).map_err(|m| err("exec.env", m))?;
            (
                exec::handler(exec.command.clone(), env),
                exec.command.join(" "),
            )
        }
        "http" => {
            let section = m
                .http
                .as_ref()
                .ok_or_else(|| err("http", "kind = \"http\" needs an [http] section".into()))?;
            let mut target = http_target(section, ctx).map_err(|(field, msg)| err(field, msg))?;
            target.transform = m
                .transform
                .as_deref()
                .map(|path| transform(file, path))
                .transpose()
                .map_err(|m| err("transform", m))?;
            let shown = http::display_url(&target.url);
            http_target_of_route = Some(Arc::new(target.clone()));
            (
                http::handler(ctx.client.clone(), ctx.guard.clone(), target),
                shown,
            )
        }
        other => {
            return Err(err(
                "kind",
                format!("unknown handler kind {other:?} (expected http, exec or log)"),
            ));
        }
    };
    Ok(Route {
        name,
        patterns,
        ordering_key,
        policy,
        handler,
        kind: m.kind.clone(),
        target,
        active: true,
        flow,
        filter,
        http: http_target_of_route,
        metrics: Default::default(),
    })
}

/// Reads and compiles the transform at `path` (relative to the manifest `file`).
pub(crate) fn transform(
    file: &Path,
    path: &str,
) -> Result<Arc<crate::transform::Transform>, String> {
    let full = file.parent().unwrap_or(Path::new(".")).join(path);
    let source = std::fs::read_to_string(&full)
        .map_err(|e| format!("cannot read {}: {e}", full.display()))?;
    crate::transform::Transform::compile(path, &source)
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

/// A manifest's `filter`: a TOML inline table, or the filter as a JSON string.
fn filter(value: &toml::Value) -> Result<Arc<super::filter::Filter>, String> {
    let json = match value {
        toml::Value::String(text) => {
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?
        }
        other => serde_json::to_value(other).map_err(|e| e.to_string())?,
    };
    super::filter::Filter::compile(&json)
        .map(Arc::new)
        .map_err(|e| e.to_string())
}

fn policy(m: &Manifest, defaults: &Policy) -> Result<Policy, (&'static str, String)> {
    let mut p = super::overrides(defaults, m.max_attempts, m.backoff.as_deref())?;
    if let Some(t) = &m.timeout {
        match parse_limited_duration(t) {
            Ok(d) if !d.is_zero() => p.timeout = d,
            Ok(_) => return Err(("timeout", format!("{t:?}: expected a duration above 0"))),
            Err(e) => return Err(("timeout", format!("{t:?}: {e}"))),
        }
    }
    Ok(p)
}

/// The whole environment of an exec child besides `HOOKBOX_*`: the
/// [`exec::INHERITED`] variables that are set, and the listed ones (which must be
/// set, and must not be secrets).
fn child_env(
    listed: &[String],
    ctx: &Context,
    secrets: &HashSet<String>,
) -> Result<Vec<(String, String)>, String> {
    let mut env = Vec::new();
    for name in exec::INHERITED {
        if let Some(value) = (ctx.env)(name).filter(|_| !secrets.contains(*name)) {
            env.push(((*name).to_owned(), value));
        }
    }
    for name in listed {
        let valid = name.chars().next().is_some_and(|c| !c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(format!("{name:?} is not a variable name"));
        }
        if NEVER_PASSED.contains(&name.as_str()) {
            return Err(format!(
                "{name} is hookbox's own secret and is never passed to a child"
            ));
        }
        if name.starts_with("HOOKBOX_") {
            return Err(format!(
                "{name}: HOOKBOX_ variables are set by hookbox, never passed through"
            ));
        }
        if secrets.contains(name) {
            return Err(format!(
                "{name} is a signing secret (a manifest's secret_env) and is never passed to a child"
            ));
        }
        let value =
            (ctx.env)(name).ok_or_else(|| format!("the environment variable {name} is not set"))?;
        env.retain(|(k, _)| k != name);
        env.push((name.clone(), value));
    }
    Ok(env)
}

fn http_target(
    section: &HttpSection,
    ctx: &Context,
) -> Result<http::HttpTarget, (&'static str, String)> {
    let url = reqwest::Url::parse(&section.url)
        .map_err(|e| ("http.url", format!("{:?}: {e}", section.url)))?;
    match ctx.guard.check_url(&url) {
        // A wrong scheme can never work: refuse it now.
        Err(e @ (crate::ssrf::TargetError::Scheme | crate::ssrf::TargetError::NoHost)) => {
            return Err(("http.url", e.to_string()));
        }
        // An internal address is refused at delivery time (deliveries fail and
        // show why), so ALLOWED_TARGETS can be fixed without touching the manifest.
        Err(e) => {
            tracing::warn!(url = %http::display_url(&url), error = %e, "http handler target is refused")
        }
        Ok(()) => {}
    }
    let secrets = match &section.secret_env {
        None => Vec::new(),
        Some(var) => {
            let value = (ctx.env)(var).ok_or((
                "http.secret_env",
                format!("the environment variable {var} is not set"),
            ))?;
            let secrets = Secret::parse_list(&value)
                .map_err(|e| ("http.secret_env", format!("{var}: {e}")))?;
            crate::signing::warn_if_short(&secrets, var);
            secrets
        }
    };
    Ok(http::HttpTarget {
        url,
        secrets,
        transform: None,
    })
}

/// Best guess of the field a TOML/serde message is about (`unknown field `x``).
fn field_of(message: &str) -> String {
    message
        .split('`')
        .nth(1)
        .filter(|f| !f.contains(' '))
        .unwrap_or("-")
        .to_owned()
}

/// The field a TOML error in `text` is about: the key of the `key = value` line
/// whose value the error points at, else the back-quoted name in the message
/// (`unknown field `x``, `missing field `url``). A type error names the value,
/// not the key ("invalid type: integer `5`, expected a string"), so its key is
/// read from the text: `interval = 5` names `interval`.
pub(crate) fn toml_field(text: &str, e: &toml::de::Error) -> String {
    e.span()
        .and_then(|span| key_before(text, span.start))
        .unwrap_or_else(|| field_of(e.message()))
}

/// The key whose value starts at byte `at` of `text` (`at` lies after the `=`
/// of its line).
fn key_before(text: &str, at: usize) -> Option<String> {
    let before = text.get(..at)?;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let (key, _) = before.get(line_start..)?.split_once('=')?;
    let key = key.trim().trim_matches(|c| c == '"' || c == '\'');
    let plain = !key.is_empty() && !key.starts_with('[') && !key.contains(char::is_whitespace);
    plain.then(|| key.rsplit('.').next().unwrap_or(key).to_owned())
}

/// The routing table as `hookbox handlers check` prints it.
pub fn table(registry: &Registry) -> String {
    let mut rows = vec![[
        "NAME".to_owned(),
        "KIND".to_owned(),
        "EVENT TYPES".to_owned(),
        "ORDERING".to_owned(),
        "ATTEMPTS".to_owned(),
        "TIMEOUT".to_owned(),
        "TARGET".to_owned(),
    ]];
    for r in registry.routes() {
        rows.push([
            r.name.clone(),
            r.kind.clone(),
            r.patterns
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            r.ordering_key.clone().unwrap_or_else(|| "-".into()),
            r.policy.max_attempts.to_string(),
            humantime::format_duration(r.policy.timeout).to_string(),
            r.target.clone(),
        ]);
    }
    columns(&rows)
}

/// Lays out rows of cells as left-aligned columns (the first row is the header).
pub(crate) fn columns<const N: usize>(rows: &[[String; N]]) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            r.iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_owned()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MAX_DURATION;

    /// A type error names the key, not the value it refused.
    #[test]
    fn a_toml_error_names_its_key() {
        let field = |text: &str| {
            let e = toml::from_str::<Manifest>(text).expect_err("refused");
            toml_field(text, &e)
        };
        assert_eq!(
            field("event_types = [\"a\"]\nkind = \"log\"\nmax_attempts = \"five\""),
            "max_attempts"
        );
        assert_eq!(
            field("event_types = [\"a\"]\nkind = \"http\"\n[http]\nurl = 5"),
            "url"
        );
        assert_eq!(
            field("event_types = [\"a\"]\nkind = \"log\"\nbogus = 1"),
            "bogus"
        );
        assert_eq!(field("kind = \"log\""), "event_types");
    }
    use crate::retry::Backoff;
    use proptest::prelude::*;

    fn ctx() -> Context {
        Context {
            policy: super::super::default_policy(),
            guard: Arc::new(TargetGuard::default()),
            client: crate::registry::kinds::http::client(Arc::new(TargetGuard::default()))
                .expect("clients"),
            env: Arc::new(|name: &str| (name == "PATH").then(|| "/bin".to_owned())),
        }
    }

    /// Writes a log manifest with these `backoff` and `timeout` values and loads it.
    fn load_with(backoff: &[String], timeout: &str) -> Result<Route, ManifestError> {
        let dir = tempfile::tempdir().expect("dir");
        let mut doc = toml::Table::new();
        doc.insert("event_types".into(), vec!["a".to_owned()].into());
        doc.insert("kind".into(), "log".into());
        doc.insert("backoff".into(), backoff.to_vec().into());
        doc.insert("timeout".into(), timeout.into());
        let file = dir.path().join("m.toml");
        std::fs::write(&file, doc.to_string()).expect("write");
        load_file(&file, &ctx())
    }

    /// A duration as a manifest may write it, sometimes far too long.
    fn duration_text() -> impl Strategy<Value = String> {
        prop_oneof![
            (0u64..100_000_000).prop_map(|n| format!("{n}s")),
            (0u64..1_000_000).prop_map(|n| format!("{n}m")),
            (0u64..100).prop_map(|n| format!("{n}days")),
            (0u64..100_000_000_000).prop_map(|n| format!("{n}ms")),
            "\\PC{0,12}",
        ]
    }

    proptest! {
        #![proptest_config(crate::test_cases::cases(64))]

        /// Whatever the durations, a manifest loads with every one within 30 days
        /// (and a timeout above 0), or is refused naming the field.
        #[test]
        fn manifest_durations_are_within_30_days_or_refused(
            backoff in proptest::collection::vec(duration_text(), 1..4),
            timeout in duration_text(),
        ) {
            match load_with(&backoff, &timeout) {
                Ok(route) => {
                    prop_assert!(route.policy.timeout <= MAX_DURATION && !route.policy.timeout.is_zero());
                    let Backoff::Schedule(steps) = &route.policy.backoff else {
                        return Err(TestCaseError::fail("a backoff list is a schedule"));
                    };
                    prop_assert!(steps.iter().all(|d| *d <= MAX_DURATION));
                }
                Err(e) => prop_assert!(e.field == "backoff" || e.field == "timeout", "{}", e),
            }
        }
    }
}
