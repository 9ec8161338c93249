//! How many cases the property tests run (the fuzz harnesses of `src/fuzz.rs`
//! and every module's own): a few hundred in `cargo test`, as many as
//! `HOOKBOX_FUZZ_CASES` says when it is set (`scripts/fuzz.sh`).

use proptest::test_runner::Config;

/// The cases a property test runs: `default`, or `HOOKBOX_FUZZ_CASES` when set.
pub(crate) fn cases(default: u32) -> Config {
    let n = std::env::var("HOOKBOX_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    Config {
        cases: n,
        // Failures are kept as seeds, not as a file per run of a long campaign.
        max_shrink_iters: 4096,
        ..Config::default()
    }
}
