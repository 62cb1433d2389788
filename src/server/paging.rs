//! `List` page tokens. A token is opaque to clients; inside it holds a version byte, a
//! fingerprint of the query that issued it (namespace, kinds, canonical label selector,
//! cluster) and the position: the (namespace, kind, name, uid) of the last workload sent,
//! and its cluster when it has one (tokens without it, issued before clusters, start after
//! every workload of that key). The next page starts after that key, so a token
//!
//! - cannot overflow or point backwards (there is no offset arithmetic),
//! - keeps its meaning while the index changes, across restarts and on other replicas:
//!   workloads created or deleted meanwhile appear or not by where they sort, and nothing
//!   that existed throughout is skipped or sent twice,
//! - is refused (INVALID_ARGUMENT) with a different filter than the one it was issued for,
//!   and when it is not one this server could have issued (bad encoding, wrong version,
//!   longer than [`MAX_PAGE_TOKEN_BYTES`]).
//!
//! `view` and `page_size` may change from page to page.

use crate::board::Filter;
use crate::excerpt::echo;
use crate::proto::v1 as pb;
use tonic::Status;

/// Longest `page_token` accepted (the server's own tokens for Kubernetes-valid names are
/// well under 2 KiB).
pub const MAX_PAGE_TOKEN_BYTES: usize = 4096;

const VERSION: u8 = 1;
const FINGERPRINT_BYTES: usize = 12;

/// What a token is bound to: a digest of the query's filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint([u8; FINGERPRINT_BYTES]);

/// The fingerprint of a filter: its namespace, its kinds (sorted, lower-cased, without
/// duplicates), its label selector in canonical form and its cluster (when set), so
/// equivalent spellings of one query (`a=b` and ` a=b`, kinds in another order) share
/// tokens.
pub fn fingerprint(filter: &Filter, canonical_selector: &str) -> Fingerprint {
    let mut kinds: Vec<String> = filter.kinds.iter().map(|k| k.to_lowercase()).collect();
    kinds.sort();
    kinds.dedup();
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in std::iter::once(filter.namespace.as_str())
        .chain(std::iter::once("\u{0}kinds"))
        .chain(kinds.iter().map(String::as_str))
        .chain(std::iter::once("\u{0}selector"))
        .chain(std::iter::once(canonical_selector))
    {
        ctx.update(&(part.len() as u64).to_be_bytes());
        ctx.update(part.as_bytes());
    }
    // Only when set, so tokens issued before clusters existed keep their fingerprint.
    if !filter.cluster.is_empty() {
        for part in ["\u{0}cluster", filter.cluster.as_str()] {
            ctx.update(&(part.len() as u64).to_be_bytes());
            ctx.update(part.as_bytes());
        }
    }
    let mut out = [0u8; FINGERPRINT_BYTES];
    out.copy_from_slice(&ctx.finish().as_ref()[..FINGERPRINT_BYTES]);
    Fingerprint(out)
}

/// Where a page starts: after this workload key, and after this cluster among workloads of
/// that key (`None`: after all of them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// Namespace, kind, name and uid of the last workload sent.
    pub at: pb::ObjectRef,
    /// Its cluster.
    pub cluster: Option<String>,
}

/// The token for the page after `last` (of `cluster`), or `None` when its key is too long
/// for a token (only names longer than Kubernetes allows can be).
pub fn encode(fingerprint: Fingerprint, last: &pb::ObjectRef, cluster: &str) -> Option<String> {
    let mut bytes = vec![VERSION];
    bytes.extend_from_slice(&fingerprint.0);
    let with_cluster = (!cluster.is_empty()).then_some(cluster);
    for part in [last.namespace.as_str(), &last.kind, &last.name, &last.uid]
        .into_iter()
        .chain(with_cluster)
    {
        let len = u16::try_from(part.len()).ok()?;
        bytes.extend_from_slice(&len.to_be_bytes());
        bytes.extend_from_slice(part.as_bytes());
    }
    let token = hex(&bytes);
    (token.len() <= MAX_PAGE_TOKEN_BYTES).then_some(token)
}

