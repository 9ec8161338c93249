//! OTLP export (SPEC §13) on the real binary: a real OTLP/HTTP receiver on
//! 127.0.0.1 decodes what hookbox posts (`ExportTraceServiceRequest`, protobuf, with
//! the `opentelemetry-proto` crate — not hookbox's code) and the spans are checked
//! against what the webhook's receiver saw in `traceparent`; a collector that is
//! dead or hangs costs intake nothing and its spans are counted as dropped; bad
//! settings exit 2.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;

use crate::harness::{Hookbox, eventually, http_manifest, new_dir, on_both_backends};
use crate::receiver::{Answer, Receiver};

const WAIT: Duration = Duration::from_secs(20);
const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// A span as the collector got it: ids in hex, attributes as text.
#[derive(Debug, Clone)]
struct Got {
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    attributes: BTreeMap<String, String>,
    service: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(v: Option<&Any>) -> String {
    match v {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        other => format!("{other:?}"),
    }
}

/// Every span of every export request the collector received.
fn spans(collector: &Receiver) -> Vec<Got> {
    let mut out = Vec::new();
    for r in collector.requests() {
        assert_eq!(r.path, "/v1/traces");
        assert_eq!(r.header("content-type"), Some("application/x-protobuf"));
        let req = ExportTraceServiceRequest::decode(r.body.as_ref()).expect("OTLP protobuf");
        for rs in req.resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .map(|a| text(a.value.as_ref().and_then(|v| v.value.as_ref())))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                out.extend(ss.spans.into_iter().map(|s: Span| {
                    Got {
                        name: s.name,
                        trace_id: hex(&s.trace_id),
                        span_id: hex(&s.span_id),
                        parent: hex(&s.parent_span_id),
                        attributes: s
                            .attributes
                            .iter()
                            .map(|a| {
                                let v = a.value.as_ref().and_then(|v| v.value.as_ref());
                                (a.key.clone(), text(v))
                            })
                            .collect(),
                        service: service.clone(),
                    }
                }));
            }
        }
    }
    out
}

