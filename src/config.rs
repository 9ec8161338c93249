//! Configuration: built-in defaults < `config/hookbox.toml` (or the file named by
//! `HOOKBOX_CONFIG`) < environment variables.
//!
//! Every setting has one name, written `UPPER_CASE` in the environment and
//! `lower_case` in the file. Every value is parsed here, once, into a typed
//! [`Config`]; a bad one becomes a [`ConfigError`] that names the setting, which the
//! binary prints on one line before exiting with code 2.
//!
//! Two limits guard against values that parse but cannot be meant: a duration over
//! [`MAX_DURATION`] (30 days) is refused, since a backoff of years overflows the
//! retry timer; and `ADMIN_TOKEN`, when set at all, must be at least
//! [`MIN_ADMIN_TOKEN_CHARS`] characters, because an empty or blank token used to
//! mean "no token" and left every admin route open.
//!
//! ```
//! use hookbox::config::Config;
//! let cfg = Config::from_pairs([("WORKER_COUNT", "4"), ("RETRY_BASE_DELAY", "250ms")])
//!     .expect("valid");
//! assert_eq!(cfg.worker_count, 4);
//! assert_eq!(cfg.retry_base_delay, std::time::Duration::from_millis(250));
//!
//! let err = Config::from_pairs([("QUEUE_MAXSIZE", "lots")]).unwrap_err();
//! assert!(err.to_string().contains("QUEUE_MAXSIZE"));
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use figment::providers::{Env, Format, Toml};
use figment::value::Value;
use figment::{Figment, Provider};
use ipnet::IpNet;

/// The file read when `HOOKBOX_CONFIG` is not set (a missing default file is fine).
pub const DEFAULT_CONFIG_FILE: &str = "config/hookbox.toml";

/// The longest duration any setting, manifest or subscriber may ask for
/// (docs/configuration.md).
pub const MAX_DURATION: Duration = Duration::from_secs(30 * 24 * 3600);

/// The longest `INSTANCE_ID` accepted, in bytes.
pub const MAX_INSTANCE_ID_BYTES: usize = 255;

/// This machine's host name (`HOSTNAME`, else `/etc/hostname`, else `hookbox`): the
/// default `INSTANCE_ID`.
pub fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "hookbox".to_owned())
}

/// The shortest `ADMIN_TOKEN` accepted.
pub const MIN_ADMIN_TOKEN_CHARS: usize = 16;

/// Every setting with its default, in the order of docs/configuration.md. `None` =
/// unset.
pub const SETTINGS: &[(&str, Option<&str>)] = &[
    ("BIND_ADDR", Some("0.0.0.0:8000")),
    ("DATABASE_URL", None),
    ("DB_PATH", Some("./data/events.db")),
    ("DATABASE_MAX_CONNECTIONS", Some("10")),
    ("HANDLERS_DIR", Some("./handlers")),
    ("SOURCES_DIR", Some("./sources")),
    ("WORKER_COUNT", Some("128")),
    ("QUEUE_MAXSIZE", Some("10000")),
    ("MAX_BACKLOG", Some("10000000")),
    ("MAX_ATTEMPTS", Some("5")),
    ("RETRY_BASE_DELAY", Some("5s")),
    ("RETRY_MAX_DELAY", Some("300s")),
    ("HANDLER_TIMEOUT", Some("30s")),
    ("RETENTION_DAYS", Some("30")),
    ("CLEANUP_INTERVAL_HOURS", Some("1")),
    ("MAX_BODY_BYTES", Some("1048576")),
    ("REQUIRE_IDEMPOTENCY_KEY", Some("false")),
    ("ADMIN_TOKEN", None),
    ("ENCRYPTION_KEY", None),
    ("ENCRYPTION_KEY_FILE", None),
    ("ENCRYPTION_KEYS_OLD", None),
    ("SQLITE_SYNCHRONOUS", Some("full")),
    ("SHUTDOWN_GRACE", Some("10s")),
    ("ALLOWED_TARGETS", None),
    ("ALLOWED_HOSTS", None),
    ("METRICS_PUBLIC", Some("true")),
    ("LEASE_TIMEOUT", Some("60s")),
    ("INSTANCE_ID", None),
    ("MAX_CONNECTIONS", Some("10000")),
    ("LOG_LEVEL", Some("info")),
    ("LOG_FORMAT", Some("pretty")),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", None),
    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", Some("http/protobuf")),
    ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", None),
    ("OTEL_EXPORTER_OTLP_HEADERS", None),
    ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", None),
    ("OTEL_EXPORTER_OTLP_TIMEOUT", Some("10000")),
    ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", None),
    ("OTEL_SERVICE_NAME", None),
    ("OTEL_RESOURCE_ATTRIBUTES", None),
    ("OTEL_TRACES_EXPORTER", Some("otlp")),
    ("OTEL_SDK_DISABLED", Some("false")),
];

/// A configuration problem, naming the setting it is about.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A value that does not parse or is out of range.
    #[error("invalid value for {name}: {value:?} ({reason})")]
    Invalid {
        /// The setting's name, as in the environment.
        name: &'static str,
        /// The offending value (secrets are never echoed).
        value: String,
        /// What was expected.
        reason: String,
    },
    /// The configuration file is missing, unreadable or not TOML.
    #[error("cannot read configuration file {path}: {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A key in the configuration file that is no setting (a typo, most likely).
    #[error("unknown setting {key:?} in {path}")]
    UnknownKey {
        /// The file.
        path: PathBuf,
        /// The key as written.
        key: String,
    },
}

