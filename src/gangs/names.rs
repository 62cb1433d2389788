//! Gang object names, byte for byte as each ecosystem generates them.
//!
//! - Kubernetes `workloadbuilder` (`k8s.io/component-helpers/scheduling/schedulingv1/
//!   workloadbuilder/names.go`): `GenerateWorkloadName` and `GeneratePodGroupName`, FNV-32a
//!   printed in decimal and re-encoded with apimachinery's `rand.SafeEncodeString`.
//! - KAI Scheduler's Karta pod-grouper (`pkg/podgrouper/podgrouper/plugins/karta/grouper.go`,
//!   `calcPodGroupName`): `pg-<top owner uid>` plus `-<keys joined by ->`.

/// `validation.DNS1123SubdomainMaxLength`.
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;

/// apimachinery `rand` alphabet (no vowels, no confusable digits).
const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// FNV-32a over the concatenation of `parts`.
pub fn fnv32a(parts: &[&[u8]]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for part in parts {
        for &b in *part {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    }
    h
}

/// apimachinery `rand.SafeEncodeString` of the decimal form of `n` (only ASCII digits, so
/// one output byte per input byte).
fn safe_encode(n: u32) -> String {
    n.to_string()
        .bytes()
        .map(|b| char::from(ALPHANUMS[usize::from(b) % ALPHANUMS.len()]))
        .collect()
}

/// The first `n` bytes of `s` (names are ASCII; a non-ASCII cut backs off to a char edge
/// where Go would cut bytes, which only an invalid name can reach).
fn prefix(s: &str, n: usize) -> &str {
    if s.len() <= n {
        return s;
    }
    let mut end = n;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `workloadbuilder.GenerateWorkloadName(ownerName, ownerUID)`: the UID is hashed in
/// `dump.ForHash` form (`(types.UID)<uid>`).
pub fn workload_name(owner_name: &str, owner_uid: &str) -> String {
    let hash = safe_encode(fnv32a(&[b"(types.UID)", owner_uid.as_bytes()]));
    if owner_name.is_empty() {
        return hash;
    }
    let max_prefix = DNS1123_SUBDOMAIN_MAX - hash.len() - 1;
    format!("{}-{hash}", prefix(owner_name, max_prefix))
}

/// `workloadbuilder.GeneratePodGroupName(workloadName, templateName)`.
pub fn pod_group_name(workload: &str, template: &str) -> String {
    let hash = safe_encode(fnv32a(&[workload.as_bytes(), template.as_bytes()]));
    let max_prefix = DNS1123_SUBDOMAIN_MAX - hash.len() - 1;
    match (workload.is_empty(), template.is_empty()) {
        (true, true) => return hash,
        (true, false) => return format!("{}-{hash}", prefix(template, max_prefix)),
        (false, true) => return format!("{}-{hash}", prefix(workload, max_prefix)),
        (false, false) => {}
    }
    let max_available = DNS1123_SUBDOMAIN_MAX - hash.len() - 2;
    let (mut wl, mut tpl) = (workload, template);
    if wl.len() + tpl.len() > max_available {
        let half = max_available / 2;
        if wl.len() <= half {
            tpl = prefix(tpl, max_available - wl.len());
        } else if tpl.len() <= half {
            wl = prefix(wl, max_available - tpl.len());
        } else {
            wl = prefix(wl, max_available - half);
            tpl = prefix(tpl, half);
        }
    }
    format!("{wl}-{tpl}-{hash}")
}

/// KAI's Karta pod-grouper name: `pg-<uid>` and `-<keys joined by ->` when there are keys.
pub fn kai_pod_group_name(root_uid: &str, keys: &[String]) -> String {
    let base = format!("pg-{root_uid}");
    if keys.is_empty() {
        return base;
    }
    format!("{base}-{}", keys.join("-"))
}

/// A DNS-1123 label made from `s` (lower-cased; other characters become `-`; trimmed to 63
/// bytes without leading or trailing `-`); `None` when nothing is left.
pub fn dns_label(s: &str) -> Option<String> {
    let mapped: String = s
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = prefix(mapped.trim_matches('-'), 63).trim_end_matches('-');
    (!trimmed.is_empty()).then(|| trimmed.to_owned())
}

/// Whether `s` is a DNS-1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 bytes).
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && crate::model::names::is_dns1123_label_chars(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Golden values from upstream's own tests (workloadbuilder/names_test.go).
    #[test]
    fn workload_names_match_upstream_goldens() {
        assert_eq!(workload_name("job", "uid-1"), "job-647cf7d9");
        assert_eq!(workload_name("", "uid-1"), "647cf7d9");
        let long = workload_name(&"job".repeat(100), "uid-1");
        assert!(long.len() <= DNS1123_SUBDOMAIN_MAX, "{}", long.len());
        assert_ne!(long, workload_name(&"job".repeat(100), "uid-2"));
    }

    #[test]
    fn pod_group_names_match_upstream_goldens() {
        assert_eq!(pod_group_name("", ""), "65bb57b6b5");
        assert_eq!(pod_group_name("", "template"), "template-5cbb944dc9");
        assert_eq!(pod_group_name("workload", ""), "workload-c5546b9dd");
        let (wl, tpl) = ("workload".repeat(40), "template".repeat(40));
        for (w, t) in [
            (&wl[..], &tpl[..]),
            ("workload", &tpl),
            (&wl, "template"),
            ("", &tpl),
            (&wl, ""),
        ] {
            let name = pod_group_name(w, t);
            assert!(
                name.len() <= DNS1123_SUBDOMAIN_MAX,
                "{w}/{t}: {}",
                name.len()
            );
        }
        assert!(pod_group_name("workload", &tpl).starts_with("workload-"));
        assert!(pod_group_name(&wl, "template").contains("-template-"));
        assert_ne!(
            pod_group_name(&wl, &tpl),
            pod_group_name(&wl, "other-template")
        );
    }

    // Values computed outside Rust by the upstream algorithm as written (FNV-32a of the
    // inputs, decimal, SafeEncodeString), in Python.
    #[test]
    fn names_match_an_independent_computation() {
        assert_eq!(pod_group_name("wl", "tpl"), "wl-tpl-6cd8cdf46b");
        let wl = workload_name("llm-batch", "7a000012-0000-4000-8000-000000000001");
        assert_eq!(wl, "llm-batch-5df85968dc");
        assert_eq!(
            pod_group_name(&wl, "raycluster"),
            "llm-batch-5df85968dc-raycluster-7cd5746688"
        );
    }

    #[test]
    fn fnv32a_is_the_standard_function() {
        // Published FNV-1a 32-bit test vectors.
        assert_eq!(fnv32a(&[b""]), 0x811c_9dc5);
        assert_eq!(fnv32a(&[b"a"]), 0xe40c_292c);
        assert_eq!(fnv32a(&[b"foobar"]), 0xbf9c_f968);
    }

    #[test]
    fn kai_names_follow_the_karta_grouper() {
        assert_eq!(kai_pod_group_name("u1", &[]), "pg-u1");
        assert_eq!(
            kai_pod_group_name("u1", &["0".into(), "a".into()]),
            "pg-u1-0-a"
        );
    }

    #[test]
    fn dns_labels() {
        assert_eq!(dns_label("Worker/i-0[1]").as_deref(), Some("worker-i-0-1"));
        assert_eq!(dns_label("--").as_deref(), None);
        assert!(is_dns_label("a-1") && !is_dns_label("A") && !is_dns_label("-a"));
        assert_eq!(dns_label(&"x".repeat(100)).map(|s| s.len()), Some(63));
    }
}