fn metric(hb: &Hookbox, name: &str) -> f64 {
    let text = hb.get("/metrics").expect("metrics").text;
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

on_both_backends! {
    fn an_event_retried_twice_is_one_trace_at_the_collector(db: &Db) {
        let collector = Receiver::start();
        let rx = Receiver::start();
        rx.then(Answer::status(500)).then(Answer::status(503));
        let dir = new_dir();
        http_manifest(dir.path(), "traced", r#"["traced.*"]"#, &format!("{}/t", rx.url), "backoff = [\"50ms\"]", "");
        let hb = Hookbox::restart(dir, &db.env(&[
            ("ALLOWED_TARGETS", "127.0.0.0/8"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url),
            ("OTEL_SERVICE_NAME", "hookbox-under-test"),
        ]));
        let given = format!("00-{TRACE}-{PARENT}-01");
        let r = hb.post(&json!({"event_type": "traced.thing", "payload": {"n": 1}}), &[("traceparent", &given)]);
        assert_eq!(r.status, 202, "{}", r.text);
        let id = r.json()["id"].as_str().expect("id").to_owned();
        hb.wait_status(&id, "completed", WAIT);
        let sent: Vec<String> = rx
            .wait_for(3, WAIT)
            .iter()
            .map(|r| r.header("traceparent").expect("traceparent")[36..52].to_owned())
            .collect();
        let got = eventually(WAIT, "4 spans at the collector", || {
            let s = spans(&collector);
            (s.len() >= 4).then_some(s)
        });
        assert_eq!(got.len(), 4, "{got:#?}");
        assert!(got.iter().all(|s| s.trace_id == TRACE && s.service == "hookbox-under-test"), "{got:#?}");
        let intake = got.iter().find(|s| s.name == "hookbox.intake").expect("an intake span");
        assert_eq!(intake.parent, PARENT, "the sender's span is its parent");
        assert_eq!(intake.attributes["hookbox.event_id"], id);
        assert_eq!(intake.attributes["hookbox.event_type"], "traced.thing");
        assert_eq!(intake.attributes["http.response.status_code"], "202");
        let mut attempts: Vec<&Got> = got.iter().filter(|s| s.name == "hookbox.attempt").collect();
        attempts.sort_by_key(|s| s.attributes["hookbox.attempt"].clone());
        let seen: Vec<(&str, &str, &str)> = attempts
            .iter()
            .map(|s| (s.attributes["hookbox.attempt"].as_str(), s.attributes["hookbox.outcome"].as_str(), s.attributes["hookbox.destination"].as_str()))
            .collect();
        assert_eq!(seen, [("1", "retry", "traced"), ("2", "retry", "traced"), ("3", "completed", "traced")]);
        for a in &attempts {
            assert_eq!(a.parent, intake.span_id, "an attempt is a child of the intake span");
            assert_eq!(a.attributes["hookbox.event_id"], id);
        }
        let exported: Vec<String> = attempts.iter().map(|a| a.span_id.clone()).collect();
        assert_eq!(exported, sent, "each attempt span is the one its receiver was told of");
        // Counted when the collector's answer comes back, which may be after
        // the collector has handed the spans to this test.
        eventually(WAIT, "4 spans counted as exported", || {
            (metric(&hb, "hookbox_trace_spans_exported_total") >= 4.0).then_some(())
        });
    }
}

#[test]
fn without_a_traceparent_the_intake_span_starts_the_trace() {
    let collector = Receiver::start();
    let hb = Hookbox::start(&[("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url)]);
    let r = hb.post(&json!({"event_type": "plain", "payload": {}}), &[]);
    assert_eq!(r.status, 202);
    let id = r.json()["id"].as_str().expect("id").to_owned();
    let ev = hb.get(&format!("/webhooks/{id}")).expect("get").json();
    let got = eventually(WAIT, "the intake span", || {
        spans(&collector).into_iter().next()
    });
    assert_eq!(got.name, "hookbox.intake");
    assert_eq!(got.trace_id, ev["trace_id"].as_str().expect("trace id"));
    assert_eq!(got.parent, "", "a root span");
    assert_eq!(got.service, "hookbox", "OTEL_SERVICE_NAME's default");
    // An unsampled trace is the sender's wish: none of hookbox's spans either.
    let unsampled = format!("00-{TRACE}-{PARENT}-00");
    let r = hb.post(
        &json!({"event_type": "plain", "payload": {"n": 2}}),
        &[("traceparent", &unsampled)],
    );
    assert_eq!(r.status, 202);
    let marker = hb.post(&json!({"event_type": "plain", "payload": {"n": 3}}), &[]);
    let marker_id = marker.json()["id"].as_str().expect("id").to_owned();
    eventually(WAIT, "the marker's span", || {
        spans(&collector)
            .iter()
            .any(|s| s.attributes.get("hookbox.event_id") == Some(&marker_id))
            .then_some(())
    });
    assert!(spans(&collector).iter().all(|s| s.trace_id != TRACE));
}

#[test]
fn a_dead_or_hanging_collector_costs_intake_nothing_and_drops_are_counted() {
    // Dead: nothing listens on the port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let dead = format!("http://127.0.0.1:{port}");
    // Hanging: accepts, never answers within the export timeout.
    let hanging = Receiver::start();
    hanging.set_default(Answer::status(200).after(Duration::from_secs(30)));
    for endpoint in [dead, hanging.url.clone()] {
        let hb = Hookbox::start(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "300"),
        ]);
        let began = Instant::now();
        for n in 0..50 {
            let r = hb.post(&json!({"event_type": "plain", "payload": {"n": n}}), &[]);
            assert_eq!(r.status, 202, "{endpoint}: {}", r.text);
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "{endpoint}: intake waited on the collector ({:?})",
            began.elapsed()
        );
        eventually(WAIT, "50 spans counted as dropped", || {
            (metric(&hb, "hookbox_trace_spans_dropped_total") >= 50.0).then_some(())
        });
        assert_eq!(metric(&hb, "hookbox_trace_spans_exported_total"), 0.0);
    }
}

#[test]
fn unset_there_is_no_exporter_and_bad_settings_exit_2() {
    let dir = new_dir();
    for (env, name) in [
        (
            vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ],
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        // Without an endpoint too: the mistake shows before the export is wanted.
        (
            vec![("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")],
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        (
            vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4318")],
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ),
        (
            vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "authorization"),
            ],
            "OTEL_EXPORTER_OTLP_HEADERS",
        ),
        (
            vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "0"),
            ],
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ),
    ] {
        let (code, stderr) = crate::config::run_with(&env, dir.path());
        assert_eq!(code, Some(2), "{env:?}: {stderr}");
        assert!(stderr.contains(name), "{env:?}: {stderr}");
    }
    // Headers are sent with each export and never echoed in an error.
    let collector = Receiver::start();
    let hb = Hookbox::start(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &collector.url),
        (
            "OTEL_EXPORTER_OTLP_HEADERS",
            "x-api-key=s%3Dcret,x-team=hooks",
        ),
    ]);
    assert_eq!(
        hb.post(&json!({"event_type": "plain", "payload": {}}), &[])
            .status,
        202
    );
    let got = collector.wait_for(1, WAIT);
    assert_eq!(got[0].header("x-api-key"), Some("s=cret"));
    assert_eq!(got[0].header("x-team"), Some("hooks"));
    // Unset: no exporter, so no exporter metrics and no request anywhere.
    let plain = Hookbox::start(&[]);
    assert_eq!(
        plain
            .post(&json!({"event_type": "plain", "payload": {}}), &[])
            .status,
        202
    );
    let text = plain.get("/metrics").expect("metrics").text;
    assert!(
        !text.lines().any(|l| l.starts_with("hookbox_trace_spans")),
        "{text}"
    );
}

