//! `compose.yaml` (images cannot be pulled here, so it is checked, not run): it
//! parses as YAML, has the `sqlite` and `postgres` profiles, every variable it
//! gives a hookbox service is a real setting (docs/configuration.md), the
//! postgres profile runs two instances with distinct `INSTANCE_ID`s on one
//! database behind one published port, and no secret is written in it.

use std::collections::BTreeSet;

use serde_norway::Value;

fn compose() -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("compose.yaml");
    let text = std::fs::read_to_string(path).expect("compose.yaml at the root");
    let mut doc: Value = serde_norway::from_str(&text).expect("compose.yaml is YAML");
    doc.apply_merge().expect("merge keys resolve");
    doc
}

/// The hookbox services (built from this repository) by profile.
fn hookbox_services(doc: &Value, profile: &str) -> Vec<(String, Value)> {
    doc["services"]
        .as_mapping()
        .expect("services")
        .iter()
        .filter(|(_, s)| s["build"].as_str() == Some("."))
        .filter(|(_, s)| {
            s["profiles"]
                .as_sequence()
                .is_some_and(|p| p.iter().any(|x| x.as_str() == Some(profile)))
        })
        .map(|(name, s)| (name.as_str().expect("name").to_owned(), s.clone()))
        .collect()
}

#[test]
fn every_variable_a_hookbox_service_sets_is_a_real_setting() {
    let doc = compose();
    let known: BTreeSet<&str> = hookbox::config::SETTINGS
        .iter()
        .map(|(name, _)| *name)
        .collect();
    let mut seen = 0;
    for profile in ["sqlite", "postgres"] {
        let services = hookbox_services(&doc, profile);
        assert!(!services.is_empty(), "profile {profile} runs hookbox");
        for (name, service) in services {
            let env = service["environment"]
                .as_mapping()
                .expect("an environment map");
            for (key, value) in env {
                let key = key.as_str().expect("a name");
                assert!(
                    known.contains(key),
                    "{name}: {key} is not a hookbox setting"
                );
                let text = value.as_str().unwrap_or_default();
                if key == "ADMIN_TOKEN" {
                    assert!(
                        text.starts_with("${ADMIN_TOKEN"),
                        "{name}: the token comes from the environment"
                    );
                }
                seen += 1;
            }
        }
    }
    assert!(seen > 0);
}

#[test]
fn the_postgres_profile_runs_two_instances_on_one_database_behind_one_port() {
    let doc = compose();
    let services = hookbox_services(&doc, "postgres");
    assert_eq!(services.len(), 2, "two instances");
    let ids: BTreeSet<String> = services
        .iter()
        .map(|(_, s)| {
            s["environment"]["INSTANCE_ID"]
                .as_str()
                .expect("INSTANCE_ID")
                .to_owned()
        })
        .collect();
    assert_eq!(ids.len(), 2, "distinct INSTANCE_IDs: {ids:?}");
    let urls: BTreeSet<String> = services
        .iter()
        .map(|(_, s)| {
            s["environment"]["DATABASE_URL"]
                .as_str()
                .expect("DATABASE_URL")
                .to_owned()
        })
        .collect();
    assert_eq!(urls.len(), 1, "one database");
    assert!(urls.iter().all(|u| u.starts_with("postgres://")));
    for (name, s) in &services {
        assert!(
            s["ports"].is_null(),
            "{name} is reached through the proxy only"
        );
    }
    let published: Vec<&str> = doc["services"]
        .as_mapping()
        .expect("services")
        .values()
        .filter(|s| {
            s["profiles"]
                .as_sequence()
                .is_some_and(|p| p.iter().any(|x| x.as_str() == Some("postgres")))
        })
        .filter_map(|s| s["ports"].as_sequence())
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(published, ["8000:8000"], "one port");
}

#[test]
fn the_postgres_profile_exports_traces_to_its_collector() {
    let doc = compose();
    let collector = &doc["services"]["otel-collector"];
    assert!(
        collector["profiles"]
            .as_sequence()
            .is_some_and(|p| p.iter().any(|x| x.as_str() == Some("postgres"))),
        "the collector runs in the postgres profile"
    );
    // The collector's own configuration comes from the environment too.
    let command: Vec<&str> = collector["command"]
        .as_sequence()
        .expect("command")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(command, ["--config=env:OTELCOL_CONFIG"]);
    let config: Value = serde_norway::from_str(
        collector["environment"]["OTELCOL_CONFIG"]
            .as_str()
            .expect("OTELCOL_CONFIG"),
    )
    .expect("the collector's configuration is YAML");
    let endpoint = config["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
        .as_str()
        .expect("an OTLP/HTTP receiver");
    let port = endpoint.rsplit(':').next().expect("port");
    assert_eq!(
        config["service"]["pipelines"]["traces"]["receivers"][0].as_str(),
        Some("otlp")
    );
    for (name, s) in hookbox_services(&doc, "postgres") {
        let url = s["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"]
            .as_str()
            .unwrap_or_else(|| panic!("{name} exports its spans"));
        assert_eq!(url, format!("http://otel-collector:{port}"), "{name}");
        hookbox::config::Config::from_pairs([("OTEL_EXPORTER_OTLP_ENDPOINT", url)])
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
