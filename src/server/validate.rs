//! Request validation. Every field of every request is checked before it is used: a value
//! kartograf cannot honour exactly (an unknown enum number, a malformed name, a reference
//! whose fields disagree) is INVALID_ARGUMENT naming the field and what is accepted, never a
//! silent default. Messages quote client values only as bounded excerpts
//! ([`crate::excerpt`]), and [`bounded`] caps every status message the services send.
//!
//! Names follow Kubernetes' own rules: namespaces are DNS-1123 labels (at most 63
//! characters), object names at most 253 bytes that are not `.` or `..` and hold no `/` or
//! `%` (any object's name must pass this), kinds are DNS-1035 labels once lower-cased,
//! `apiVersion` is `version` or `group/version` with a DNS-1123 subdomain group.

use crate::board::selector;
use crate::board::{Filter, TotalsKey};
use crate::excerpt::{STATUS_BYTES, echo, excerpt};
use crate::model::ObjectMeta;
use crate::model::names::{is_dns1123_label_chars, is_dns1123_subdomain};
use crate::proto::v1 as pb;
use tonic::Status;

/// Longest object name (Kubernetes' own limit).
pub const MAX_NAME_BYTES: usize = 253;

/// Longest uid accepted (Kubernetes uids are 36-character UUIDs).
pub const MAX_UID_BYTES: usize = 253;

/// Longest namespace, kind or version (a DNS label).
const LABEL_BYTES: usize = 63;

/// Most entries in `kinds` of a List or Watch.
pub const MAX_KINDS: usize = 64;

fn invalid(message: String) -> Status {
    Status::invalid_argument(message)
}

/// Caps the message of `status` at [`STATUS_BYTES`] (the code is kept).
pub fn bounded(status: Status) -> Status {
    if status.message().len() <= STATUS_BYTES {
        return status;
    }
    Status::new(
        status.code(),
        excerpt(status.message(), STATUS_BYTES).into_owned(),
    )
}

/// A `View` field: VIEW_UNSPECIFIED (0, the full view), VIEW_FULL or VIEW_SUMMARY.
pub fn view(field: &str, value: i32) -> Result<(), Status> {
    pb::View::try_from(value).map(|_| ()).map_err(|_| {
        invalid(format!(
            "{field} is {value}, not a View this server knows; use VIEW_UNSPECIFIED (0, the full view), VIEW_FULL (1) or VIEW_SUMMARY (2)"
        ))
    })
}

/// `TotalsRequest.group_by`: GROUP_BY_UNSPECIFIED (0) groups by namespace.
pub fn group_by(value: i32) -> Result<TotalsKey, Status> {
    match pb::GroupBy::try_from(value) {
        Ok(pb::GroupBy::Unspecified | pb::GroupBy::Namespace) => Ok(TotalsKey::Namespace),
        Ok(pb::GroupBy::Kind) => Ok(TotalsKey::Kind),
        Ok(pb::GroupBy::Workload) => Ok(TotalsKey::Workload),
        Ok(pb::GroupBy::Cluster) => Ok(TotalsKey::Cluster),
        Err(_) => Err(invalid(format!(
            "group_by is {value}, not a GroupBy this server knows; use GROUP_BY_UNSPECIFIED (0, by namespace), GROUP_BY_NAMESPACE (1), GROUP_BY_KIND (2), GROUP_BY_WORKLOAD (3) or GROUP_BY_CLUSTER (4)"
        ))),
    }
}

/// Longest cluster name.
pub const MAX_CLUSTER_BYTES: usize = 253;

/// True for a cluster name: 1 to 253 bytes without whitespace or control characters (a
/// kubeconfig context name such as `arn:aws:eks:us-east-1:1:cluster/prod` is one).
pub fn is_cluster_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_CLUSTER_BYTES
        && !name.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// A `cluster` field: empty, or a cluster name.
pub fn cluster(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() || is_cluster_name(value) {
        return Ok(());
    }
    Err(invalid(format!(
        "{field} {:?} is not a cluster name: 1 to {MAX_CLUSTER_BYTES} bytes without whitespace or control characters",
        echo(value)
    )))
}

/// A namespace: empty, or a DNS-1123 label.
pub fn namespace(field: &str, ns: &str) -> Result<(), Status> {
    if ns.is_empty() || (ns.len() <= LABEL_BYTES && is_dns1123_label_chars(ns)) {
        return Ok(());
    }
    Err(invalid(format!(
        "{field} {:?} is not a namespace: at most 63 lower case alphanumeric characters or '-', starting and ending alphanumeric",
        echo(ns)
    )))
}