/// How hard SQLite syncs each commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqliteSynchronous {
    /// fsync at every commit: an acknowledged event survives power loss.
    Full,
    /// Survives a crash of the process, not of the machine.
    Normal,
}

/// Where and how spans are exported over OTLP (SPEC §13), from the standard
/// OpenTelemetry variables: a `TRACES_` variable wins over its general form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Otlp {
    /// Where traces are posted: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is, or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces` appended (the
    /// OpenTelemetry rule for the base endpoint).
    pub traces_endpoint: String,
    /// `OTEL_EXPORTER_OTLP_HEADERS` and `…_TRACES_HEADERS`, decoded (sent with
    /// every export; a name in both takes the traces' value).
    pub headers: Vec<(String, String)>,
    /// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` or `…_TIMEOUT`: the longest one export
    /// may take.
    pub timeout: Duration,
    /// `OTEL_SERVICE_NAME`, else `service.name` in `OTEL_RESOURCE_ATTRIBUTES`,
    /// else `hookbox`: the `service.name` of hookbox's spans.
    pub service_name: String,
    /// `OTEL_RESOURCE_ATTRIBUTES` but `service.name`: more attributes of the
    /// resource (`deployment.environment=prod`, say).
    pub resource: Vec<(String, String)>,
}

impl Otlp {
    /// Where traces are posted.
    ///
    /// ```
    /// use hookbox::config::Config;
    /// let cfg = Config::from_pairs([("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")])
    ///     .expect("valid");
    /// let otlp = cfg.otlp.expect("set");
    /// assert_eq!(otlp.traces_endpoint(), "http://127.0.0.1:4318/v1/traces");
    /// assert_eq!(otlp.service_name, "hookbox");
    ///
    /// let cfg = Config::from_pairs([
    ///     ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/custom"),
    ///     ("OTEL_RESOURCE_ATTRIBUTES", "service.name=billing,deployment.environment=prod"),
    /// ])
    /// .expect("valid");
    /// let otlp = cfg.otlp.expect("set");
    /// assert_eq!(otlp.traces_endpoint(), "http://127.0.0.1:4318/custom");
    /// assert_eq!(otlp.service_name, "billing");
    /// assert_eq!(otlp.resource, [("deployment.environment".to_owned(), "prod".to_owned())]);
    ///
    /// let off = Config::from_pairs([
    ///     ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
    ///     ("OTEL_SDK_DISABLED", "true"),
    /// ])
    /// .expect("valid");
    /// assert!(off.otlp.is_none());
    /// ```
    pub fn traces_endpoint(&self) -> &str {
        &self.traces_endpoint
    }
}

/// Human or machine log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Coloured multi-field lines for a terminal.
    Pretty,
    /// One JSON object per line.
    Json,
}

/// A secret string whose `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for comparison or signing only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// The service's settings, typed. See docs/configuration.md for each one's meaning.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listen address (port 0 picks a free one).
    pub bind_addr: SocketAddr,
    /// `sqlite://PATH` or `postgres://…`; wins over `db_path`.
    pub database_url: Option<String>,
    /// SQLite file.
    pub db_path: PathBuf,
    /// PostgreSQL: pooled connections per instance (plus one for `LISTEN`).
    pub database_max_connections: u32,
    /// Handler manifests.
    pub handlers_dir: PathBuf,
    /// Source manifests (a missing folder means no sources).
    pub sources_dir: PathBuf,
    /// Worker tasks (0 = this instance only accepts events).
    pub worker_count: usize,
    /// Bound on due work (what a destination could take now); past it → 429.
    pub queue_maxsize: usize,
    /// Bound on every pending delivery, whatever holds it back; past it → 429.
    pub max_backlog: usize,
    /// Attempts before dead-letter.
    pub max_attempts: u32,
    /// Backoff base.
    pub retry_base_delay: Duration,
    /// Backoff cap.
    pub retry_max_delay: Duration,
    /// One attempt's limit.
    pub handler_timeout: Duration,
    /// Terminal events older than this many days are deleted.
    pub retention_days: f64,
    /// Retention task period.
    pub cleanup_interval: Duration,
    /// Larger request bodies get 413.
    pub max_body_bytes: usize,
    /// Intake without a key gets 400.
    pub require_idempotency_key: bool,
    /// Bearer token for admin routes.
    pub admin_token: Option<Secret>,
    /// SQLite durability.
    pub sqlite_synchronous: SqliteSynchronous,
    /// How long in-flight attempts may finish on SIGTERM.
    pub shutdown_grace: Duration,
    /// Private or loopback networks http handlers may reach anyway.
    pub allowed_targets: Vec<IpNet>,
    /// Host names (besides IP literals and `localhost`) the admin routes and the
    /// console answer under when no `ADMIN_TOKEN` is set.
    pub allowed_hosts: Vec<String>,
    /// When false, `/metrics` needs the admin token.
    pub metrics_public: bool,
    /// PostgreSQL lease length.
    pub lease_timeout: Duration,
    /// PostgreSQL: who holds this instance's claims (`INSTANCE_ID`, default the
    /// host name); a restart with the same id takes them back at once.
    pub instance_id: String,
    /// Open client connections at most; more wait to be accepted.
    pub max_connections: u32,
    /// tracing filter directive.
    pub log_level: String,
    /// Log line format.
    pub log_format: LogFormat,
    /// The keys that seal subscriber secrets (`ENCRYPTION_KEY`,
    /// `ENCRYPTION_KEY_FILE`, `ENCRYPTION_KEYS_OLD`); empty: kept in the clear.
    pub encryption: crate::sealing::Keyring,
    /// The OTLP exporter (`OTEL_EXPORTER_OTLP_*`); `None`: no spans exported.
    pub otlp: Option<Otlp>,
}

