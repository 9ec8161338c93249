//! The subscribers API, as `deliver`, `isolation`, `rate` and `soak` use it.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request, StatusCode};

use crate::BoxError;
use crate::conn::{Connection, Target};

/// The subscribers `deliver` registers: name and event type patterns.
pub(crate) const BENCH_SUBSCRIBERS: [(&str, &[&str]); 3] = [
    ("bench-sub-1", &["bench.deliver.*"]),
    ("bench-sub-2", &["bench.deliver.*"]),
    ("bench-sub-3", &["bench.deliver.three"]),
];

/// The filter and transform every subscriber of a run gets (`deliver --filter`,
/// `--transform`).
#[derive(Debug, Default)]
pub(crate) struct Shape {
    /// The filter, as JSON.
    pub(crate) filter: Option<serde_json::Value>,
    /// The transform's source.
    pub(crate) transform: Option<String>,
    /// `max_in_flight` (`None`: hookbox's default, 8).
    pub(crate) max_in_flight: Option<u32>,
}

/// Talks to the subscribers API.
pub(crate) struct Admin {
    pub(crate) target: Arc<Target>,
    pub(crate) conn: Connection,
    /// `Bearer <token>`, when one was given.
    pub(crate) authorization: Option<HeaderValue>,
}

impl Admin {
    /// A client for `target`'s admin routes, with `Bearer <token>` when a token is
    /// given (`--admin-token` or `ADMIN_TOKEN`).
    pub(crate) fn new(target: Arc<Target>, token: Option<&str>) -> Result<Self, BoxError> {
        let authorization = token
            .map(|t| HeaderValue::from_str(&format!("Bearer {t}")))
            .transpose()
            .map_err(|_| "--admin-token is not a valid header value")?;
        Ok(Self {
            conn: Connection::new(Arc::clone(&target)),
            target,
            authorization,
        })
    }

    /// Sends one admin request; returns the status and the body as text.
    pub(crate) async fn send(
        &mut self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
    ) -> Result<(StatusCode, String), BoxError> {
        let mut req = Request::builder()
            .method(method)
            .uri(self.target.path(path))
            .header(HOST, self.target.host.clone());
        if let Some(auth) = &self.authorization {
            req = req.header(AUTHORIZATION, auth.clone());
        }
        let body = match body {
            Some(json) => {
                req = req.header(CONTENT_TYPE, "application/json");
                Bytes::from(serde_json::to_vec(json)?)
            }
            None => Bytes::new(),
        };
        let response = self.conn.send(req.body(Full::new(body))?).await?;
        let text = String::from_utf8_lossy(response.body()).into_owned();
        Ok((response.status(), text))
    }

    /// Creates one subscriber; a clear error unless hookbox answers 201.
    pub(crate) async fn create(
        &mut self,
        name: &str,
        patterns: &[&str],
        url: &str,
        shape: &Shape,
    ) -> Result<(), BoxError> {
        let mut body = serde_json::json!({"name": name, "event_types": patterns, "url": url});
        if let Some(filter) = &shape.filter {
            body["filter"] = filter.clone();
        }
        if let Some(transform) = &shape.transform {
            body["transform"] = transform.clone().into();
        }
        if let Some(n) = shape.max_in_flight {
            body["max_in_flight"] = n.into();
        }
        self.create_body(name, &body).await
    }

    /// Creates subscriber `name` from a whole `POST /subscribers` body (any of the
    /// fields docs/api.md lists); a clear error unless hookbox answers 201.
    pub(crate) async fn create_body(
        &mut self,
        name: &str,
        body: &serde_json::Value,
    ) -> Result<(), BoxError> {
        let (status, text) = self
            .send(Method::POST, "/subscribers", Some(body))
            .await
            .map_err(|e| format!("POST /subscribers ({name}) failed: {e}"))?;
        if status == StatusCode::CREATED {
            return Ok(());
        }
        let hint = match status {
            StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => {
                " (this hookbox has no subscribers API)"
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                " (pass --admin-token or set ADMIN_TOKEN)"
            }
            StatusCode::UNPROCESSABLE_ENTITY => {
                " (is hookbox running with ALLOWED_TARGETS=127.0.0.0/8?)"
            }
            _ => "",
        };
        Err(format!(
            "creating subscriber {name} failed: POST /subscribers answered {status}{hint}: {}",
            text.trim()
        )
        .into())
    }

    /// Deletes one subscriber; a missing one is fine.
    pub(crate) async fn delete(&mut self, name: &str) -> Result<(), BoxError> {
        let (status, text) = self
            .send(Method::DELETE, &format!("/subscribers/{name}"), None)
            .await?;
        if status.is_success() || status == StatusCode::NOT_FOUND {
            Ok(())
        } else {
            Err(format!(
                "DELETE /subscribers/{name} answered {status}: {}",
                text.trim()
            )
            .into())
        }
    }

    /// Deletes every bench subscriber, warning about failures.
    pub(crate) async fn delete_all(&mut self) {
        for (name, _) in BENCH_SUBSCRIBERS {
            if let Err(err) = self.delete(name).await {
                eprintln!("loadgen: warning: could not delete subscriber {name}: {err}");
            }
        }
    }
}
