//! The web view (`/ui/` on the admin port): embedded HTML, CSS and JavaScript ([`assets`]),
//! a small read-only JSON API under `/ui/api/` ([`api`]) and a live change feed as
//! server-sent events (`/ui/api/events`, [`live`]).
//!
//! - Assets are compiled into the binary: nothing is fetched from elsewhere at run time.
//! - Every `/ui` answer carries a strict Content-Security-Policy (no inline script or style,
//!   nothing but this origin), `nosniff`, no referrer and no framing.
//! - Only `GET` and `HEAD` are served (anything else is 405): the view never writes.
//! - With bearer tokens (`serve --auth-tokens`), the data under `/ui/api/` needs a token
//!   with the read scope of the API it shows (`resolver`; `definitions` for the definitions
//!   page), as the gRPC API does. The assets themselves hold no data and stay open (the page
//!   asks for a token when the API answers 401).
//! - Answers are bounded: lists are paged, long strings are cut, and the work runs on a
//!   blocking thread so `/livez` and `/readyz` never wait behind it.

pub mod api;
pub mod assets;
pub mod live;

use crate::server::{Shared, Tokens};
use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Response, StatusCode};
use std::convert::Infallible;
use std::sync::Arc;

/// The body of a `/ui` answer: whole, or a stream (the live feed).
pub type Body = BoxBody<Bytes, Infallible>;

/// The Content-Security-Policy of every `/ui` answer.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// What one listener's web view keeps between requests: its open live feeds (bounded by
/// [`live::MAX_FEEDS`]) and its last overview sums. Owned by the listener (`crate::admin`),
/// passed to [`answer`].
#[derive(Default)]
pub struct View {
    feeds: live::OpenFeeds,
    sums: Arc<api::KeptSums>,
}

/// True for the paths this module serves (`/ui`, `/ui/…`).
pub fn serves(path: &str) -> bool {
    path == "/ui" || path.starts_with("/ui/")
}

/// What one request asks for, as far as the view needs it.
pub struct Asked<'a> {
    /// Request method.
    pub method: &'a Method,
    /// Path (without the query).
    pub path: &'a str,
    /// Query string, if any.
    pub query: Option<&'a str>,
    /// The `Authorization` header.
    pub authorization: Option<&'a [u8]>,
    /// The `Last-Event-ID` header (the live feed's resume point).
    pub last_event_id: Option<&'a [u8]>,
    /// The `Host` header.
    pub host: Option<&'a [u8]>,
}

/// Whether the web view answers a request for `host` (the `Host` header) when no tokens
/// guard it: an IP literal, `localhost`, or one of `allowed` (each with any port). Any
/// other name could be an attacker's domain rebound to this address (DNS rebinding).
pub fn host_allowed(host: Option<&[u8]>, allowed: &[String]) -> bool {
    let Some(host) = host.and_then(|h| std::str::from_utf8(h).ok()) else {
        return false;
    };
    let name = match host.strip_prefix('[') {
        // `[v6]` or `[v6]:port`.
        Some(rest) => match rest.split_once(']') {
            Some((v6, port))
                if port.is_empty() || port.strip_prefix(':').is_some_and(valid_port) =>
            {
                return v6.parse::<std::net::Ipv6Addr>().is_ok();
            }
            _ => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) if valid_port(port) => name,
            Some(_) => return false,
            None => host,
        },
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    name.parse::<std::net::Ipv4Addr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || allowed.iter().any(|a| a.eq_ignore_ascii_case(name))
}

fn valid_port(port: &str) -> bool {
    port.parse::<u16>().is_ok()
}

/// Answers one `/ui` request.
pub async fn answer(
    shared: &Shared,
    view: &View,
    tokens: Option<&Arc<Tokens>>,
    asked: Asked<'_>,
) -> Response<Body> {
    if tokens.is_none() && !host_allowed(asked.host, &shared.ui_hosts) {
        return secured(error(
            StatusCode::FORBIDDEN,
            "the web view answers only Host values that are IP addresses, localhost or listed in --ui-allowed-hosts",
        ));
    }
    if asked.method != Method::GET && asked.method != Method::HEAD {
        let mut r = plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "the web view is read-only\n",
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return secured(r);
    }
    let response = match asked.path {
        "/ui" => {
            let mut r = plain(StatusCode::MOVED_PERMANENTLY, "see /ui/\n");
            r.headers_mut()
                .insert(header::LOCATION, HeaderValue::from_static("/ui/"));
            r
        }
        p if p.starts_with("/ui/api/") => {
            let endpoint = &p["/ui/api/".len()..];
            let scope = if endpoint == "definitions" {
                crate::server::auth::ReadScope::Definitions
            } else {
                crate::server::auth::ReadScope::Resolver
            };
            if let Some(tokens) = tokens
                && let Err(denied) = tokens.authorize_read(asked.authorization, scope)
            {
                refused(&denied)
            } else if endpoint == "events" {
                live::events(shared, &view.feeds, asked.query, asked.last_event_id)
            } else {
                api::answer(shared, &view.sums, endpoint, asked.query).await
            }
        }
        p => match assets::find(&p["/ui/".len()..]) {
            Some(asset) => {
                let mut r = Response::new(Full::new(Bytes::from_static(asset.body)).boxed());
                let h = r.headers_mut();
                h.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static(asset.content_type),
                );
                h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
                h.insert(header::ETAG, HeaderValue::from_static(assets::ETAG));
                r
            }
            None => plain(StatusCode::NOT_FOUND, "not found\n"),
        },
    };
    let mut response = secured(response);
    if asked.method == Method::HEAD {
        *response.body_mut() = Full::new(Bytes::new()).boxed();
    }
    response
}