/// An object name: empty, or at most 253 bytes, not `.` or `..`, without `/` or `%`.
fn name(field: &str, name: &str) -> Result<(), Status> {
    if name.len() > MAX_NAME_BYTES {
        return Err(invalid(format!(
            "{field} is {} bytes; Kubernetes names are at most {MAX_NAME_BYTES}",
            name.len()
        )));
    }
    if name == "." || name == ".." || name.contains(['/', '%']) {
        return Err(invalid(format!(
            "{field} {:?} cannot be a Kubernetes name (it is `.` or `..`, or holds '/' or '%')",
            echo(name)
        )));
    }
    Ok(())
}

fn uid(field: &str, uid: &str) -> Result<(), Status> {
    if uid.len() > MAX_UID_BYTES {
        return Err(invalid(format!(
            "{field} is {} bytes; at most {MAX_UID_BYTES} are accepted",
            uid.len()
        )));
    }
    Ok(())
}

/// A kind: empty, or a DNS-1035 label once lower-cased (`Widget`, `widgets`).
fn kind(field: &str, kind: &str) -> Result<(), Status> {
    if kind.is_empty() || is_kind(kind) {
        return Ok(());
    }
    Err(invalid(format!(
        "{field} {:?} is not a kind: at most 63 letters, digits or '-', starting with a letter",
        echo(kind)
    )))
}

fn is_kind(kind: &str) -> bool {
    let lower = kind.to_ascii_lowercase();
    kind.len() <= LABEL_BYTES
        && lower.as_bytes().first().is_some_and(u8::is_ascii_lowercase)
        && is_dns1123_label_chars(&lower)
}

/// An apiVersion: empty, `version` or `group/version`.
fn api_version(field: &str, value: &str) -> Result<(), Status> {
    let (group, version) = value.rsplit_once('/').unwrap_or(("", value));
    let version_ok = version.len() <= LABEL_BYTES && is_dns1123_label_chars(version);
    let group_ok = !value.contains('/') || is_dns1123_subdomain(group);
    if value.is_empty() || (version_ok && group_ok) {
        return Ok(());
    }
    Err(invalid(format!(
        "{field} {:?} is not an apiVersion: `version` (core group) or `group/version`, e.g. `batch/v1`",
        echo(value)
    )))
}

/// The fields of an object reference that are set, each checked.
fn object_ref(field: &str, r: &pb::ObjectRef) -> Result<(), Status> {
    api_version(&format!("{field}.api_version"), &r.api_version)?;
    kind(&format!("{field}.kind"), &r.kind)?;
    namespace(&format!("{field}.namespace"), &r.namespace)?;
    name(&format!("{field}.name"), &r.name)?;
    uid(&format!("{field}.uid"), &r.uid)
}

/// `ResolveRequest.workload`: a uid, or a name (with its namespace and, optionally, kind and
/// apiVersion).
pub fn workload_ref(r: &pb::ObjectRef) -> Result<(), Status> {
    object_ref("workload", r)?;
    if r.name.is_empty() && r.uid.is_empty() {
        return Err(invalid(
            "workload needs a uid, or a name (with namespace and kind)".to_owned(),
        ));
    }
    Ok(())
}

/// `ResolveRequest.pod`: a uid, or a namespace and name; kind and apiVersion, when set,
/// must be `Pod` and `v1`.
pub fn pod_ref(r: &pb::ObjectRef) -> Result<(), Status> {
    object_ref("pod", r)?;
    if !r.kind.is_empty() && r.kind != "Pod" {
        return Err(invalid(format!(
            "pod.kind is {:?}; a pod target's kind is `Pod` (or empty). To resolve a workload by name, set `workload` instead",
            echo(&r.kind)
        )));
    }
    if !r.api_version.is_empty() && r.api_version != "v1" {
        return Err(invalid(format!(
            "pod.api_version is {:?}; pods are `v1` (or leave it empty)",
            echo(&r.api_version)
        )));
    }
    if r.name.is_empty() && r.uid.is_empty() {
        return Err(invalid(
            "pod needs a uid, or a namespace and name".to_owned(),
        ));
    }
    Ok(())
}

/// Checks that the fields of `asked` besides its uid agree with `found`, the object that
/// `asked.uid` names: a reference whose uid and name (or namespace, kind, apiVersion)
/// disagree is a contradiction, not a lookup by uid.
pub fn agrees(field: &str, asked: &pb::ObjectRef, found: &pb::ObjectRef) -> Result<(), Status> {
    let disagree = [
        ("name", &asked.name, &found.name, false),
        ("namespace", &asked.namespace, &found.namespace, false),
        ("kind", &asked.kind, &found.kind, true),
        ("api_version", &asked.api_version, &found.api_version, false),
    ]
    .into_iter()
    .find(|(_, a, f, any_case)| {
        !a.is_empty()
            && if *any_case {
                !a.eq_ignore_ascii_case(f)
            } else {
                a != f
            }
    });
    match disagree {
        None => Ok(()),
        Some((what, a, _, _)) => Err(invalid(format!(
            "{field}.{what} {:?} contradicts {field}.uid {:?}, which is {} {}/{} ({}): send only the uid, or fields that agree with it",
            echo(a),
            echo(&asked.uid),
            echo(&found.kind),
            echo(&found.namespace),
            echo(&found.name),
            echo(&found.api_version),
        ))),
    }
}