impl Default for Config {
    fn default() -> Self {
        Self::from_pairs(std::iter::empty::<(&str, &str)>())
            .unwrap_or_else(|e| unreachable!("built-in defaults are valid: {e}"))
    }
}

impl Config {
    /// Loads defaults < config file < process environment.
    ///
    /// The file is `HOOKBOX_CONFIG` if set (it must exist), else
    /// [`DEFAULT_CONFIG_FILE`] if it exists.
    pub fn load() -> Result<Self, ConfigError> {
        let explicit = std::env::var_os("HOOKBOX_CONFIG").map(PathBuf::from);
        let mut values = match &explicit {
            Some(path) => read_file(path)?,
            None if Path::new(DEFAULT_CONFIG_FILE).exists() => {
                read_file(Path::new(DEFAULT_CONFIG_FILE))?
            }
            None => BTreeMap::new(),
        };
        let names: Vec<&str> = SETTINGS.iter().map(|(n, _)| *n).collect();
        let env = Figment::from(Env::raw().only(&names));
        values.extend(flatten(&env));
        // A secret is taken as written: figment would read `0123…` as a number.
        if let Some(token) = std::env::var_os("ADMIN_TOKEN") {
            values.insert(
                "ADMIN_TOKEN".to_owned(),
                token.to_string_lossy().into_owned(),
            );
        }
        Self::from_values(values)
    }

    /// Builds a configuration from `(NAME, value)` pairs over the defaults, ignoring
    /// the file and the environment (for tests and embedding).
    pub fn from_pairs<K: AsRef<str>, V: AsRef<str>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, ConfigError> {
        let values = pairs
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_ascii_uppercase(), v.as_ref().to_owned()))
            .collect();
        Self::from_values(values)
    }

    fn from_values(values: BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let s = Settings(values);
        Ok(Self {
            bind_addr: s.parse("BIND_ADDR", "an address like 0.0.0.0:8000")?,
            database_url: s.database_url()?,
            db_path: PathBuf::from(s.text("DB_PATH")),
            database_max_connections: s.positive("DATABASE_MAX_CONNECTIONS")?,
            handlers_dir: PathBuf::from(s.text("HANDLERS_DIR")),
            sources_dir: PathBuf::from(s.text("SOURCES_DIR")),
            worker_count: s.parse("WORKER_COUNT", "a whole number")?,
            queue_maxsize: s.positive("QUEUE_MAXSIZE")?,
            max_backlog: s.positive("MAX_BACKLOG")?,
            max_attempts: s.positive("MAX_ATTEMPTS")?,
            retry_base_delay: s.duration("RETRY_BASE_DELAY")?,
            retry_max_delay: s.duration("RETRY_MAX_DELAY")?,
            handler_timeout: s.nonzero_duration("HANDLER_TIMEOUT")?,
            retention_days: s.non_negative_f64("RETENTION_DAYS")?,
            cleanup_interval: s.hours("CLEANUP_INTERVAL_HOURS")?,
            max_body_bytes: s.positive("MAX_BODY_BYTES")?,
            require_idempotency_key: s.boolean("REQUIRE_IDEMPOTENCY_KEY")?,
            admin_token: s.admin_token()?,
            encryption: s.keyring()?,
            sqlite_synchronous: s.choice(
                "SQLITE_SYNCHRONOUS",
                &[
                    ("full", SqliteSynchronous::Full),
                    ("normal", SqliteSynchronous::Normal),
                ],
            )?,
            shutdown_grace: s.duration("SHUTDOWN_GRACE")?,
            allowed_targets: s.cidrs("ALLOWED_TARGETS")?,
            allowed_hosts: s.hosts("ALLOWED_HOSTS")?,
            metrics_public: s.boolean("METRICS_PUBLIC")?,
            lease_timeout: s.nonzero_duration("LEASE_TIMEOUT")?,
            instance_id: s.instance_id()?,
            max_connections: s.positive("MAX_CONNECTIONS")?,
            log_level: s.log_filter("LOG_LEVEL")?,
            log_format: s.choice(
                "LOG_FORMAT",
                &[("pretty", LogFormat::Pretty), ("json", LogFormat::Json)],
            )?,
            otlp: s.otlp()?,
        })
    }

    /// The SQLite file this configuration names: `DATABASE_URL=sqlite://PATH` wins
    /// over `DB_PATH`. `None` when `DATABASE_URL` names another database.
    ///
    /// ```
    /// use hookbox::config::Config;
    /// let cfg = Config::from_pairs([("DATABASE_URL", "sqlite:///tmp/x.db")]).expect("valid");
    /// assert_eq!(cfg.sqlite_path().expect("sqlite"), std::path::Path::new("/tmp/x.db"));
    /// ```
    pub fn sqlite_path(&self) -> Option<PathBuf> {
        match &self.database_url {
            None => Some(self.db_path.clone()),
            Some(url) => url
                .strip_prefix("sqlite://")
                .or_else(|| url.strip_prefix("sqlite:"))
                .map(|p| PathBuf::from(p.split('?').next().unwrap_or(p))),
        }
    }
}

