//! Reading a mutating webhook's answer as the API server does, for the test binaries.

use base64::Engine;
use serde_json::Value as Json;

/// The answer to review `uid` (HTTP `code`, `body`) checked as the API server's webhook
/// client reads it — an `admission.k8s.io/v1` AdmissionReview echoing the uid, always
/// allowed — and its patch decoded (standard base64 of a JSON Patch, as Go decodes `[]byte`).
pub fn read_answer(uid: &str, code: u16, body: &[u8]) -> (Json, Option<Json>) {
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(body));
    let v: Json = serde_json::from_slice(body).expect("JSON");
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
    assert_eq!(v["kind"], "AdmissionReview");
    let r = v["response"].clone();
    assert_eq!(r["uid"], uid);
    assert_eq!(r["allowed"], true, "a policy never blocks: {r}");
    let patch = r["patch"].as_str().map(|b64| {
        assert_eq!(r["patchType"], "JSONPatch");
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("standard base64, as Go decodes []byte");
        serde_json::from_slice(&bytes).expect("a JSON patch")
    });
    (r, patch)
}
