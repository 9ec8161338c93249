//! The documentation in `docs/` stays true to the code: every setting with its
//! default, every problem code the code can answer, and every relative link (file
//! and `#anchor`) resolves inside the repository: nothing points outside it.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Markdown pages users read: README, docs/, handlers/README.md.
fn pages() -> Vec<PathBuf> {
    let mut pages = vec![root().join("README.md"), root().join("handlers/README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

#[test]
fn every_setting_is_documented_with_its_default() {
    let text = read(&root().join("docs/configuration.md"));
    for (name, default) in hookbox::config::SETTINGS {
        let row = text
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}` /")))
            .unwrap_or_else(|| panic!("{name} has no row in docs/configuration.md"));
        let key = name.to_ascii_lowercase();
        assert!(row.contains(&format!("`{key}`")), "{name}: file key: {row}");
        match default {
            Some(d) => assert!(
                row.contains(&format!("`{d}`")),
                "{name}: default {d}: {row}"
            ),
            // "unset", or "unset (what it then means)", e.g. INSTANCE_ID's host name.
            None => assert!(
                row.contains("| unset |") || row.contains("| unset ("),
                "{name}: unset by default: {row}"
            ),
        }
    }
}

/// Every `"code"` of a `Problem::new(StatusCode::NAME, "code")` in the sources
/// (how every problem is made; `Self::new` inside `problem.rs`).
fn problem_codes(dir: &Path, codes: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            problem_codes(&path, codes);
            continue;
        }
        if path.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let text = read(&path);
        let made = text
            .match_indices("Problem::new(")
            .chain(text.match_indices("Self::new("));
        for (at, found) in made {
            let rest = text[at + found.len()..].trim_start();
            let Some(rest) = rest.strip_prefix("StatusCode::") else {
                continue;
            };
            let rest = rest.trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_');
            let Some(rest) = rest.trim_start().strip_prefix(',') else {
                continue;
            };
            let Some(rest) = rest.trim_start().strip_prefix('"') else {
                continue;
            };
            let code: String = rest.chars().take_while(|c| *c != '"').collect();
            if code.chars().all(|c| c.is_ascii_lowercase() || c == '_') && !codes.contains(&code) {
                codes.push(code);
            }
        }
    }
}

#[test]
fn every_problem_code_is_in_the_api_reference() {
    let api = read(&root().join("docs/api.md"));
    let mut codes = Vec::new();
    problem_codes(&root().join("src"), &mut codes);
    assert!(codes.len() > 15, "the scan found too few codes: {codes:?}");
    let missing: Vec<_> = codes
        .iter()
        .filter(|c| !api.contains(&format!("| `{c}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in docs/api.md's table of problem codes: {missing:?}"
    );
}

/// GitHub's anchor of a heading: lower case, spaces to `-`, punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

/// The targets of `](target)` links, outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for (at, _) in line.match_indices("](") {
            let rest = &line[at + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_owned());
            }
        }
    }
    out
}

#[test]
fn every_link_of_the_docs_resolves_inside_the_repository() {
    for page in pages() {
        let text = read(&page);
        // Links that leave the repository fail below; this catches the plain-text
        // citations of sections ("§1") of a contract that users do not have.
        assert!(
            !text.contains('§'),
            "{} cites sections of a document outside the repository",
            page.display()
        );
        for link in links(&text) {
            assert!(
                !link.contains("://"),
                "{}: {link}: link inside the repository",
                page.display()
            );
            let (file, fragment) = link.split_once('#').unwrap_or((&link, ""));
            let target = if file.is_empty() {
                page.clone()
            } else {
                page.parent().expect("folder").join(file)
            };
            let target = target
                .canonicalize()
                .unwrap_or_else(|_| panic!("{}: {link}: no such file", page.display()));
            assert!(
                target.starts_with(root().canonicalize().expect("root")),
                "{}: {link} leaves the repository",
                page.display()
            );
            if !fragment.is_empty() {
                assert!(
                    anchors(&read(&target)).iter().any(|a| a == fragment),
                    "{}: {link}: no heading with that anchor",
                    page.display()
                );
            }
        }
    }
}

/// Every test runs the binary through `harness::hookbox_in`, in a folder of its
/// own with an empty environment: a `handlers/` folder, a `.env` or a
/// `config/hookbox.toml` in the repository (where `cargo test` runs) never
/// changes what a test sees.
#[test]
fn every_test_runs_the_binary_in_its_own_folder() {
    let tests = root().join("tests/it");
    for entry in std::fs::read_dir(&tests).expect("tests/it") {
        let path = entry.expect("entry").path();
        if path
            .file_name()
            .is_some_and(|n| n == "harness.rs" || n == "docs.rs")
        {
            continue;
        }
        let text = read(&path);
        for (n, line) in text.lines().enumerate() {
            let spawns = line.contains("Command::new(")
                && (line.contains("bin()") || line.contains("CARGO_BIN_EXE"));
            assert!(
                !spawns,
                "{}:{}: runs hookbox without harness::hookbox_in: {line}",
                path.display(),
                n + 1
            );
        }
    }
}