/// Parses a duration: `250ms`, `5s`, `5m`, `1h 30m`, or bare (possibly fractional)
/// seconds.
///
/// ```
/// use std::time::Duration;
/// use hookbox::config::parse_duration;
/// assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
/// assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
/// assert_eq!(parse_duration("2.5"), Some(Duration::from_millis(2500)));
/// assert_eq!(parse_duration("soon"), None);
/// ```
pub fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if let Ok(secs) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    humantime::parse_duration(text).ok()
}

/// Why a duration was refused by [`parse_limited_duration`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Not a duration at all.
    #[error("expected a duration like 250ms, 5s, 5m or 10")]
    Unparsable,
    /// Longer than [`MAX_DURATION`].
    #[error("expected a duration of at most 30 days")]
    TooLong,
}

/// [`parse_duration`], refusing anything over [`MAX_DURATION`] (30 days): what
/// settings, manifests and subscribers accept.
///
/// ```
/// use std::time::Duration;
/// use hookbox::config::{DurationError, parse_limited_duration};
/// assert_eq!(parse_limited_duration("30days"), Ok(Duration::from_secs(30 * 86_400)));
/// assert_eq!(parse_limited_duration("100000000s"), Err(DurationError::TooLong));
/// assert_eq!(parse_limited_duration("soon"), Err(DurationError::Unparsable));
/// ```
pub fn parse_limited_duration(text: &str) -> Result<Duration, DurationError> {
    let d = parse_duration(text).ok_or(DurationError::Unparsable)?;
    if d > MAX_DURATION {
        Err(DurationError::TooLong)
    } else {
        Ok(d)
    }
}

/// A TOML parse error on one line, without the parser's quote of the offending
/// line (`2 | admin_token = …` and its caret): the line may hold a secret, and a
/// startup error is one line. "TOML parse error at line 2, column 17: invalid
/// string; expected `"`, `'`".
fn without_snippet(reason: &str) -> String {
    let quoted = |line: &str| {
        let t = line.trim_start();
        t.starts_with('|')
            || t.split_once(" |")
                .is_some_and(|(n, _)| n.parse::<u32>().is_ok())
    };
    let mut parts = reason
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !quoted(l));
    let mut text = parts.next().unwrap_or_default().to_owned();
    for (i, part) in parts.enumerate() {
        text.push_str(if i == 0 { ": " } else { "; " });
        text.push_str(part);
    }
    text
}

fn read_file(path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
        path: path.to_owned(),
        reason: e.to_string(),
    })?;
    let figment = Figment::from(Toml::string(&text));
    let dict = figment.data().map_err(|e| ConfigError::File {
        path: path.to_owned(),
        reason: without_snippet(&e.to_string()),
    })?;
    for key in dict.values().flat_map(|d| d.keys()) {
        if !SETTINGS.iter().any(|(n, _)| n.eq_ignore_ascii_case(key)) {
            return Err(ConfigError::UnknownKey {
                path: path.to_owned(),
                key: key.to_string(),
            });
        }
    }
    Ok(flatten(&figment))
}

/// Every top-level key of a figment as `UPPER_NAME → text`.
fn flatten(figment: &Figment) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Ok(data) = figment.data() {
        for dict in data.values() {
            for (key, value) in dict {
                if let Some(text) = scalar_text(value) {
                    out.insert(key.to_ascii_uppercase(), text);
                }
            }
        }
    }
    out
}

fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(_, s) => Some(s.clone()),
        Value::Char(_, c) => Some(c.to_string()),
        Value::Bool(_, b) => Some(b.to_string()),
        Value::Num(_, n) => n
            .to_u128()
            .map(|u| u.to_string())
            .or_else(|| n.to_i128().map(|i| i.to_string()))
            .or_else(|| n.to_f64().map(|f| f.to_string())),
        Value::Array(_, items) => Some(
            items
                .iter()
                .filter_map(scalar_text)
                .collect::<Vec<_>>()
                .join(","),
        ),
        Value::Empty(..) | Value::Dict(..) => None,
    }
}

/// Raw values by name, with typed accessors that fall back to the defaults.
struct Settings(BTreeMap<String, String>);

