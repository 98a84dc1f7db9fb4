//! Dashboard sessions: a person signs in with a token and gets a cookie
//! (`HttpOnly`, `SameSite=Strict`, `Secure` unless the server listens on
//! loopback only, `Path=/`, expiring with the session). The session lives in
//! the store (only its hash), ends at its expiry, when the person signs out, or
//! when its token is revoked. A request carried by the cookie that changes
//! anything must also carry the session's CSRF token, in the `X-CSRF-Token`
//! header or a form's `csrf_token` field, compared in constant time.

use super::secret;

/// The cookie's name.
pub const COOKIE: &str = "loopbox_session";
/// The header a script sends the CSRF token in.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// The form field a dashboard form sends the CSRF token in.
pub const CSRF_FIELD: &str = "csrf_token";

/// The `Set-Cookie` value that starts a session.
pub fn set_cookie(value: &str, max_age_s: u64, secure: bool) -> String {
    format!(
        "{COOKIE}={value}; Path=/; Max-Age={max_age_s}; HttpOnly; SameSite=Strict{}",
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that ends one.
pub fn clear_cookie(secure: bool) -> String {
    set_cookie("", 0, secure)
}

/// The session cookie's value among a request's `Cookie` headers, if any.
pub fn from_headers<'a>(cookies: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    cookies
        .flat_map(|h| h.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, v)| v.trim())
}

/// Whether the presented CSRF token is the session's.
pub fn csrf_ok(expected: &str, presented: Option<&str>) -> bool {
    presented.is_some_and(|p| secret::same(expected.as_bytes(), p.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_http_only_strict_and_secure_off_loopback() {
        let c = set_cookie("lbs_x", 3600, true);
        assert_eq!(
            c,
            "loopbox_session=lbs_x; Path=/; Max-Age=3600; HttpOnly; SameSite=Strict; Secure"
        );
        assert!(!set_cookie("v", 1, false).contains("Secure"));
        assert!(clear_cookie(false).contains("Max-Age=0"));
        assert_eq!(
            from_headers(["a=1; loopbox_session=lbs_y ", "b=2"].into_iter()),
            Some("lbs_y")
        );
        assert_eq!(from_headers(["loopbox_sessionx=1"].into_iter()), None);
        assert!(csrf_ok("abc", Some("abc")));
        assert!(!csrf_ok("abc", Some("abd")) && !csrf_ok("abc", None) && !csrf_ok("abc", Some("")));
    }
}
