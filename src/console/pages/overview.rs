//! `/console`: what is stuck, at a glance — pending events and the age of the
//! oldest, dead letters, the queue, events by status, each handler's deliveries
//! and success rate, and the last hour per minute. docs/operating.md says what
//! each number means.

use axum::extract::State;
use axum::response::Response;
use maud::html;

use super::render;
use crate::console::layout::{Nav, age, empty, number, status};
use crate::console::{Console, Visitor, chart};
use crate::model::{Status, Timestamp};

/// `GET /console`.
pub(crate) async fn page(State(console): State<Console>, axum::Extension(s): Visitor) -> Response {
    let (stats, overview) = match tokio::join!(console.app.store.stats(), console.overview()) {
        (Ok(stats), Ok(overview)) => (stats, overview),
        (Err(e), _) | (_, Err(e)) => {
            return super::unavailable(&console, &s, Nav::Overview, &e);
        }
    };
    let now = Timestamp::now();
    let (depth, capacity) = (console.app.inbox.depth(), console.app.inbox.capacity());
    let fill = (depth * 100).checked_div(capacity).unwrap_or(0);
    let events = overview.events;
    let body = html! {
        h1 { "Overview" }
        section.tiles aria-label="Now" {
            a.tile href="/console/events?status=pending" {
                span.label { "Pending events" }
                span.value #pending { (number(stats.pending_events)) }
                span.note { "waiting or running" }
            }
            div.tile.warn[stats.oldest_pending.is_some()] {
                span.label { "Oldest pending" }
                span.value #oldest-pending {
                    @match stats.oldest_pending {
                        Some(t) => { (age(now.millis() - t.millis())) }
                        None => { "—" }
                    }
                }
                span.note { "since it was received" }
            }
            a.tile.bad[stats.dead_letters > 0] href="/console/dead-letters" {
                span.label { "Dead letters" }
                span.value #dead-letters { (number(stats.dead_letters)) }
                span.note { "deliveries that gave up" }
            }
            div.tile {
                span.label { "Queue depth" }
                span.value #queue-depth { (number(depth as u64)) }
                span.note { "of " (number(capacity as u64)) " (" (fill) "%) before 429" }
            }
        }
        section.card {
            h2 { "Events by status" }
            ul.statuses {
                @for (st, n) in [
                    (Status::Pending, events.pending),
                    (Status::Processing, events.processing),
                    (Status::Completed, events.completed),
                    (Status::Failed, events.failed),
                ] {
                    li {
                        a href={ "/console/events?status=" (st.as_str()) } {
                            (status(st)) " " strong { (number(n)) }
                        }
                    }
                }
                li.muted { (number(events.total())) " on record" }
            }
        }
        section.card {
            h2 { "The last hour" }
            (chart::per_minute(&overview.minutes))
        }
        section.card {
            h2 { "Deliveries per handler" }
            @if overview.handlers.is_empty() {
                (empty("No deliveries on record yet."))
            } @else {
                div.scroll {
                    table.rows {
                        thead { tr {
                            th { "Handler" } th.num { "Pending" } th.num { "Running" }
                            th.num { "Completed" } th.num { "Dead" } th.num { "Attempts" }
                            th.num { "Success" }
                        } }
                        tbody {
                            @for h in &overview.handlers {
                                tr {
                                    td data-label="Handler" { code { (h.handler) } }
                                    td.num data-label="Pending" { (number(h.deliveries.pending)) }
                                    td.num data-label="Running" { (number(h.deliveries.processing)) }
                                    td.num data-label="Completed" { (number(h.deliveries.completed)) }
                                    td.num data-label="Dead" {
                                        @if h.deliveries.failed > 0 {
                                            a href={ "/console/dead-letters" (super::query(&[("handler", Some(&h.handler))])) } {
                                                (number(h.deliveries.failed))
                                            }
                                        } @else { "0" }
                                    }
                                    td.num data-label="Attempts" { (number(h.attempts)) }
                                    td.num data-label="Success" {
                                        @match h.success_rate() {
                                            Some(r) => { (format!("{:.1}%", r * 100.0)) }
                                            None => { "—" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
            p.muted {
                "Counts over every delivery on record (kept for RETENTION_DAYS); success = \
                 completed ÷ (completed + dead). Counts and chart are at most "
                (crate::console::OVERVIEW_MAX_AGE.as_secs()) " s old."
            }
        }
    };
    render(&console, &s, Nav::Overview, "Overview", body)
}
