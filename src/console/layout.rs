//! The frame every console page shares (head, navigation, banner, message), and
//! small pieces the pages reuse. maud escapes every value it interpolates, so text
//! from events, handlers or senders is always shown as text.

use maud::{DOCTYPE, Markup, html};

use super::session::{Flash, Session};
use crate::model::{Status, Timestamp};

/// The sections of the navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    /// `/console`.
    Overview,
    /// `/console/events`.
    Events,
    /// `/console/dead-letters`.
    DeadLetters,
    /// `/console/subscribers`.
    Subscribers,
    /// `/console/destinations`.
    Destinations,
    /// `/console/sources`.
    Sources,
    /// The login form (no navigation).
    Login,
}

/// What the frame of one page needs.
pub(crate) struct Frame<'a> {
    /// The page's title.
    pub title: &'a str,
    /// Which section is current.
    pub nav: Nav,
    /// The visitor's session (for the logout form).
    pub session: Option<&'a Session>,
    /// True when no `ADMIN_TOKEN` is set: the banner says the console is open.
    pub open: bool,
    /// A one-time message from the previous action.
    pub flash: Option<Flash>,
    /// Reload the page after this many seconds (a page showing unfinished work).
    pub refresh: Option<u32>,
}

/// A whole page: `body` inside the shared frame.
pub(crate) fn page(frame: Frame<'_>, body: Markup) -> Markup {
    let links = [
        (Nav::Overview, "/console", "Overview"),
        (Nav::Events, "/console/events", "Events"),
        (Nav::DeadLetters, "/console/dead-letters", "Dead letters"),
        (Nav::Subscribers, "/console/subscribers", "Subscribers"),
        (Nav::Destinations, "/console/destinations", "Destinations"),
        (Nav::Sources, "/console/sources", "Sources"),
    ];
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if let Some(s) = frame.refresh {
                    meta http-equiv="refresh" content=(s);
                }
                title { (frame.title) " · hookbox" }
                link rel="stylesheet" href="/console/assets/console.css";
            }
            body {
                header.top {
                    a.brand href="/console" { "hookbox" }
                    @if frame.nav != Nav::Login {
                        nav {
                            @for (nav, href, label) in links {
                                @if nav == frame.nav {
                                    a.current href=(href) aria-current="page" { (label) }
                                } @else {
                                    a href=(href) { (label) }
                                }
                            }
                        }
                        @if let (Some(s), false) = (frame.session, frame.open) {
                            form.logout method="post" action="/console/logout" {
                                input type="hidden" name="csrf" value=(s.csrf);
                                button.link type="submit" { "Log out" }
                            }
                        }
                    }
                }
                @if frame.open {
                    p.banner role="note" {
                        strong { "No ADMIN_TOKEN is set." }
                        " This console and the admin API are open to anyone who can reach \
                          this address. Set ADMIN_TOKEN before exposing hookbox."
                    }
                }
                main {
                    @if let Some(f) = &frame.flash {
                        p class=(if f.error { "flash error" } else { "flash ok" }) role="status" {
                            (f.text)
                        }
                    }
                    (body)
                }
            }
        }
    }
}

/// A status as a coloured badge.
pub(crate) fn status(s: Status) -> Markup {
    html! { span class={ "badge " (s.as_str()) } { (s.as_str()) } }
}

/// A time as `<time>` showing how long ago it was, with the exact time on hover.
pub(crate) fn ago(t: Timestamp, now: Timestamp) -> Markup {
    let exact = t.to_rfc3339();
    html! { time datetime=(exact) title=(exact) { (age(now.millis() - t.millis())) " ago" } }
}

/// A duration in milliseconds as a short text: `850 ms`, `42 s`, `3 min`, `5 h`,
/// `2 d`.
pub(crate) fn age(ms: i64) -> String {
    let ms = ms.max(0);
    match ms {
        0..1_000 => format!("{ms} ms"),
        1_000..60_000 => format!("{} s", ms / 1_000),
        60_000..3_600_000 => format!("{} min", ms / 60_000),
        3_600_000..172_800_000 => format!("{} h", ms / 3_600_000),
        _ => format!("{} d", ms / 86_400_000),
    }
}

/// A hidden `csrf` field for a session's forms.
pub(crate) fn csrf(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf); }
}

/// A whole number with thin separators between thousands (`12 345`).
pub(crate) fn number(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 * 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push('\u{202f}');
        }
        out.push(c);
    }
    out
}

/// An empty-state line.
pub(crate) fn empty(text: &str) -> Markup {
    html! { p.empty { (text) } }
}

#[cfg(test)]
mod tests {
    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_age_example() {
        use crate::console::layout::age;
        assert_eq!(age(850), "850 ms");
        assert_eq!(age(42_000), "42 s");
        assert_eq!(age(3 * 60_000 + 5), "3 min");
        assert_eq!(age(5 * 3_600_000), "5 h");
        assert_eq!(age(-5), "0 ms");
    }

    /// The item's worked example (it is crate-private, so no doc test).
    #[test]
    fn the_number_example() {
        assert_eq!(
            crate::console::layout::number(1234567),
            "1\u{202f}234\u{202f}567"
        );
        assert_eq!(crate::console::layout::number(12), "12");
    }
}
