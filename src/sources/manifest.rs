//! Source manifests: every `*.toml` in `SOURCES_DIR` is one source.
//!
//! ```toml
//! name = "gh"                        # unique, [A-Za-z0-9._-]; defaults to the file stem
//! kind = "github"                    # github | stripe | shopify | slack
//!                                    # | standard-webhooks | hmac | token | none
//! secret_env = "GITHUB_HOOK_SECRET"  # one or more space-separated secrets
//! event_type_prefix = "github."      # default "<name>."
//! tolerance = "5m"                   # timestamped kinds; "0s" turns the check off
//!
//! [hmac]                             # kind = "hmac"
//! header = "X-Signature"
//! algorithm = "sha256"               # sha1 | sha256 | sha512
//! encoding = "hex"                   # hex | base64
//! prefix = "sha256="
//! event_type = "/type"               # JSON pointer or "header:NAME"
//! id = "header:X-Delivery"           # default: SHA-256 of the body
//!
//! [token]                            # kind = "token"
//! header = "X-Webhook-Token"         # default: Authorization: Bearer <secret>
//! ```
//!
//! Pull sources (`kind = "poll"` with a `[poll]` section, `kind = "websocket"` with
//! a `[websocket]` one) are checked by `sources/pull/spec.rs`; they take no
//! `secret_env`, `tolerance`, `[hmac]` or `[token]`.
//!
//! Every problem names the file and the field; unknown fields are errors; a
//! `secret_env` that is unset (or blank) is an error, and so is a kind other than
//! `none` without one.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::identify::Locator;
use super::pull::{self, PullSpec};
use super::verify::{self, Algorithm, Encoding, Verifier};
use super::{Source, Split, is_valid_name, presets};
use crate::config::{Secret, parse_duration};
use crate::registry::is_event_type_byte;
pub use crate::registry::manifest::ManifestError;