/// A List or Watch filter, every field checked; also returns the selector's canonical form.
pub fn filter(
    namespace_: String,
    kinds: Vec<String>,
    label_selector: String,
    cluster_: String,
) -> Result<(Filter, String), Status> {
    namespace("namespace", &namespace_)?;
    cluster("cluster", &cluster_)?;
    if kinds.len() > MAX_KINDS {
        return Err(invalid(format!(
            "kinds has {} entries; at most {MAX_KINDS} are accepted",
            kinds.len()
        )));
    }
    for (i, k) in kinds.iter().enumerate() {
        kinds_entry(i, k)?;
    }
    let canonical = selector::parse(&label_selector)
        .map_err(|e| invalid(e.to_string()))?
        .to_string();
    let filter = Filter {
        namespace: namespace_,
        kinds,
        label_selector,
        cluster: cluster_,
    };
    Ok((filter, canonical))
}

/// One entry of `kinds`: `Kind` or `group/Kind` (case-insensitive; a plural `kinds` works).
fn kinds_entry(i: usize, entry: &str) -> Result<(), Status> {
    let ok = match entry.split_once('/') {
        None => is_kind(entry),
        Some((group, k)) => is_dns1123_subdomain(group) && is_kind(k),
    };
    if ok {
        return Ok(());
    }
    let hint = if entry.is_empty() {
        "it is empty".to_owned()
    } else if !entry.contains('/') && entry.contains('.') {
        "write a group-qualified kind as `group/Kind`, e.g. `example.com/Widget`".to_owned()
    } else {
        "use `Kind` or `group/Kind`, e.g. `Widget` or `example.com/Widget`".to_owned()
    };
    Err(invalid(format!(
        "kinds[{i}] {:?} is not a kind: {hint}",
        echo(entry)
    )))
}

/// The metadata of an inline object (`what` names the field: `inline.object_json`).
pub fn inline_object(what: &str, meta: &ObjectMeta) -> Result<(), Status> {
    api_version(&format!("{what} apiVersion"), &meta.api_version)?;
    kind(&format!("{what} kind"), &meta.kind)?;
    namespace(&format!("{what} metadata.namespace"), &meta.namespace)?;
    name(&format!("{what} metadata.name"), &meta.name)?;
    uid(&format!("{what} metadata.uid"), &meta.uid)
}

