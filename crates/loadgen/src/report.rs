//! Reporting: percentiles, the results table, the exit code.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use crate::post::Stats;

/// Latency percentiles in microseconds.
#[derive(Debug, PartialEq)]
pub(crate) struct Summary {
    pub(crate) p50: Option<u32>,
    pub(crate) p90: Option<u32>,
    pub(crate) p99: Option<u32>,
    pub(crate) max: Option<u32>,
}

impl Summary {
    /// Sorts the samples and picks nearest-rank percentiles.
    pub(crate) fn new(samples: &mut [u32]) -> Self {
        samples.sort_unstable();
        Self {
            p50: percentile(samples, 50.0),
            p90: percentile(samples, 90.0),
            p99: percentile(samples, 99.0),
            max: samples.last().copied(),
        }
    }
}

/// Nearest-rank percentile of sorted samples: the smallest value with at least
/// `p` percent of the samples at or below it.
pub(crate) fn percentile(sorted: &[u32], p: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// Formats a latency: `850us`, `1.85ms`, `12.3ms`, `1.20s`, or `-` without samples.
pub(crate) fn format_micros(micros: Option<u32>) -> String {
    let Some(us) = micros else {
        return "-".to_owned();
    };
    let ms = f64::from(us) / 1000.0;
    match us {
        0..1_000 => format!("{us}us"),
        1_000..10_000 => format!("{ms:.2}ms"),
        10_000..1_000_000 => format!("{ms:.1}ms"),
        _ => format!("{:.2}s", ms / 1000.0),
    }
}

/// `count` per second over `elapsed` (0 for an empty interval).
pub(crate) fn per_second(count: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 { count as f64 / secs } else { 0.0 }
}

/// `a / b`, 0 when `b` is 0 (one rate over another).
pub(crate) fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { 0.0 }
}

/// The non-2xx column: `none` or the total count.
pub(crate) fn non_2xx_total(stats: &Stats) -> String {
    let total: u64 = stats.rejected().map(|(_, count)| count).sum();
    if total == 0 {
        "none".to_owned()
    } else {
        total.to_string()
    }
}

/// Prints a two-line table with columns padded to fit header and value.
pub(crate) fn print_table(columns: &[(&str, String)]) {
    let (mut header, mut values) = (String::new(), String::new());
    for (name, value) in columns {
        let width = name.len().max(value.len()) + 2;
        // Writing to a String cannot fail.
        let _ = write!(header, "{name:<width$}");
        let _ = write!(values, "{value:<width$}");
    }
    println!("{}", header.trim_end());
    println!("{}", values.trim_end());
}

/// Prints the status breakdown, connection errors and connections opened.
pub(crate) fn print_details(stats: &Stats) {
    let rejected: Vec<String> = stats
        .rejected()
        .map(|(status, count)| format!("{status}: {count}"))
        .collect();
    if !rejected.is_empty() {
        println!("non-2xx by status: {}", rejected.join(", "));
    }
    println!("connection errors: {}", stats.errors);
    if let Some(err) = &stats.first_error {
        println!("first connection error: {err}");
    }
    if stats.abandoned > 0 {
        println!("events given up at the timeout: {}", stats.abandoned);
    }
    println!("connections opened: {}", stats.connections_opened);
}

/// 0 normally; 1 when not a single response came back.
pub(crate) fn exit_code(stats: &Stats) -> ExitCode {
    if stats.responses() == 0 {
        eprintln!("loadgen: no request got a response");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let mut samples: Vec<u32> = (1..=100).rev().collect();
        let summary = Summary::new(&mut samples);
        assert_eq!(
            summary,
            Summary {
                p50: Some(50),
                p90: Some(90),
                p99: Some(99),
                max: Some(100)
            }
        );
        assert_eq!(percentile(&[7], 99.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn latency_formatting() {
        assert_eq!(format_micros(Some(850)), "850us");
        assert_eq!(format_micros(Some(1_850)), "1.85ms");
        assert_eq!(format_micros(Some(40_000)), "40.0ms");
        assert_eq!(format_micros(Some(1_200_000)), "1.20s");
        assert_eq!(format_micros(None), "-");
    }
}