/// The default `tolerance` of timestamped kinds.
pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);
/// The longest `tolerance` accepted.
pub const MAX_TOLERANCE: Duration = Duration::from_secs(30 * 86_400);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    name: Option<String>,
    kind: String,
    secret_env: Option<String>,
    event_type_prefix: Option<String>,
    tolerance: Option<String>,
    hmac: Option<HmacSection>,
    token: Option<TokenSection>,
    split: Option<String>,
    split_id: Option<String>,
    public_url: Option<String>,
    meta: Option<MetaSection>,
    /// A JavaScript file, relative to the manifest (push sources).
    transform: Option<String>,
    /// How long its terminal events are kept (shorter than `RETENTION_DAYS`).
    retention: Option<String>,
    poll: Option<pull::spec::Section>,
    websocket: Option<pull::spec::Section>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HmacSection {
    header: String,
    algorithm: Option<String>,
    encoding: Option<String>,
    prefix: Option<String>,
    event_type: Option<String>,
    id: Option<String>,
    signed: Option<String>,
    timestamp: Option<String>,
    timestamp_format: Option<String>,
    signature_field: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MetaSection {
    verify_token_env: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenSection {
    header: Option<String>,
}

/// A problem in a manifest: `(field, message)`, turned into a [`ManifestError`].
type Problem = (&'static str, String);

/// Reads every `*.toml` of `dir` (sorted by name). A missing folder means no
/// sources. Returns every problem found, not just the first.
pub fn load_dir(
    dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Source>, Vec<ManifestError>> {
    let files = crate::registry::manifest::manifest_files(dir, "sources").map_err(|e| vec![e])?;
    let mut sources = Vec::new();
    let mut errors = Vec::new();
    let mut names: HashMap<String, PathBuf> = HashMap::new();
    for file in files {
        let loaded = std::fs::read_to_string(&file)
            .map_err(|e| error(&file, ("-", format!("cannot read: {e}"))))
            .and_then(|text| load_str(&file, &text, env));
        match loaded {
            Ok(source) => match names.get(&source.name) {
                Some(first) => errors.push(error(
                    &file,
                    (
                        "name",
                        format!(
                            "{:?} is already the name of {}",
                            source.name,
                            first.display()
                        ),
                    ),
                )),
                None => {
                    names.insert(source.name.clone(), file);
                    sources.push(source);
                }
            },
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(sources)
    } else {
        Err(errors)
    }
}

fn error(file: &Path, (field, message): Problem) -> ManifestError {
    ManifestError {
        file: file.to_owned(),
        field: field.to_owned(),
        message,
    }
}

/// Parses one manifest's text; `file` names it in errors and gives the default name.
pub fn load_str(
    file: impl AsRef<Path>,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Source, ManifestError> {
    let file = file.as_ref();
    let m: Manifest = toml::from_str(text).map_err(|e| ManifestError {
        file: file.to_owned(),
        field: crate::registry::manifest::toml_field(text, &e),
        message: format!(
            "{}{}",
            e.message(),
            crate::registry::manifest::toml_position(text, &e)
        ),
    })?;
    build(file, m, env).map_err(|p| error(file, p))
}

fn build(
    file: &Path,
    m: Manifest,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Source, Problem> {
    let stem = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = m.name.clone().unwrap_or(stem);
    if !is_valid_name(&name) {
        return Err((
            "name",
            format!("{name:?} must be 1 to 100 of A-Z a-z 0-9 . _ -"),
        ));
    }
    let prefix = m
        .event_type_prefix
        .clone()
        .unwrap_or_else(|| format!("{name}."));
    if prefix.len() > 100 || !prefix.bytes().all(is_event_type_byte) {
        return Err((
            "event_type_prefix",
            "may only contain A-Z a-z 0-9 . _ : / - (at most 100 bytes)".into(),
        ));
    }
    let retention = retention(m.retention.as_deref())?;
    if matches!(m.kind.as_str(), "poll" | "websocket") {
        if m.transform.is_some() {
            return Err((
                "transform",
                "a transform reshapes a pushed request: pull sources take none".into(),
            ));
        }
        let spec = pull_spec(&m, env)?;
        return Ok(Source {
            name,
            kind: m.kind,
            verifier: Verifier::None,
            secrets: Vec::new(),
            secret_env: None,
            event_type_prefix: prefix,
            event_type: Locator::Pointer(spec.fields.event_type.clone()),
            delivery_id: Locator::Pointer(spec.fields.id.clone()),
            pull: Some(std::sync::Arc::new(spec)),
            split: None,
            verify_token: None,
            transform: None,
            retention,
        });
    }
    if let Some(field) = [
        ("poll", m.poll.is_some()),
        ("websocket", m.websocket.is_some()),
    ]
    .into_iter()
    .find_map(|(f, given)| given.then_some(f))
    {
        return Err((
            field,
            format!("kind {:?} takes no [{field}] section", m.kind),
        ));
    }
    let kind_name = m.kind.as_str();
    if !PUSH_KINDS.contains(&kind_name) && !presets::KINDS.contains(&kind_name) {
        return Err(("kind", unsupported(&m.kind)));
    }
    let tolerance = tolerance(m.tolerance.as_deref())?;
    let (secret_text, secrets) = secrets(&m, env)?;
    let public_url = public_url(&m)?;
    let (verifier, event_type, delivery_id, default_split) =
        match presets::preset(kind_name, tolerance, public_url.as_deref()) {
            Some(p) => {
                if let Some(field) = [("hmac", m.hmac.is_some()), ("token", m.token.is_some())]
                    .into_iter()
                    .find_map(|(f, given)| given.then_some(f))
                {
                    return Err((
                        field,
                        format!("kind {:?} takes no [{field}] section", m.kind),
                    ));
                }
                (p.verifier, p.event_type, p.delivery_id, p.split)
            }
            None => {
                let (v, e, d) = kind(&m, tolerance, secret_text.as_deref())?;
                (v, e, d, None)
            }
        };
    // SendGrid posts arrays of events.
    let default_split = default_split.or_else(|| {
        (kind_name == "sendgrid").then(|| Split {
            pointer: String::new(),
            id: Some("/sg_event_id".into()),
        })
    });
    let split = split(&m)?.or(default_split);
    let verify_token = verify_token(&m, env)?;
    let transform = m
        .transform
        .as_deref()
        .map(|path| crate::registry::manifest::transform(file, path))
        .transpose()
        .map_err(|e| ("transform", e))?;
    Ok(Source {
        name,
        kind: m.kind,
        verifier,
        secrets,
        secret_env: m.secret_env,
        event_type_prefix: prefix,
        event_type,
        delivery_id,
        pull: None,
        split,
        verify_token,
        transform,
        retention,
    })
}

/// `[meta] verify_token_env`'s value (kind `meta` only; the variable must be set).
fn verify_token(
    m: &Manifest,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Secret>, Problem> {
    let Some(section) = &m.meta else {
        return Ok(None);
    };
    if m.kind != "meta" {
        return Err(("meta", format!("kind {:?} takes no [meta] section", m.kind)));
    }
    let name = section.verify_token_env.trim();
    match env(name).filter(|v| !v.trim().is_empty()) {
        Some(value) => Ok(Some(Secret::new(value.trim()))),
        None => Err(("verify_token_env", format!("{name} is not set"))),
    }
}

/// `public_url`: an http(s) URL, required by the kinds that sign the URL the
/// provider was given (never taken from `Host`).
fn public_url(m: &Manifest) -> Result<Option<String>, Problem> {
    let needs = presets::SIGN_URL.contains(&m.kind.as_str());
    match &m.public_url {
        None if needs => Err((
            "public_url",
            format!(
                "kind {:?} signs the URL it posts to: set public_url to the URL given to the provider",
                m.kind
            ),
        )),
        None => Ok(None),
        Some(text) => match url::Url::parse(text) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => Ok(Some(text.clone())),
            _ => Err(("public_url", format!("{text:?} is not an http(s) URL"))),
        },
    }
}

/// `split` and `split_id`: JSON pointers (`"/"` is the body itself).
fn split(m: &Manifest) -> Result<Option<Split>, Problem> {
    let pointer = |field: &'static str, p: &str| {
        if p.starts_with('/') {
            Ok(p.to_owned())
        } else {
            Err((
                field,
                format!("{p:?} is not a JSON pointer (it starts with /)"),
            ))
        }
    };
    match (&m.split, &m.split_id) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(("split_id", "split_id needs split".into())),
        (Some(p), id) => Ok(Some(Split {
            pointer: if p == "/" {
                String::new()
            } else {
                pointer("split", p)?
            },
            id: id
                .as_deref()
                .map(|id| pointer("split_id", id))
                .transpose()?,
        })),
    }
}

/// A pull source's section, checked; the push-only fields refused.
fn pull_spec(m: &Manifest, env: &dyn Fn(&str) -> Option<String>) -> Result<PullSpec, Problem> {
    for (field, given) in [
        ("secret_env", m.secret_env.is_some()),
        ("tolerance", m.tolerance.is_some()),
        ("hmac", m.hmac.is_some()),
        ("token", m.token.is_some()),
        ("split", m.split.is_some()),
        ("public_url", m.public_url.is_some()),
        ("meta", m.meta.is_some()),
        ("split_id", m.split_id.is_some()),
    ] {
        if given {
            return Err((
                field,
                format!(
                    "a {} source takes no {field} (credentials go in headers = {{ … = \"env:NAME\" }})",
                    m.kind
                ),
            ));
        }
    }
    let (own, other) = if m.kind == "poll" {
        (&m.poll, ("websocket", m.websocket.is_some()))
    } else {
        (&m.websocket, ("poll", m.poll.is_some()))
    };
    if other.1 {
        return Err((
            other.0,
            format!("kind {:?} takes no [{}] section", m.kind, other.0),
        ));
    }
    let section = own.as_ref().ok_or_else(|| {
        let field = if m.kind == "poll" {
            "poll"
        } else {
            "websocket"
        };
        (
            field,
            format!("kind {:?} needs a [{field}] section", m.kind),
        )
    })?;
    if m.kind == "poll" {
        pull::spec::poll(section, env)
    } else {
        pull::spec::websocket(section, env)
    }
}

/// The kinds that receive pushed webhooks.
pub(crate) const PUSH_KINDS: &[&str] = &[
    "github",
    "stripe",
    "shopify",
    "slack",
    "standard-webhooks",
    "gitlab",
    "discord",
    "sendgrid",
    "twilio",
    "mailgun",
    "hmac",
    "token",
    "none",
];

fn unsupported(kind: &str) -> String {
    format!(
        "unknown source kind {kind:?} (expected {}, {}, poll or websocket)",
        PUSH_KINDS.join(", "),
        presets::KINDS.join(", ")
    )
}

/// A source's `retention`: a duration above 0 of at most 30 days.
fn retention(text: Option<&str>) -> Result<Option<Duration>, Problem> {
    let Some(text) = text else { return Ok(None) };
    match parse_duration(text) {
        Some(d) if !d.is_zero() && d <= MAX_TOLERANCE => Ok(Some(d)),
        _ => Err((
            "retention",
            format!("{text:?} is not a duration above 0 of at most 30 days"),
        )),
    }
}

fn tolerance(text: Option<&str>) -> Result<Option<Duration>, Problem> {
    let Some(text) = text else {
        return Ok(Some(DEFAULT_TOLERANCE));
    };
    match parse_duration(text) {
        Some(d) if d.is_zero() => Ok(None),
        Some(d) if d <= MAX_TOLERANCE => Ok(Some(d)),
        _ => Err((
            "tolerance",
            format!("{text:?} is not a duration of at most 30 days"),
        )),
    }
}

/// The secret list from `secret_env`: `(raw text, secrets)`.
fn secrets(
    m: &Manifest,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Option<String>, Vec<Secret>), Problem> {
    match (&m.secret_env, m.kind.as_str()) {
        (None, "none") => Ok((None, Vec::new())),
        (Some(_), "none") => Err((
            "secret_env",
            "kind \"none\" verifies nothing: remove secret_env".into(),
        )),
        (None, _) => Err(("secret_env", format!("kind {:?} needs secret_env", m.kind))),
        (Some(var), _) => {
            let value = env(var).filter(|v| !v.trim().is_empty()).ok_or_else(|| {
                (
                    "secret_env",
                    format!("the environment variable {var} is not set"),
                )
            })?;
            let list = value.split_whitespace().map(Secret::new).collect();
            Ok((Some(value), list))
        }
    }
}

/// The kind's verifier and where it finds the event type and the delivery id.
fn kind(
    m: &Manifest,
    tolerance: Option<Duration>,
    secret_text: Option<&str>,
) -> Result<(Verifier, Locator, Locator), Problem> {
    use Locator::{BodyHash, FirstOf, Header, Pointer, Prefixed, WhenPresent};
    let header = |name: &'static str| Header(http::HeaderName::from_static(name));
    let body_type = || Pointer("/type".into());
    let sections_allowed = match m.kind.as_str() {
        "hmac" => m.token.is_none(),
        "token" => m.hmac.is_none(),
        _ => m.hmac.is_none() && m.token.is_none(),
    };
    if !sections_allowed {
        let field = if m.hmac.is_some() { "hmac" } else { "token" };
        return Err((
            field,
            format!("kind {:?} takes no [{field}] section", m.kind),
        ));
    }
    Ok(match m.kind.as_str() {
        "github" => (
            Verifier::Hmac(verify::github::scheme()),
            header("x-github-event"),
            header("x-github-delivery"),
        ),
        "stripe" => (
            Verifier::Hmac(verify::stripe::scheme(tolerance)),
            body_type(),
            Pointer("/id".into()),
        ),
        "shopify" => (
            Verifier::Hmac(verify::shopify::scheme()),
            header("x-shopify-topic"),
            header("x-shopify-webhook-id"),
        ),
        "slack" => (
            Verifier::Hmac(verify::slack::scheme(tolerance)),
            FirstOf(vec![
                Pointer("/event/type".into()),
                body_type(),
                // A slash command is a form body with a `command` field.
                WhenPresent {
                    pointer: "/command".into(),
                    value: "slash_command",
                },
            ]),
            FirstOf(vec![
                Pointer("/event_id".into()),
                Pointer("/trigger_id".into()),
                BodyHash,
            ]),
        ),
        "standard-webhooks" => {
            let keys = verify::standard_webhooks::Keys::parse(secret_text.unwrap_or_default())
                .map_err(|e| ("secret_env", e.to_string()))?;
            (
                Verifier::StandardWebhooks { tolerance, keys },
                body_type(),
                FirstOf(vec![header("webhook-id"), header("svix-id")]),
            )
        }
        "hmac" => hmac(m.hmac.as_ref(), tolerance, m.public_url.as_deref())?,
        "gitlab" => {
            // whsec_ values of the list verify Standard Webhooks headers; every
            // value is also a token.
            let whsec: Vec<&str> = secret_text
                .unwrap_or_default()
                .split_whitespace()
                .filter(|v| v.starts_with("whsec_"))
                .collect();
            let keys = (!whsec.is_empty())
                .then(|| verify::standard_webhooks::Keys::parse(&whsec.join(" ")))
                .transpose()
                .map_err(|e| ("secret_env", e.to_string()))?;
            (
                Verifier::Gitlab { keys, tolerance },
                Pointer("/object_kind".into()),
                FirstOf(vec![
                    header("idempotency-key"),
                    header("x-gitlab-event-uuid"),
                    header("webhook-id"),
                    BodyHash,
                ]),
            )
        }
        "discord" => (
            Verifier::Discord {
                keys: verify::discord::keys(secret_text.unwrap_or_default())
                    .map_err(|e| ("secret_env", e))?,
                tolerance,
            },
            Prefixed {
                prefix: "interaction.",
                inner: Box::new(Pointer("/type".into())),
            },
            FirstOf(vec![Pointer("/id".into()), BodyHash]),
        ),
        "sendgrid" => (
            Verifier::Sendgrid {
                keys: verify::sendgrid::keys(secret_text.unwrap_or_default())
                    .map_err(|e| ("secret_env", e))?,
                tolerance,
            },
            Pointer("/event".into()),
            FirstOf(vec![Pointer("/sg_event_id".into()), BodyHash]),
        ),
        "twilio" => (
            Verifier::Twilio {
                url: m.public_url.clone().unwrap_or_default(),
            },
            FirstOf(vec![
                Prefixed {
                    prefix: "message.",
                    inner: Box::new(Pointer("/MessageStatus".into())),
                },
                Prefixed {
                    prefix: "call.",
                    inner: Box::new(Pointer("/CallStatus".into())),
                },
            ]),
            FirstOf(vec![
                header("i-twilio-idempotency-token"),
                Pointer("/MessageSid".into()),
                Pointer("/CallSid".into()),
                BodyHash,
            ]),
        ),
        "mailgun" => (
            Verifier::Mailgun {
                tolerance,
                seen: verify::mailgun::Seen::default(),
            },
            Pointer("/event-data/event".into()),
            FirstOf(vec![Pointer("/event-data/id".into()), BodyHash]),
        ),
        "token" => {
            let header = m
                .token
                .as_ref()
                .and_then(|t| t.header.as_deref())
                .map(|h| http::HeaderName::from_bytes(h.trim().as_bytes()))
                .transpose()
                .map_err(|_| ("header", "[token] header is not a header name".to_owned()))?;
            (
                Verifier::Token(verify::token::Scheme { header }),
                body_type(),
                BodyHash,
            )
        }
        "none" => (Verifier::None, body_type(), BodyHash),
        other => {
            return Err((
                "kind",
                format!(
                    "unknown source kind {other:?} (expected github, stripe, shopify, slack, standard-webhooks, hmac, token or none)"
                ),
            ));
        }
    })
}

/// `[hmac]`'s `timestamp` and `timestamp_format`.
fn stamp(
    s: &HmacSection,
    tolerance: Option<Duration>,
) -> Result<Option<verify::hmac::Stamp>, Problem> {
    use verify::hmac::{Stamp, StampAt, StampFormat};
    let Some(at) = s.timestamp.as_deref() else {
        return match s.timestamp_format {
            Some(_) => Err((
                "timestamp_format",
                "timestamp_format needs timestamp".into(),
            )),
            None => Ok(None),
        };
    };
    let at = if let Some(h) = at.strip_prefix("header:") {
        StampAt::Header(
            http::HeaderName::from_bytes(h.trim().as_bytes())
                .map_err(|_| ("timestamp", format!("{h:?} is not a header name")))?,
        )
    } else if let Some(key) = at.strip_prefix("field:") {
        if s.signature_field.is_none() {
            return Err((
                "timestamp",
                "field:… needs signature_field (a key=value list)".into(),
            ));
        }
        StampAt::Field(key.trim().to_owned())
    } else if at.starts_with('/') {
        StampAt::Body(at.to_owned())
    } else {
        return Err((
            "timestamp",
            format!("{at:?}: expected header:NAME, field:KEY or a JSON pointer"),
        ));
    };
    let format = match s.timestamp_format.as_deref().unwrap_or("unix") {
        "unix" => StampFormat::Unix,
        "unix_ms" => StampFormat::UnixMs,
        "iso8601" => StampFormat::Iso8601,
        other => {
            return Err((
                "timestamp_format",
                format!("{other:?}: expected unix, unix_ms or iso8601"),
            ));
        }
    };
    Ok(Some(Stamp {
        at,
        format,
        tolerance,
    }))
}

fn hmac(
    section: Option<&HmacSection>,
    tolerance: Option<Duration>,
    public_url: Option<&str>,
) -> Result<(Verifier, Locator, Locator), Problem> {
    let s = section.ok_or(("hmac", "kind = \"hmac\" needs an [hmac] section".to_owned()))?;
    let header = http::HeaderName::from_bytes(s.header.trim().as_bytes())
        .map_err(|_| ("header", format!("{:?} is not a header name", s.header)))?;
    let algorithm = match s.algorithm.as_deref().unwrap_or("sha256") {
        "sha1" => Algorithm::Sha1,
        "sha256" => Algorithm::Sha256,
        "sha512" => Algorithm::Sha512,
        other => {
            return Err((
                "algorithm",
                format!("{other:?}: expected sha1, sha256 or sha512"),
            ));
        }
    };
    let encoding = match s.encoding.as_deref().unwrap_or("hex") {
        "hex" => Encoding::Hex,
        "base64" => Encoding::Base64,
        other => return Err(("encoding", format!("{other:?}: expected hex or base64"))),
    };
    let event_type = Locator::parse(s.event_type.as_deref().unwrap_or("/type"))
        .map_err(|e| ("event_type", e))?;
    let id = match &s.id {
        Some(text) => Locator::parse(text).map_err(|e| ("id", e))?,
        None => Locator::BodyHash,
    };
    let id_header = match &id {
        Locator::Header(h) => Some(h.clone()),
        _ => None,
    };
    let signed =
        verify::hmac::template(s.signed.as_deref().unwrap_or("{body}"), id_header.as_ref())
            .map_err(|e| ("signed", e))?;
    let timestamp = stamp(s, tolerance)?;
    let scheme = verify::hmac::Scheme {
        signature_field: s.signature_field.clone(),
        signed,
        timestamp,
        url: public_url.map(str::to_owned),
        ..verify::hmac::Scheme::body(
            header,
            algorithm,
            encoding,
            s.prefix.as_deref().unwrap_or(""),
        )
    };
    if scheme.signed.contains(&verify::hmac::Part::Url) && scheme.url.is_none() {
        return Err(("public_url", "signed = \"…{url}…\" needs public_url".into()));
    }
    Ok((Verifier::Hmac(scheme), event_type, id))
}

/// The sources as `hookbox sources check` prints them: name, kind, URL path (for a
/// pull source: the upstream URL without its query), the variables holding the
/// secrets (never their values), the event type prefix.
pub fn table(sources: &[Source]) -> String {
    let mut rows = vec![["NAME", "KIND", "PATH", "SECRET_ENV", "EVENT TYPES"].map(String::from)];
    for s in sources {
        let (path, envs) = match &s.pull {
            Some(spec) => (spec.shown_url(), spec.header_envs.join(",")),
            None => (s.path(), s.secret_env.clone().unwrap_or_default()),
        };
        rows.push([
            s.name.clone(),
            s.kind.clone(),
            path,
            if envs.is_empty() { "-".into() } else { envs },
            format!("{}*", s.event_type_prefix),
        ]);
    }
    crate::registry::manifest::columns(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "S" => Some("one two".into()),
            "WH" => Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
            "BLANK" => Some("  ".into()),
            _ => None,
        }
    }

    fn load(text: &str) -> Result<Source, ManifestError> {
        load_str("sources/src.toml", text, &env)
    }

    fn field(text: &str) -> String {
        load(text).expect_err("should be refused").field
    }

    #[test]
    fn every_push_kind_loads() {
        for kind in ["github", "stripe", "shopify", "slack", "token"] {
            let s = load(&format!("kind = \"{kind}\"\nsecret_env = \"S\"")).expect(kind);
            assert_eq!(s.secrets.len(), 2, "{kind}: both rotation secrets");
            assert_eq!(s.event_type_prefix, "src.");
        }
        assert!(load("kind = \"standard-webhooks\"\nsecret_env = \"WH\"").is_ok());
        assert!(load("kind = \"none\"").is_ok());
        let h = load(
            "kind = \"hmac\"\nsecret_env = \"S\"\n[hmac]\nheader = \"X-Sig\"\nid = \"header:X-Id\"",
        )
        .expect("hmac");
        assert!(matches!(h.delivery_id, Locator::Header(_)));
    }

    #[test]
    fn names_prefixes_and_tolerances() {
        let s = load("name = \"gh-prod\"\nkind = \"github\"\nsecret_env = \"S\"\nevent_type_prefix = \"github.\"")
            .expect("valid");
        assert_eq!(
            (s.name.as_str(), s.event_type_prefix.as_str()),
            ("gh-prod", "github.")
        );
        let off = load("kind = \"stripe\"\nsecret_env = \"S\"\ntolerance = \"0s\"").expect("valid");
        let Verifier::Hmac(scheme) = &off.verifier else {
            panic!("stripe is an HMAC scheme")
        };
        assert_eq!(scheme.timestamp.as_ref().map(|s| s.tolerance), Some(None));
        assert_eq!(
            field("kind = \"stripe\"\nsecret_env = \"S\"\ntolerance = \"31d\""),
            "tolerance"
        );
        assert_eq!(field("name = \"a b\"\nkind = \"none\""), "name");
        assert_eq!(
            field("kind = \"none\"\nevent_type_prefix = \"a b\""),
            "event_type_prefix"
        );
    }

    #[test]
    fn each_problem_names_its_field() {
        assert_eq!(field("kind = \"github\""), "secret_env");
        assert_eq!(
            field("kind = \"github\"\nsecret_env = \"UNSET\""),
            "secret_env"
        );
        assert_eq!(
            field("kind = \"github\"\nsecret_env = \"BLANK\""),
            "secret_env"
        );
        assert_eq!(field("kind = \"none\"\nsecret_env = \"S\""), "secret_env");
        assert_eq!(
            field("kind = \"standard-webhooks\"\nsecret_env = \"S\""),
            "secret_env"
        );
        assert_eq!(field("kind = \"gitea\"\nsecret_env = \"S\""), "kind");
        assert_eq!(field("kind = \"poll\""), "poll");
        assert_eq!(
            field("kind = \"websocket\"\n[poll]\nurl = \"http://x\""),
            "poll"
        );
        assert_eq!(
            field("kind = \"poll\"\nsecret_env = \"S\"\n[poll]\nurl = \"http://x\""),
            "secret_env"
        );
        assert_eq!(field("kind = \"none\"\n[poll]\nurl = \"http://x\""), "poll");
        assert_eq!(
            field("kind = \"poll\"\n[poll]\nurl = \"http://x\"\nbogus = 1"),
            "bogus"
        );
        assert_eq!(field("kind = \"none\"\nsecrets = \"x\""), "secrets");
        // A type error names the key, not the refused value (it said `5`).
        assert_eq!(
            field("kind = \"poll\"\n[poll]\nurl = \"http://x\"\ninterval = 5"),
            "interval"
        );
        assert_eq!(field("kind = \"hmac\"\nsecret_env = \"S\""), "hmac");
        assert_eq!(
            field("kind = \"github\"\nsecret_env = \"S\"\n[token]\nheader = \"X\""),
            "token"
        );
        let bad_alg =
            "kind = \"hmac\"\nsecret_env = \"S\"\n[hmac]\nheader = \"X\"\nalgorithm = \"md5\"";
        assert_eq!(field(bad_alg), "algorithm");
        let e = load("kind = \"github\"\nsecret_env = \"UNSET\"").expect_err("refused");
        assert!(
            e.to_string().starts_with("sources/src.toml: secret_env:"),
            "{e}"
        );
    }

    #[test]
    fn secrets_never_show_in_debug() {
        let s = load("kind = \"github\"\nsecret_env = \"S\"").expect("valid");
        let shown = format!("{s:?}");
        assert!(!shown.contains("one") && !shown.contains("two"), "{shown}");
    }
}