/// An inline pod: a `v1` `Pod` in the root object's namespace (any, for a cluster-scoped
/// root).
pub fn inline_pod(what: &str, pod: &ObjectMeta, root: &ObjectMeta) -> Result<(), Status> {
    inline_object(what, pod)?;
    if pod.kind != "Pod" || pod.api_version != "v1" {
        return Err(invalid(format!(
            "{what} is {:?} {:?}, not a v1 Pod",
            echo(&pod.api_version),
            echo(&pod.kind)
        )));
    }
    if !root.namespace.is_empty() && pod.namespace != root.namespace {
        return Err(invalid(format!(
            "{what} is in namespace {:?} but the object is in {:?}: a workload's pods share its namespace",
            echo(&pod.namespace),
            echo(&root.namespace)
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn r(api_version: &str, kind: &str, ns: &str, name: &str, uid: &str) -> pb::ObjectRef {
        pb::ObjectRef {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn enums_accept_only_known_numbers() {
        for v in [0, 1, 2] {
            assert!(view("view", v).is_ok());
        }
        for v in [3, 99, -1, i32::MAX, i32::MIN] {
            let e = view("view", v).unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument);
            assert!(e.message().contains("VIEW_SUMMARY"), "{}", e.message());
        }
        assert_eq!(group_by(0).unwrap(), TotalsKey::Namespace);
        assert_eq!(group_by(2).unwrap(), TotalsKey::Kind);
        assert_eq!(group_by(3).unwrap(), TotalsKey::Workload);
        assert_eq!(group_by(4).unwrap(), TotalsKey::Cluster);
        for v in [5, 99, -1] {
            let e = group_by(v).unwrap_err();
            assert!(
                e.message().contains("group_by is") && e.message().contains("GROUP_BY_KIND"),
                "{}",
                e.message()
            );
        }
    }

    #[test]
    fn names_follow_kubernetes() {
        assert!(workload_ref(&r("jobset.x-k8s.io/v1alpha2", "JobSet", "ml", "a.b-c", "")).is_ok());
        assert!(workload_ref(&r("", "", "", "", "u")).is_ok());
        assert!(workload_ref(&r("v1", "Pod", "", &"n".repeat(253), "")).is_ok());
        for bad in [
            r("", "", "", "", ""),
            r("", "", "ML", "a", ""),
            r("", "", &"n".repeat(64), "a", ""),
            r("", "", "", &"n".repeat(254), ""),
            r("", "", "", "a/b", ""),
            r("", "", "", "..", ""),
            r("", "Job Set", "", "a", ""),
            r("", "1Job", "", "a", ""),
            r("a/b/c", "", "", "a", ""),
            r("Batch/v1", "", "", "a", ""),
            r("", "", "", "", &"u".repeat(254)),
        ] {
            let e = workload_ref(&bad).unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument, "{bad:?}");
        }
        let e = workload_ref(&r("", "", "", &"n".repeat(1 << 20), "")).unwrap_err();
        assert!(e.message().contains("1048576 bytes"), "{}", e.message());
        assert!(e.message().len() < 100);
    }

    #[test]
    fn pod_targets_are_pods() {
        assert!(pod_ref(&r("v1", "Pod", "ml", "p", "")).is_ok());
        assert!(pod_ref(&r("", "", "", "", "u")).is_ok());
        for bad in [
            r("", "Deployment", "ml", "p", ""),
            r("apps/v1", "", "ml", "p", ""),
            r("", "", "ml", "", ""),
        ] {
            assert_eq!(pod_ref(&bad).unwrap_err().code(), Code::InvalidArgument);
        }
    }

    #[test]
    fn contradictory_references_name_the_field() {
        let found = r("jobset.x-k8s.io/v1alpha2", "JobSet", "ml", "train", "u1");
        assert!(agrees("workload", &r("", "", "", "", "u1"), &found).is_ok());
        assert!(agrees("workload", &r("", "jobset", "ml", "train", "u1"), &found).is_ok());
        let e = agrees("workload", &r("", "", "ml", "other", "u1"), &found).unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(
            e.message()
                .starts_with("workload.name \"other\" contradicts workload.uid \"u1\""),
            "{}",
            e.message()
        );
        assert!(e.message().contains("JobSet ml/train"));
        for (asked, field) in [
            (r("", "", "serving", "", "u1"), "namespace"),
            (r("", "Job", "", "", "u1"), "kind"),
            (r("batch/v1", "", "", "", "u1"), "api_version"),
        ] {
            let e = agrees("workload", &asked, &found).unwrap_err();
            assert!(
                e.message().starts_with(&format!("workload.{field} ")),
                "{}",
                e.message()
            );
        }
    }

    #[test]
    fn filters_check_every_field() {
        let (f, canonical) = filter(
            "ml".into(),
            vec!["JobSet".into(), "batch/Job".into(), "jobsets".into()],
            " b=1, a".into(),
            "arn:aws:eks:us-east-1:1:cluster/prod".into(),
        )
        .unwrap();
        assert_eq!(f.kinds.len(), 3);
        assert_eq!(canonical, "a,b=1");
        for (ns, kinds, sel) in [
            ("Bad_NS", vec![], ""),
            ("", vec![String::new()], ""),
            ("", vec!["jobset.jobset.x-k8s.io".to_owned()], ""),
            ("", vec!["/Job".to_owned()], ""),
            ("", vec!["a/b/c".to_owned()], ""),
            ("", vec!["Job".to_owned(); MAX_KINDS + 1], ""),
            ("", vec![], "a=b=c"),
        ] {
            let e = filter(ns.into(), kinds, sel.into(), String::new()).unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument);
        }
        for bad in ["a b", "tab\there", "\u{7}", &"c".repeat(254)] {
            let e = filter(String::new(), vec![], String::new(), bad.into()).unwrap_err();
            assert!(e.message().starts_with("cluster "), "{}", e.message());
        }
        let e = filter(
            String::new(),
            vec!["jobset.jobset.x-k8s.io".into()],
            String::new(),
            String::new(),
        )
        .unwrap_err();
        assert!(e.message().contains("group/Kind"), "{}", e.message());
    }

    #[test]
    fn status_messages_are_capped() {
        let s = bounded(Status::not_found("x".repeat(1 << 20)));
        assert_eq!(s.code(), Code::NotFound);
        assert!(s.message().len() < STATUS_BYTES + 32);
        assert!(s.message().ends_with("…(1048576 bytes)"));
        let short = bounded(Status::not_found("short"));
        assert_eq!(short.message(), "short");
    }
}
