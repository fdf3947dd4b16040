//! The `Date` value of responses hyper does not write (HTTP/3), formatted once per second.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

use http::HeaderValue;

thread_local! {
    /// (the second it was made for, the value): one per tokio thread, no lock.
    static CACHED: RefCell<(u64, HeaderValue)> =
        const { RefCell::new((u64::MAX, HeaderValue::from_static(""))) };
}

/// The current time as an IMF-fixdate (RFC 9110 §5.6.7).
pub(crate) fn now() -> HeaderValue {
    let now = SystemTime::now();
    let second = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    CACHED.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != second {
            let text = httpdate::fmt_http_date(now);
            if let Ok(value) = HeaderValue::from_str(&text) {
                *cached = (second, value);
            }
        }
        cached.1.clone()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_an_imf_fixdate() {
        let value = super::now();
        let text = value.to_str().unwrap();
        assert!(text.ends_with(" GMT"), "{text}");
        assert_eq!(text.len(), 29, "{text}");
        assert!(httpdate::parse_http_date(text).is_ok());
    }
}