impl Settings {
    fn optional(&self, name: &'static str) -> Option<String> {
        self.0
            .get(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .or_else(|| default_of(name).map(str::to_owned))
    }

    fn text(&self, name: &'static str) -> String {
        self.optional(name).unwrap_or_default()
    }

    fn invalid(&self, name: &'static str, reason: &str) -> ConfigError {
        let value = if matches!(
            name,
            "ADMIN_TOKEN"
                | "DATABASE_URL"
                | "OTEL_EXPORTER_OTLP_HEADERS"
                | "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
                | "ENCRYPTION_KEY"
                | "ENCRYPTION_KEYS_OLD"
        ) {
            "***".to_owned()
        } else {
            self.text(name)
        };
        ConfigError::Invalid {
            name,
            value,
            reason: reason.to_owned(),
        }
    }

    fn parse<T: FromStr>(&self, name: &'static str, expected: &str) -> Result<T, ConfigError> {
        self.text(name)
            .parse()
            .map_err(|_| self.invalid(name, &format!("expected {expected}")))
    }

    fn positive<T: FromStr + Default + PartialOrd>(
        &self,
        name: &'static str,
    ) -> Result<T, ConfigError> {
        let v: T = self.parse(name, "a whole number above 0")?;
        if v > T::default() {
            Ok(v)
        } else {
            Err(self.invalid(name, "expected a whole number above 0"))
        }
    }

    fn non_negative_f64(&self, name: &'static str) -> Result<f64, ConfigError> {
        let v: f64 = self.parse(name, "a number")?;
        if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(self.invalid(name, "expected a number of at least 0"))
        }
    }

    fn positive_f64(&self, name: &'static str) -> Result<f64, ConfigError> {
        let v = self.non_negative_f64(name)?;
        if v > 0.0 {
            Ok(v)
        } else {
            Err(self.invalid(name, "expected a number above 0"))
        }
    }

    fn duration(&self, name: &'static str) -> Result<Duration, ConfigError> {
        parse_limited_duration(&self.text(name)).map_err(|e| self.invalid(name, &e.to_string()))
    }

    /// A number of hours above 0, at most 30 days' worth.
    fn hours(&self, name: &'static str) -> Result<Duration, ConfigError> {
        let h = self.positive_f64(name)?;
        Duration::try_from_secs_f64(h * 3600.0)
            .ok()
            .filter(|d| *d <= MAX_DURATION)
            .ok_or_else(|| self.invalid(name, "expected at most 720 hours (30 days)"))
    }

    /// `ADMIN_TOKEN`: unset is no token; set, it must be at least
    /// [`MIN_ADMIN_TOKEN_CHARS`] characters (empty or blank is a mistake, not "open").
    fn admin_token(&self) -> Result<Option<Secret>, ConfigError> {
        let Some(raw) = self.0.get("ADMIN_TOKEN") else {
            return Ok(None);
        };
        let token = raw.trim();
        if token.chars().count() < MIN_ADMIN_TOKEN_CHARS {
            return Err(self.invalid(
                "ADMIN_TOKEN",
                &format!(
                    "expected at least {MIN_ADMIN_TOKEN_CHARS} characters; unset it to leave the admin routes open"
                ),
            ));
        }
        Ok(Some(Secret(token.to_owned())))
    }

    /// `INSTANCE_ID`: 1 to [`MAX_INSTANCE_ID_BYTES`] bytes of printable characters
    /// (no control characters); unset, the host name.
    fn instance_id(&self) -> Result<String, ConfigError> {
        let id = match self.0.get("INSTANCE_ID") {
            Some(raw) => raw.trim().to_owned(),
            None => host_name(),
        };
        if id.is_empty() || id.len() > MAX_INSTANCE_ID_BYTES || id.chars().any(char::is_control) {
            return Err(ConfigError::Invalid {
                name: "INSTANCE_ID",
                value: id,
                reason: format!(
                    "expected 1 to {MAX_INSTANCE_ID_BYTES} bytes of printable characters"
                ),
            });
        }
        Ok(id)
    }

    fn nonzero_duration(&self, name: &'static str) -> Result<Duration, ConfigError> {
        let d = self.duration(name)?;
        if d.is_zero() {
            Err(self.invalid(name, "expected a duration above 0"))
        } else {
            Ok(d)
        }
    }

