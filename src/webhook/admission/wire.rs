//! `admission.k8s.io/v1` AdmissionReview as the API server sends and decodes it
//! (`k8s.io/api/admission/v1/types.go`): only the fields kartograf reads or writes.

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// The review's apiVersion.
pub const API_VERSION: &str = "admission.k8s.io/v1";
/// The review's kind.
pub const KIND: &str = "AdmissionReview";

/// The review as first read: the envelope without the objects (which are skipped without
/// recursion, so a hostile depth cannot hide the uid the answer must carry).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    /// `admission.k8s.io/v1`.
    #[serde(default)]
    pub api_version: Option<String>,
    /// `AdmissionReview`.
    #[serde(default)]
    pub kind: Option<String>,
    /// The request.
    #[serde(default)]
    pub request: Option<Head>,
}

/// `AdmissionRequest` without its objects.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Head {
    /// Copied into the response.
    #[serde(default)]
    pub uid: String,
    /// The object's type (`kind`: group, version, kind).
    #[serde(default)]
    pub kind: Option<GroupVersionKind>,
    /// The object's name (empty on a create with `generateName`).
    #[serde(default)]
    pub name: Option<String>,
    /// The object's namespace (set on a create even when the object's own is not).
    #[serde(default)]
    pub namespace: Option<String>,
    /// `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    #[serde(default)]
    pub operation: String,
}

/// `metav1.GroupVersionKind`.
#[derive(Debug, Clone, Deserialize, Default)]
pub struct GroupVersionKind {
    /// Group.
    #[serde(default)]
    pub group: String,
    /// Version.
    #[serde(default)]
    pub version: String,
    /// Kind.
    #[serde(default)]
    pub kind: String,
}

/// The review read whole: the objects.
#[derive(Debug, Deserialize)]
pub struct Objects {
    /// The request.
    pub request: ObjectsRequest,
}

/// `AdmissionRequest.object` and `.oldObject`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectsRequest {
    /// The object as it would be stored (CREATE, UPDATE).
    #[serde(default)]
    pub object: Option<Json>,
    /// The object as it is stored (UPDATE, DELETE).
    #[serde(default)]
    pub old_object: Option<Json>,
}

/// `metav1.Status` of a denial.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Status {
    /// `Failure`.
    pub status: String,
    /// Why, for the user.
    pub message: String,
    /// Machine-readable reason (`Forbidden`, `BadRequest`, `RequestEntityTooLarge`).
    pub reason: String,
    /// HTTP-like code the API server shows (403, 400, 413).
    pub code: u16,
}

/// `AdmissionResponse`.
#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Response {
    /// The request's uid.
    pub uid: String,
    /// Admitted or not.
    pub allowed: bool,
    /// Why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// RFC 6902 JSON Patch, base64 in JSON (Go's `[]byte`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    /// `JSONPatch` with a patch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch_type: Option<String>,
    /// Shown to the client (`kubectl` prints them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// The review answered.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer {
    /// `admission.k8s.io/v1`.
    pub api_version: &'static str,
    /// `AdmissionReview`.
    pub kind: &'static str,
    /// The response.
    pub response: Response,
}

impl Answer {
    /// Wraps a response.
    pub fn new(response: Response) -> Answer {
        Answer {
            api_version: API_VERSION,
            kind: KIND,
            response,
        }
    }
}
