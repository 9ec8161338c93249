//! Handler manifests: every `*.toml` in `HANDLERS_DIR` is one handler (SPEC §4).
//!
//! ```toml
//! name = "billing-sync"                 # unique; defaults to the file stem
//! event_types = ["order.created", "invoice.*"]
//! kind = "http"                         # http | exec | log
//! max_attempts = 8                      # optional overrides of the global policy
//! backoff = ["5s", "30s", "300s"]       # explicit schedule (the last one repeats)
//! timeout = "10s"
//! ordering_key = "/customer_id"         # any kind; or under [http] as in SPEC
//!
//! [http]
//! url = "https://billing.example.com/hooks"
//! secret_env = "BILLING_WEBHOOK_SECRET" # names the variable, never the secret
//!
//! [exec]
//! command = ["./handlers/bin/notify.sh", "--fast"]
//! ```
//!
//! Every problem names the file and the field. Unknown fields are errors (a typo in
//! `max_atempts` must not silently fall back to the default).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::kinds::{exec, http, log};
use super::{Pattern, Registry, Route};
use crate::config::parse_duration;
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
}

/// Reads an environment variable by name.
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// What building handlers needs from the outside.
#[derive(Clone)]
pub struct Context {
    /// The global retry policy (manifests override it per handler).
    pub policy: Policy,
    /// The SSRF guard for http handlers.
    pub guard: Arc<TargetGuard>,
    /// The shared HTTP client.
    pub client: reqwest::Client,
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
    for file in files {
        match load_file(&file, ctx) {
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

/// Parses and validates one manifest into a route.
pub fn load_file(file: &Path, ctx: &Context) -> Result<Route, ManifestError> {
    let err = |field: &str, message: String| ManifestError {
        file: file.to_owned(),
        field: field.to_owned(),
        message,
    };
    let text = std::fs::read_to_string(file).map_err(|e| err("-", format!("cannot read: {e}")))?;
    let m: Manifest = toml::from_str(&text).map_err(|e| {
        let message = e.message().to_owned();
        let field = field_of(&message);
        err(&field, message)
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
            (exec::handler(exec.command.clone()), exec.command.join(" "))
        }
        "http" => {
            let section = m
                .http
                .as_ref()
                .ok_or_else(|| err("http", "kind = \"http\" needs an [http] section".into()))?;
            let target = http_target(section, ctx).map_err(|(field, msg)| err(field, msg))?;
            let shown = http::display_url(&target.url);
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
    })
}

fn policy(m: &Manifest, defaults: &Policy) -> Result<Policy, (&'static str, String)> {
    let mut p = super::overrides(defaults, m.max_attempts, m.backoff.as_deref())?;
    if let Some(t) = &m.timeout {
        match parse_duration(t) {
            Some(d) if !d.is_zero() => p.timeout = d,
            _ => return Err(("timeout", format!("{t:?} is not a duration above 0"))),
        }
    }
    Ok(p)
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
            Secret::parse_list(&value).map_err(|e| ("http.secret_env", format!("{var}: {e}")))?
        }
    };
    Ok(http::HttpTarget { url, secrets })
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