    fn boolean(&self, name: &'static str) -> Result<bool, ConfigError> {
        match self.text(name).to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(true),
            "false" | "0" | "no" | "off" => Ok(false),
            _ => Err(self.invalid(name, "expected true or false")),
        }
    }

    fn choice<T: Copy>(&self, name: &'static str, options: &[(&str, T)]) -> Result<T, ConfigError> {
        let text = self.text(name).to_ascii_lowercase();
        options
            .iter()
            .find(|(k, _)| *k == text)
            .map(|(_, v)| *v)
            .ok_or_else(|| {
                let names: Vec<&str> = options.iter().map(|(k, _)| *k).collect();
                self.invalid(name, &format!("expected one of {}", names.join(", ")))
            })
    }

    /// `ENCRYPTION_KEY` (or the file `ENCRYPTION_KEY_FILE` holding it) and
    /// `ENCRYPTION_KEYS_OLD` (space separated): base64 of 32 bytes each.
    fn keyring(&self) -> Result<crate::sealing::Keyring, ConfigError> {
        use crate::sealing::Keyring;
        let (key_name, current) = match (
            self.optional("ENCRYPTION_KEY"),
            self.optional("ENCRYPTION_KEY_FILE"),
        ) {
            (Some(_), Some(_)) => {
                return Err(self.invalid(
                    "ENCRYPTION_KEY_FILE",
                    "set ENCRYPTION_KEY or ENCRYPTION_KEY_FILE, not both",
                ));
            }
            (Some(key), None) => ("ENCRYPTION_KEY", Some(key)),
            (None, Some(path)) => {
                let key = std::fs::read_to_string(&path).map_err(|e| {
                    self.invalid("ENCRYPTION_KEY_FILE", &format!("cannot read it: {e}"))
                })?;
                ("ENCRYPTION_KEY_FILE", Some(key))
            }
            (None, None) => ("ENCRYPTION_KEY", None),
        };
        let old_text = self.text("ENCRYPTION_KEYS_OLD");
        let old: Vec<&str> = old_text.split_whitespace().collect();
        // The old keys alone first, so that an error names the setting at fault.
        Keyring::new(None, &old)
            .map_err(|e| self.invalid("ENCRYPTION_KEYS_OLD", &e.to_string()))?;
        Keyring::new(current.as_deref(), &old).map_err(|e| self.invalid(key_name, &e.to_string()))
    }

    /// The OTLP exporter's settings: `None` unless an endpoint is set
    /// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`),
    /// `OTEL_TRACES_EXPORTER` names `otlp` and `OTEL_SDK_DISABLED` is not `true`
    /// (as the OpenTelemetry rules read them: another exporter named, or another
    /// value, is not an error). Only `http/protobuf` is spoken: the protocol in
    /// effect (the traces' one if set) is checked with or without an endpoint.
    fn otlp(&self) -> Result<Option<Otlp>, ConfigError> {
        let traces_or =
            |specific: &'static str, general: &'static str| match self.optional(specific) {
                Some(_) => specific,
                None => general,
            };
        let protocol = traces_or(
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        );
        self.choice(protocol, &[("http/protobuf", ())])?;
        let exporting = self
            .text("OTEL_TRACES_EXPORTER")
            .split(',')
            .any(|e| e.trim().eq_ignore_ascii_case("otlp"));
        let disabled = self.text("OTEL_SDK_DISABLED").eq_ignore_ascii_case("true");
        let timeout_name = traces_or(
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        );
        let millis: u64 = self.positive(timeout_name)?;
        let mut headers = self.otlp_pairs("OTEL_EXPORTER_OTLP_HEADERS", true)?;
        for (name, value) in self.otlp_pairs("OTEL_EXPORTER_OTLP_TRACES_HEADERS", true)? {
            headers.retain(|(n, _)| *n != name);
            headers.push((name, value));
        }
        let mut resource = self.otlp_pairs("OTEL_RESOURCE_ATTRIBUTES", false)?;
        // The last of a repeated key holds, service.name's included.
        let from_resource = resource
            .iter()
            .rev()
            .find(|(k, _)| k == "service.name")
            .map(|(_, v)| v.clone());
        resource.retain(|(k, _)| k != "service.name");
        let traces = self.otlp_url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")?;
        let base = self.otlp_url("OTEL_EXPORTER_OTLP_ENDPOINT")?;
        let traces_endpoint = match (traces, base) {
            (Some(url), _) => url.to_string(),
            (None, Some(url)) => format!("{}/v1/traces", url.as_str().trim_end_matches('/')),
            (None, None) => return Ok(None),
        };
        if !exporting || disabled {
            return Ok(None);
        }
        let service_name = self
            .optional("OTEL_SERVICE_NAME")
            .or(from_resource)
            .unwrap_or_else(|| "hookbox".to_owned());
        Ok(Some(Otlp {
            traces_endpoint,
            headers,
            timeout: Duration::from_millis(millis).min(MAX_DURATION),
            service_name,
            resource,
        }))
    }

    /// An OTLP endpoint variable: unset, or an http(s) URL with a host.
    fn otlp_url(&self, name: &'static str) -> Result<Option<url::Url>, ConfigError> {
        let Some(text) = self.optional(name) else {
            return Ok(None);
        };
        url::Url::parse(&text)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .map(Some)
            .ok_or_else(|| {
                self.invalid(
                    name,
                    "expected an http:// or https:// URL like http://127.0.0.1:4318",
                )
            })
    }

    /// `name=value` pairs separated by commas, the values percent-encoded (the
    /// OpenTelemetry rule for `OTEL_EXPORTER_OTLP_HEADERS` and
    /// `OTEL_RESOURCE_ATTRIBUTES`); header names are lower-cased and checked.
    fn otlp_pairs(
        &self,
        name: &'static str,
        http_headers: bool,
    ) -> Result<Vec<(String, String)>, ConfigError> {
        let text = self.text(name);
        text.split(',')
            .filter(|pair| !pair.trim().is_empty())
            .map(|pair| {
                let (key, value) = pair
                    .split_once('=')
                    .ok_or_else(|| self.invalid(name, "expected name=value pairs"))?;
                let value = percent_encoding::percent_decode_str(value.trim())
                    .decode_utf8()
                    .map_err(|_| self.invalid(name, "a value is not UTF-8 once decoded"))?;
                let key = key.trim();
                if !http_headers {
                    return match key.is_empty() {
                        true => Err(self.invalid(name, "a name is empty")),
                        false => Ok((key.to_owned(), value.into_owned())),
                    };
                }
                let key = key.to_ascii_lowercase();
                let valid = http::HeaderName::from_bytes(key.as_bytes()).is_ok()
                    && http::HeaderValue::from_str(&value).is_ok();
                if valid {
                    Ok((key, value.into_owned()))
                } else {
                    Err(self.invalid(name, "a header name or value is not valid in HTTP"))
                }
            })
            .collect()
    }

    /// `DATABASE_URL`: a `postgres://` URL must be one the driver can use (a port
    /// that is a number, a known `sslmode`, …) — a typo is the configuration's
    /// fault, exit 2 — whether the server answers is found when connecting.
    fn database_url(&self) -> Result<Option<String>, ConfigError> {
        let url = self.optional("DATABASE_URL");
        #[cfg(feature = "postgres")]
        if let Some(text) = url
            .as_deref()
            .filter(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"))
        {
            sqlx::postgres::PgConnectOptions::from_str(text).map_err(|e| {
                self.invalid(
                    "DATABASE_URL",
                    &format!("not a PostgreSQL URL the driver can use: {e}"),
                )
            })?;
        }
        Ok(url)
    }

    fn hosts(&self, name: &'static str) -> Result<Vec<String>, ConfigError> {
        self.text(name)
            .split([',', ' '])
            .filter(|s| !s.is_empty())
            .map(|s| {
                let ok = s.len() <= 253
                    && s.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-'));
                if ok {
                    Ok(s.to_ascii_lowercase())
                } else {
                    Err(self.invalid(name, &format!("{s:?} is not a host name")))
                }
            })
            .collect()
    }

    fn cidrs(&self, name: &'static str) -> Result<Vec<IpNet>, ConfigError> {
        self.text(name)
            .split([',', ' '])
            .filter(|s| !s.is_empty())
            .map(|s| {
                s.parse::<IpNet>()
                    .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        self.invalid(name, &format!("{s:?} is not a CIDR like 127.0.0.0/8"))
                    })
            })
            .collect()
    }

    fn log_filter(&self, name: &'static str) -> Result<String, ConfigError> {
        let text = self.text(name);
        // A bare word is a target to the filter's syntax ("verbose" would show
        // only a target of that name: no log at all); a level or target=level is
        // what anyone means.
        if let Some(word) = text.split(',').map(str::trim).find(|d| {
            !d.is_empty()
                && !d.contains('=')
                && !d.contains("::")
                && !LEVELS.contains(&d.to_ascii_lowercase().as_str())
        }) {
            return Err(self.invalid(
                name,
                &format!(
                    "{word:?} is not a level: use one of {} or target=level",
                    LEVELS.join(", ")
                ),
            ));
        }
        tracing_subscriber::EnvFilter::builder()
            .parse(&text)
            .map(|_| text.clone())
            .map_err(|e| self.invalid(name, &format!("not a tracing filter: {e}")))
    }
}