/// The position in `token`, which must have been issued for a query with `fingerprint`.
pub fn decode(token: &str, fingerprint: Fingerprint) -> Result<Position, Status> {
    let foreign = || {
        Status::invalid_argument(format!(
            "page_token {:?} is not one this server issued; send the next_page_token of the previous page unchanged, or no token for the first page",
            echo(token)
        ))
    };
    if token.len() > MAX_PAGE_TOKEN_BYTES {
        return Err(Status::invalid_argument(format!(
            "page_token is {} bytes; tokens this server issues are at most {MAX_PAGE_TOKEN_BYTES}",
            token.len()
        )));
    }
    let bytes = unhex(token).ok_or_else(foreign)?;
    let (&version, rest) = bytes.split_first().ok_or_else(foreign)?;
    if version != VERSION || rest.len() < FINGERPRINT_BYTES {
        return Err(foreign());
    }
    let (issued_for, mut rest) = rest.split_at(FINGERPRINT_BYTES);
    if issued_for != fingerprint.0 {
        return Err(Status::invalid_argument(
            "page_token was issued for a different query: send the same namespace, kinds, label_selector and cluster as for the first page (view and page_size may change), or start again without a token",
        ));
    }
    let mut parts: Vec<String> = Vec::with_capacity(5);
    // Four parts, and the cluster when the last workload had one.
    while parts.len() < 4 || (parts.len() == 4 && !rest.is_empty()) {
        let (len, tail) = rest.split_at_checked(2).ok_or_else(foreign)?;
        let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
        let (text, tail) = tail.split_at_checked(len).ok_or_else(foreign)?;
        parts.push(String::from_utf8(text.to_vec()).map_err(|_| foreign())?);
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(foreign());
    }
    let cluster = parts.get(4).cloned();
    if cluster.as_deref() == Some("") {
        // This server never writes an empty cluster part.
        return Err(foreign());
    }
    let mut parts = parts.into_iter();
    let mut next = || parts.next().unwrap_or_default();
    Ok(Position {
        at: pb::ObjectRef {
            namespace: next(),
            kind: next(),
            name: next(),
            uid: next(),
            api_version: String::new(),
        },
        cluster,
    })
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 15)]));
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let b = s.as_bytes();
    if !b.len().is_multiple_of(2) {
        return None;
    }
    b.chunks_exact(2)
        .map(|pair| Some((digit(pair[0])? << 4) | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn filter(ns: &str, kinds: &[&str]) -> Filter {
        Filter {
            namespace: ns.into(),
            kinds: kinds.iter().map(|k| (*k).to_owned()).collect(),
            label_selector: String::new(),
            cluster: String::new(),
        }
    }

    fn at(name: &str) -> pb::ObjectRef {
        pb::ObjectRef {
            namespace: "ml".into(),
            kind: "JobSet".into(),
            name: name.into(),
            uid: "0b7e-uid".into(),
            api_version: String::new(),
        }
    }

    #[test]
    fn a_token_round_trips_for_its_own_query() {
        let fp = fingerprint(&filter("ml", &["JobSet", "job"]), "app=x");
        let token = encode(fp, &at("train"), "").unwrap();
        let position = decode(&token, fp).unwrap();
        assert_eq!(position.at, at("train"));
        assert_eq!(position.cluster, None);
        // Equivalent spellings of the query share tokens.
        let same = fingerprint(&filter("ml", &["JOB", "jobset", "job"]), "app=x");
        assert_eq!(decode(&token, same).unwrap().at, at("train"));
        // The last workload's cluster is part of the position.
        let token = encode(fp, &at("train"), "eu").unwrap();
        assert_eq!(decode(&token, fp).unwrap().cluster.as_deref(), Some("eu"));
        // A cluster filter is part of the query.
        let mut eu = filter("ml", &["JobSet", "job"]);
        eu.cluster = "eu".into();
        let e = decode(&token, fingerprint(&eu, "app=x")).unwrap_err();
        assert!(e.message().contains("different query"), "{}", e.message());
    }

    #[test]
    fn a_token_from_another_query_is_refused() {
        let fp = fingerprint(&filter("ml", &[]), "");
        let token = encode(fp, &at("train"), "").unwrap();
        for other in [
            fingerprint(&filter("serving", &[]), ""),
            fingerprint(&filter("ml", &["Job"]), ""),
            fingerprint(&filter("ml", &[]), "app=x"),
        ] {
            let e = decode(&token, other).unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument);
            assert!(e.message().contains("different query"), "{}", e.message());
        }
    }

    #[test]
    fn forged_and_old_style_tokens_are_refused_with_a_bounded_message() {
        let fp = fingerprint(&filter("", &[]), "");
        let good = encode(fp, &at("x"), "").unwrap();
        let huge = "9".repeat(1 << 20);
        for bad in [
            "5",
            "18446744073709551615",
            "zz",
            "0",
            &good[..good.len() - 2],
            &format!("{good}00"),
            &format!("02{}", &good[2..]),
            &huge,
        ] {
            let e = decode(bad, fp).unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument, "{bad:.40}");
            assert!(e.message().len() < 600, "{}", e.message().len());
        }
    }

    #[test]
    fn keys_too_long_for_a_token_give_none() {
        let fp = fingerprint(&filter("", &[]), "");
        assert!(encode(fp, &at(&"n".repeat(253)), "").is_some());
        assert!(encode(fp, &at(&"n".repeat(3000)), "").is_none());
    }
}