/// The resource attributes of every export request, by key.
fn resources(collector: &Receiver) -> Vec<BTreeMap<String, String>> {
    collector
        .requests()
        .iter()
        .flat_map(|r| {
            ExportTraceServiceRequest::decode(r.body.as_ref())
                .expect("OTLP protobuf")
                .resource_spans
        })
        .map(|rs| {
            rs.resource
                .iter()
                .flat_map(|r| &r.attributes)
                .map(|a| {
                    let v = a.value.as_ref().and_then(|v| v.value.as_ref());
                    (a.key.clone(), text(v))
                })
                .collect()
        })
        .collect()
}

/// The standard variables' `TRACES_` forms and the resource attributes apply
/// (SPEC §13: "the standard OpenTelemetry variables apply"); the SDK switches
/// turn export off whatever the endpoint; their bad values exit 2.
#[test]
fn the_standard_otel_variables_apply() {
    let collector = Receiver::start();
    let custom = format!("{}/custom/traces", collector.url);
    let hb = Hookbox::start(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &custom),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-team=all,x-kind=base"),
        ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x-kind=traces"),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            "service.name=billing,deployment.environment=prod%2Ceu",
        ),
    ]);
    let r = hb.post(&json!({"event_type": "plain", "payload": {}}), &[]);
    assert_eq!(r.status, 202);
    let got = collector.wait_for(1, WAIT);
    assert_eq!(got[0].path, "/custom/traces", "the traces URL as written");
    assert_eq!(got[0].header("x-team"), Some("all"));
    assert_eq!(
        got[0].header("x-kind"),
        Some("traces"),
        "the traces' value wins"
    );
    let resource = &resources(&collector)[0];
    assert_eq!(
        resource.get("service.name").map(String::as_str),
        Some("billing")
    );
    assert_eq!(
        resource.get("deployment.environment").map(String::as_str),
        Some("prod,eu")
    );
    drop(hb);
    // OTEL_SERVICE_NAME wins over the resource's service.name.
    let named = Receiver::start();
    let hb = Hookbox::start(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &named.url),
        ("OTEL_SERVICE_NAME", "hooks"),
        ("OTEL_RESOURCE_ATTRIBUTES", "service.name=billing"),
    ]);
    assert_eq!(
        hb.post(&json!({"event_type": "plain", "payload": {}}), &[])
            .status,
        202
    );
    named.wait_for(1, WAIT);
    assert_eq!(
        resources(&named)[0].get("service.name").map(String::as_str),
        Some("hooks")
    );
    drop(hb);
    // The traces' protocol wins over the general one (which alone would exit 2);
    // an exporter list naming otlp exports, a disabled flag other than true is
    // false.
    let both = Receiver::start();
    let hb = Hookbox::start(&[
        ("OTEL_EXPORTER_OTLP_ENDPOINT", &both.url),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
        ("OTEL_TRACES_EXPORTER", "console,otlp"),
        ("OTEL_SDK_DISABLED", "no"),
    ]);
    assert_eq!(
        hb.post(&json!({"event_type": "plain", "payload": {}}), &[])
            .status,
        202
    );
    both.wait_for(1, WAIT);
    drop(hb);
    // Turned off: no exporter at all, nothing sent.
    for off in [
        ("OTEL_SDK_DISABLED", "TRUE"),
        ("OTEL_TRACES_EXPORTER", "none"),
        ("OTEL_TRACES_EXPORTER", "zipkin"),
    ] {
        let quiet = Receiver::start();
        let hb = Hookbox::start(&[("OTEL_EXPORTER_OTLP_ENDPOINT", &quiet.url), off]);
        assert_eq!(
            hb.post(&json!({"event_type": "plain", "payload": {}}), &[])
                .status,
            202
        );
        let text = hb.get("/metrics").expect("metrics").text;
        assert!(
            !text.lines().any(|l| l.starts_with("hookbox_trace_spans")),
            "{off:?}: {text}"
        );
        std::thread::sleep(Duration::from_millis(1500));
        assert!(
            quiet.requests().is_empty(),
            "{off:?}: something was exported"
        );
    }
    let dir = new_dir();
    for (name, value) in [
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "127.0.0.1:4318/v1/traces",
        ),
        ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
        ("OTEL_RESOURCE_ATTRIBUTES", "service.name"),
    ] {
        let (code, stderr) = crate::config::run_with(&[(name, value)], dir.path());
        assert_eq!(code, Some(2), "{name}={value}: {stderr}");
        assert!(stderr.contains(name), "{name}={value}: {stderr}");
    }
}