/// The levels `LOG_LEVEL` takes, alone or after `target=`.
const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

fn default_of(name: &str) -> Option<&'static str> {
    SETTINGS
        .iter()
        .find(|(n, _)| *n == name)
        .and_then(|(_, d)| *d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_spec() {
        let c = Config::default();
        assert_eq!(c.bind_addr.to_string(), "0.0.0.0:8000");
        assert_eq!(c.worker_count, 128);
        assert_eq!(c.queue_maxsize, 10_000);
        assert_eq!(c.max_backlog, 10_000_000);
        assert_eq!(c.max_attempts, 5);
        assert_eq!(c.retry_base_delay, Duration::from_secs(5));
        assert_eq!(c.retry_max_delay, Duration::from_secs(300));
        assert_eq!(c.handler_timeout, Duration::from_secs(30));
        assert_eq!(c.cleanup_interval, Duration::from_secs(3600));
        assert_eq!(c.max_body_bytes, 1_048_576);
        assert!(!c.require_idempotency_key);
        assert!(c.metrics_public);
        assert_eq!(c.sqlite_synchronous, SqliteSynchronous::Full);
        assert_eq!(c.log_format, LogFormat::Pretty);
        assert_eq!(c.sqlite_path(), Some(PathBuf::from("./data/events.db")));
    }

    #[test]
    fn every_bad_value_names_its_setting() {
        for (name, bad) in [
            ("BIND_ADDR", "nowhere"),
            ("WORKER_COUNT", "-1"),
            ("QUEUE_MAXSIZE", "0"),
            ("MAX_BACKLOG", "none"),
            ("MAX_ATTEMPTS", "x"),
            ("RETRY_BASE_DELAY", "soon"),
            ("HANDLER_TIMEOUT", "0s"),
            ("CLEANUP_INTERVAL_HOURS", "0"),
            ("REQUIRE_IDEMPOTENCY_KEY", "maybe"),
            ("SQLITE_SYNCHRONOUS", "off"),
            ("ALLOWED_TARGETS", "10.0.0.0/99"),
            ("LOG_FORMAT", "xml"),
            ("LOG_LEVEL", "hookbox=loud"),
            ("LOG_LEVEL", "verbose"),
            ("LOG_LEVEL", "info,verbose"),
        ] {
            let err = Config::from_pairs([(name, bad)]).expect_err(name);
            assert!(err.to_string().contains(name), "{err}");
        }
    }

    #[test]
    fn max_connections_is_a_whole_number_above_0() {
        assert_eq!(Config::default().max_connections, 10_000);
        let c = Config::from_pairs([("MAX_CONNECTIONS", "2")]).expect("valid");
        assert_eq!(c.max_connections, 2);
        for bad in ["0", "x", "-1", "4294967296"] {
            let err = Config::from_pairs([("MAX_CONNECTIONS", bad)]).expect_err(bad);
            assert!(err.to_string().contains("MAX_CONNECTIONS"), "{err}");
        }
    }

    #[test]
    fn instance_id_defaults_to_the_host_name_and_must_be_printable() {
        assert_eq!(Config::default().instance_id, host_name());
        let c = Config::from_pairs([("INSTANCE_ID", " node-1 ")]).expect("valid");
        assert_eq!(c.instance_id, "node-1");
        let longest = "x".repeat(MAX_INSTANCE_ID_BYTES);
        assert!(Config::from_pairs([("INSTANCE_ID", longest.as_str())]).is_ok());
        let too_long = "x".repeat(MAX_INSTANCE_ID_BYTES + 1);
        for bad in ["", "   ", "a\u{7}b", "line\nbreak", too_long.as_str()] {
            let e = Config::from_pairs([("INSTANCE_ID", bad)]).expect_err(bad);
            assert!(e.to_string().contains("INSTANCE_ID"), "{e}");
        }
    }

    #[test]
    fn admin_token_is_never_printed() {
        let c = Config::from_pairs([("ADMIN_TOKEN", "hunter2-hunter2-hunter2")]).expect("valid");
        assert!(!format!("{c:?}").contains("hunter2"));
        let e = Config::from_pairs([("ADMIN_TOKEN", "hunter2")]).expect_err("short");
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    #[test]
    fn admin_tokens_must_be_sixteen_characters_when_set() {
        assert!(Config::default().admin_token.is_none(), "unset: no token");
        for bad in ["", "   ", "\t", "fifteen-chars-x", "  fifteen-chars-x  "] {
            let e = Config::from_pairs([("ADMIN_TOKEN", bad)]).expect_err(bad);
            assert!(e.to_string().contains("ADMIN_TOKEN"), "{e}");
        }
        let c = Config::from_pairs([("ADMIN_TOKEN", " sixteen-chars-ok ")]).expect("valid");
        assert_eq!(c.admin_token.expect("set").expose(), "sixteen-chars-ok");
    }

    #[test]
    fn durations_over_30_days_are_refused() {
        for name in [
            "RETRY_BASE_DELAY",
            "RETRY_MAX_DELAY",
            "HANDLER_TIMEOUT",
            "SHUTDOWN_GRACE",
            "LEASE_TIMEOUT",
        ] {
            let ok = Config::from_pairs([(name, "30days")]);
            assert!(ok.is_ok(), "{name}: {ok:?}");
            let e = Config::from_pairs([(name, "30days 1s")]).expect_err(name);
            assert!(
                e.to_string().contains(name) && e.to_string().contains("30 days"),
                "{e}"
            );
        }
        assert!(Config::from_pairs([("CLEANUP_INTERVAL_HOURS", "720")]).is_ok());
        for bad in ["720.01", "1e300"] {
            let e = Config::from_pairs([("CLEANUP_INTERVAL_HOURS", bad)]).expect_err(bad);
            assert!(e.to_string().contains("CLEANUP_INTERVAL_HOURS"), "{e}");
        }
        for name in ["HANDLER_TIMEOUT", "LEASE_TIMEOUT"] {
            assert!(Config::from_pairs([(name, "0")]).is_err(), "{name}=0");
        }
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {

            #![proptest_config(crate::test_cases::cases(256))]
            /// Whatever the text, parsing never panics, and an accepted duration is
            /// never over the limit.
            #[test]
            fn any_text_parses_without_panic_within_the_limit(text in ".{0,40}") {
                let _ = parse_duration(&text);
                if let Ok(d) = parse_limited_duration(&text) {
                    prop_assert!(d <= MAX_DURATION);
                }
            }

            /// `N<unit>` means N units, accepted exactly when within 30 days.
            #[test]
            fn unit_durations_mean_what_they_say(
                n in 0u64..10_000_000,
                (unit, secs) in prop_oneof![
                    Just(("s", 1u64)),
                    Just(("m", 60)),
                    Just(("h", 3600)),
                    Just(("days", 86_400)),
                ],
            ) {
                let text = format!("{n}{unit}");
                let expected = Duration::from_secs(n * secs);
                prop_assert_eq!(parse_duration(&text), Some(expected));
                match parse_limited_duration(&text) {
                    Ok(d) => prop_assert!(d == expected && d <= MAX_DURATION),
                    Err(e) => prop_assert!(e == DurationError::TooLong && expected > MAX_DURATION),
                }
            }

            /// Bare numbers are seconds, fractions allowed; `ms` is milliseconds.
            #[test]
            fn bare_seconds_and_milliseconds(ms in 0u64..5_000_000_000) {
                prop_assert_eq!(
                    parse_duration(&format!("{ms}ms")),
                    Some(Duration::from_millis(ms))
                );
                let secs = ms as f64 / 1000.0;
                let parsed = parse_duration(&secs.to_string()).expect("a number");
                let diff = parsed.as_secs_f64() - secs;
                prop_assert!(diff.abs() < 1e-6, "{} vs {}", parsed.as_secs_f64(), secs);
            }
        }
    }

    #[test]
    fn fractions_and_cidrs_parse() {
        let c = Config::from_pairs([
            ("CLEANUP_INTERVAL_HOURS", "0.001"),
            ("ALLOWED_TARGETS", "127.0.0.0/8, ::1"),
        ])
        .expect("valid");
        assert_eq!(c.cleanup_interval, Duration::from_millis(3600));
        assert_eq!(c.allowed_targets.len(), 2);
    }
}
