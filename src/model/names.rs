//! Kubernetes' name rules (apimachinery's validation): DNS-1123 labels and subdomains, the
//! parts of qualified names and label values. Shared by the label selector, request
//! validation, Karta index labels and rendered gang object names.

/// Longest DNS-1123 subdomain (and label key prefix).
const SUBDOMAIN_MAX: usize = 253;

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`: a label value or the name part of a key.
pub fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_alphanumeric();
    b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// A DNS-1123 subdomain: at most 253 characters; dot-separated labels of `[a-z0-9-]` that
/// start and end alphanumeric.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= SUBDOMAIN_MAX && s.split('.').all(is_dns1123_label_chars)
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?` (no length limit: callers check it).
pub fn is_dns1123_label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    let lower_alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    b.first().is_some_and(lower_alnum)
        && b.last().is_some_and(lower_alnum)
        && b.iter().all(|c| lower_alnum(c) || *c == b'-')
}
