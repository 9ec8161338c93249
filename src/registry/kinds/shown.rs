//! How a handler's URL is shown (routing table, logs, answers, transforms):
//! without the user name and password it may embed, which are kept for delivery.
//!
//! ```
//! use hookbox::registry::kinds::shown::display_url;
//!
//! let url = reqwest::Url::parse("https://user:pw@billing.example.com/hooks").unwrap();
//! assert_eq!(display_url(&url), "https://billing.example.com/hooks");
//! ```

use reqwest::Url;

/// A URL as it may be shown: without user name or password.
pub fn display_url(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.to_string()
}