/// `response` with the headers every `/ui` answer carries.
fn secured(mut response: Response<Body>) -> Response<Body> {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        "cross-origin-resource-policy",
        HeaderValue::from_static("same-origin"),
    );
    response
}

/// A plain-text answer.
pub(crate) fn plain(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// A JSON answer.
pub(crate) fn json(status: StatusCode, body: Vec<u8>) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body)).boxed());
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A JSON error: `{"error": message}`.
pub(crate) fn error(status: StatusCode, message: &str) -> Response<Body> {
    let body = serde_json::to_vec(&serde_json::json!({ "error": message })).unwrap_or_default();
    json(status, body)
}

/// 401 (no or unknown token) or 403 (a token without the scope), as JSON.
fn refused(denied: &tonic::Status) -> Response<Body> {
    if denied.code() == tonic::Code::PermissionDenied {
        return error(StatusCode::FORBIDDEN, denied.message());
    }
    let mut r = error(StatusCode::UNAUTHORIZED, denied.message());
    // No `WWW-Authenticate: Basic`: the browser must not pop up its own dialog; the page
    // asks for the token.
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"kartograf\""),
    );
    r
}

/// The value of `key` in a query string (`a=1&b=2`), percent-decoded; `None` when absent or
/// not valid UTF-8 once decoded.
pub fn query_param(query: Option<&str>, key: &str) -> Option<String> {
    let query = query?;
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if decode(k).as_deref() == Some(key) {
            return decode(v);
        }
    }
    None
}

/// A query string's parameters, each percent-decoded (the first of a repeated key counts).
#[derive(Debug, Default)]
pub struct Query(Vec<(String, String)>);

impl Query {
    /// Decodes `a=1&b=2`; an undecodable name or value is refused, naming the parameter.
    pub fn parse(query: Option<&str>) -> Result<Query, String> {
        let mut out = Vec::new();
        for pair in query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
        {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(k).ok_or_else(|| {
                "a query parameter's name is not valid percent-encoded UTF-8".to_owned()
            })?;
            let value = decode(v).ok_or_else(|| {
                format!(
                    "query parameter {}: its value is not valid percent-encoded UTF-8",
                    crate::excerpt::excerpt(&key, 64)
                )
            })?;
            out.push((key, value));
        }
        Ok(Query(out))
    }

    /// The value of `key` (empty when absent).
    pub fn get(&self, key: &str) -> String {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }
}

/// Percent-decodes a query component (`+` is a space).
fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_decoded() {
        let q = Some("a=1&label=app%3Din%20(x%2Cy)&b=&plus=a+b&bad=%zz&utf=%C3%A9");
        assert_eq!(query_param(q, "a").as_deref(), Some("1"));
        assert_eq!(query_param(q, "label").as_deref(), Some("app=in (x,y)"));
        assert_eq!(query_param(q, "b").as_deref(), Some(""));
        assert_eq!(query_param(q, "plus").as_deref(), Some("a b"));
        assert_eq!(query_param(q, "bad"), None);
        assert_eq!(query_param(q, "utf").as_deref(), Some("é"));
        assert_eq!(query_param(q, "missing"), None);
        assert_eq!(query_param(None, "a"), None);
        assert_eq!(query_param(Some("%"), "a"), None);
    }

    #[test]
    fn only_addresses_localhost_and_listed_hosts_are_answered() {
        let listed = ["kartograf.example".to_owned()];
        for ok in [
            "127.0.0.1",
            "127.0.0.1:9090",
            "10.1.2.3:80",
            "[::1]",
            "[::1]:9090",
            "localhost",
            "LOCALHOST:9090",
            "localhost.",
            "kartograf.example:443",
        ] {
            assert!(host_allowed(Some(ok.as_bytes()), &listed), "{ok}");
        }
        for refused in [
            "evil.example",
            "evil.example:9090",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "[::1",
            "[::1]x",
            "[::1]9090",
            "127.0.0.1:x",
            "kartograf.example.evil",
            "",
        ] {
            assert!(
                !host_allowed(Some(refused.as_bytes()), &listed),
                "{refused}"
            );
        }
        assert!(!host_allowed(None, &listed));
        assert!(!host_allowed(Some(b"evil.example"), &[]));
    }

    #[test]
    fn undecodable_parameters_are_named() {
        let e = Query::parse(Some("kind=Job&selector=%%%")).unwrap_err();
        assert!(e.contains("selector"), "{e}");
        assert!(Query::parse(Some("%zz=1")).is_err());
        let q = Query::parse(Some("a=1&a=2&b=x%20y")).unwrap();
        assert_eq!(q.get("a"), "1");
        assert_eq!(q.get("b"), "x y");
        assert_eq!(q.get("c"), "");
    }

    #[test]
    fn serves_only_its_prefix() {
        assert!(serves("/ui"));
        assert!(serves("/ui/"));
        assert!(serves("/ui/api/overview"));
        assert!(!serves("/uix"));
        assert!(!serves("/metrics"));
    }
}
