//! The overview's chart, drawn on the server as inline SVG: events received,
//! completed and dead-lettered per minute over the last hour. No script, no
//! inline style (the Content-Security-Policy forbids both): colours come from the
//! stylesheet through classes.

use std::fmt::Write;

use maud::{Markup, html};

use crate::store::overview::Minute;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 44.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 28.0;

/// The smallest "round" number (1, 2 or 5 times a power of ten) at or above `n`,
/// at least 1: the top of the y axis.
pub(crate) fn axis_top(n: u64) -> u64 {
    let mut step = 1u64;
    loop {
        for m in [1, 2, 5] {
            let top = step.saturating_mul(m);
            if top >= n || top == u64::MAX {
                return top;
            }
        }
        step = step.saturating_mul(10);
    }
}

/// One line of the chart: its CSS class, its label, and what it counts.
type Series = (&'static str, &'static str, fn(&Minute) -> u64);

/// A coordinate as SVG text, to a tenth.
fn n(v: f64) -> String {
    format!("{v:.1}")
}

/// The points of one series, `x,y` pairs for a `<polyline>`.
fn points(minutes: &[Minute], top: u64, value: fn(&Minute) -> u64) -> String {
    let span = (minutes.len().max(2) - 1) as f64;
    let mut out = String::new();
    for (i, m) in minutes.iter().enumerate() {
        let x = LEFT + (WIDTH - LEFT - RIGHT) * i as f64 / span;
        let y = HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * value(m) as f64 / top as f64;
        let _ = write!(out, "{x:.1},{y:.1} ");
    }
    out
}

/// The chart of `minutes` (oldest first).
pub(crate) fn per_minute(minutes: &[Minute]) -> Markup {
    let total = |f: fn(&Minute) -> u64| minutes.iter().map(f).sum::<u64>();
    let peak = minutes
        .iter()
        .map(|m| m.received.max(m.completed).max(m.dead_lettered))
        .max()
        .unwrap_or(0);
    let top = axis_top(peak);
    let series: [Series; 3] = [
        ("received", "Received", |m| m.received),
        ("completed", "Completed", |m| m.completed),
        ("dead", "Dead-lettered", |m| m.dead_lettered),
    ];
    let description = format!(
        "Last {} minutes: {} events received, {} completed, {} deliveries dead-lettered; \
         the busiest minute saw {}.",
        minutes.len(),
        total(|m| m.received),
        total(|m| m.completed),
        total(|m| m.dead_lettered),
        peak
    );
    let y = |v: f64| HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * v;
    html! {
        figure.chart {
            svg viewBox={ "0 0 " (n(WIDTH)) " " (n(HEIGHT)) } role="img"
                aria-labelledby="chart-title chart-desc" preserveAspectRatio="none" {
                title id="chart-title" { "Events per minute, last hour" }
                desc id="chart-desc" { (description) }
                @for (frac, label) in [(0.0, 0.0), (0.5, top as f64 / 2.0), (1.0, top as f64)] {
                    line.grid x1=(n(LEFT)) x2=(n(WIDTH - RIGHT)) y1=(n(y(frac))) y2=(n(y(frac))) {}
                    text.axis x=(n(LEFT - 6.0)) y=(n(y(frac) + 4.0)) text-anchor="end" { (label) }
                }
                @for (i, label) in [(0usize, "−60 min"), (30, "−30 min"), (59, "now")] {
                    @let x = LEFT + (WIDTH - LEFT - RIGHT) * i as f64 / 59.0;
                    text.axis x=(n(x)) y=(n(HEIGHT - 8.0))
                        text-anchor=(if i == 0 { "start" } else if i == 59 { "end" } else { "middle" }) {
                        (label)
                    }
                }
                @for (class, _, value) in series {
                    polyline class={ "series " (class) } fill="none" stroke-width="2"
                        points=(points(minutes, top, value)) {}
                }
            }
            figcaption {
                @for (class, label, value) in series {
                    span.key {
                        span class={ "swatch " (class) } {}
                        (label) " " strong { (total(value)) }
                    }
                }
                span.muted { "per minute, last 60 minutes" }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Timestamp;

    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_axis_top_example() {
        use crate::console::chart::axis_top;
        assert_eq!(axis_top(0), 1);
        assert_eq!(axis_top(7), 10);
        assert_eq!(axis_top(11), 20);
        assert_eq!(axis_top(480), 500);
    }

    #[test]
    fn the_chart_is_svg_with_one_line_per_series_and_says_its_totals() {
        let minutes: Vec<Minute> = (0..60)
            .map(|i| Minute {
                start: Timestamp::now(),
                received: i,
                completed: i / 2,
                dead_lettered: u64::from(i == 59),
            })
            .collect();
        let svg = per_minute(&minutes).into_string();
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert!(svg.contains("1770 events received"), "{svg}");
        assert!(
            !svg.contains("style="),
            "no inline style: the CSP forbids it"
        );
        assert!(!svg.contains("<script"));
        // SVG inside HTML has no void elements: an unclosed <line> would swallow
        // everything after it.
        assert_eq!(svg.matches("<line").count(), svg.matches("</line>").count());
    }
}
