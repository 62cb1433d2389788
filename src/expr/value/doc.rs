//! Read access shared by unpacked values (`&Val`) and values read in place from a packed
//! buffer ([`Node`]), so facts the cache derives from an object (a pod's phase, readiness,
//! resource requests) are read from the packed bytes without unpacking them. The packed
//! side's implementation is beside the format, in `packed`.

use jaq_json::Val;

/// A JSON-shaped document read in place.
pub trait Doc<'a>: Copy {
    /// Field `key` of an object (`None` for anything else, or when absent).
    fn get(self, key: &str) -> Option<Self>;
    /// The text of a string.
    fn as_str(self) -> Option<&'a str>;
    /// A number as f64.
    fn as_f64(self) -> Option<f64>;
    /// True for a number.
    fn is_number(self) -> bool;
    /// True for `true`.
    fn is_true(self) -> bool;
    /// The elements of an array (nothing for anything else).
    fn items(self) -> impl Iterator<Item = Self>;
    /// The entries of an object, keys as bytes (nothing for anything else).
    fn entries(self) -> impl Iterator<Item = (&'a [u8], Self)>;
    /// gojq's `tostring` of the value (see [`super::to_text`]).
    fn to_text(self) -> String;

    /// Walks a path of object keys.
    fn get_path(self, path: &[&str]) -> Option<Self> {
        path.iter().try_fold(self, |d, key| d.get(key))
    }
}

impl<'a> Doc<'a> for &'a Val {
    fn get(self, key: &str) -> Option<Self> {
        super::get(self, key)
    }

    fn as_str(self) -> Option<&'a str> {
        super::as_str(self)
    }

    fn as_f64(self) -> Option<f64> {
        super::as_f64(self)
    }

    fn is_number(self) -> bool {
        matches!(self, Val::Num(_))
    }

    fn is_true(self) -> bool {
        matches!(self, Val::Bool(true))
    }

    fn items(self) -> impl Iterator<Item = Self> {
        super::as_array(self).iter()
    }

    fn entries(self) -> impl Iterator<Item = (&'a [u8], Self)> {
        super::entries(self).map(|(k, v)| (super::as_bytes(k).unwrap_or_default(), v))
    }

    fn to_text(self) -> String {
        super::to_text(self)
    }
}

/// A parsed JSON document (a caller's or a manifest's), read as the same [`Doc`] so one
/// reader serves JSON, unpacked and packed values alike.
impl<'a> Doc<'a> for &'a serde_json::Value {
    fn get(self, key: &str) -> Option<Self> {
        self.as_object()?.get(key)
    }

    fn as_str(self) -> Option<&'a str> {
        serde_json::Value::as_str(self)
    }

    fn as_f64(self) -> Option<f64> {
        serde_json::Value::as_f64(self)
    }

    fn is_number(self) -> bool {
        serde_json::Value::is_number(self)
    }

    fn is_true(self) -> bool {
        self.as_bool() == Some(true)
    }

    fn items(self) -> impl Iterator<Item = Self> {
        self.as_array()
            .map(|a| a.as_slice())
            .unwrap_or_default()
            .iter()
    }

    fn entries(self) -> impl Iterator<Item = (&'a [u8], Self)> {
        self.as_object()
            .into_iter()
            .flat_map(|o| o.iter().map(|(k, v)| (k.as_bytes(), v)))
    }

    /// As the value's: converted first (rarely read on this side), so the text is exactly
    /// gojq's.
    fn to_text(self) -> String {
        match self {
            serde_json::Value::String(s) => s.clone(),
            other => super::from_json(other, super::Limits::default())
                .map(|v| super::to_text(&v))
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::value::{Keep, Limits, Packed, from_json};
    use serde_json::json;

    /// Every read, the same on the unpacked value and on the packed one.
    fn reads<'a>(d: impl Doc<'a>) -> Vec<String> {
        let mut out = vec![
            format!("{:?}", d.get_path(&["a", "s"]).and_then(|v| v.as_str())),
            format!("{:?}", d.get_path(&["a", "i"]).and_then(|v| v.as_f64())),
            format!("{:?}", d.get_path(&["a", "f"]).and_then(|v| v.as_f64())),
            format!("{:?}", d.get_path(&["a", "neg"]).and_then(|v| v.as_f64())),
            format!("{:?}", d.get_path(&["a", "s"]).map(|v| v.is_number())),
            format!("{:?}", d.get_path(&["a", "i"]).map(|v| v.is_number())),
            format!("{:?}", d.get_path(&["a", "missing"]).is_some()),
            format!(
                "{:?}",
                d.get_path(&["a", "a-long-key-the-table-has-not-seen-yet"])
                    .map(|v| v.is_true())
            ),
            format!("{:?}", d.get_path(&["a", "i"]).map(|v| v.is_true())),
            format!("{:?}", d.get_path(&["a", "s", "deeper"]).is_some()),
            d.get("list").map(|l| l.to_text()).unwrap_or_default(),
        ];
        for item in d.get("list").into_iter().flat_map(|l| l.items()) {
            out.push(item.to_text());
        }
        for (k, v) in d.get("a").into_iter().flat_map(|a| a.entries()) {
            out.push(format!("{}={}", String::from_utf8_lossy(k), v.to_text()));
        }
        out.push(
            d.get("a")
                .map(|a| a.items().count())
                .unwrap_or(9)
                .to_string(),
        );
        out.push(
            d.get("list")
                .map(|l| l.entries().count())
                .unwrap_or(9)
                .to_string(),
        );
        out
    }

    #[test]
    fn packed_nodes_read_as_unpacked_values_do() {
        let json = json!({
            "a": {"s": "text", "i": 7, "f": 2.5, "neg": -3, "obj": {"x": [1, null]},
                  "a-long-key-the-table-has-not-seen-yet": true},
            "list": ["x", 1, {"k": "v"}, [], null]
        });
        let val = from_json(&json, Limits::default()).unwrap();
        let packed = Packed::pack(&json, &Keep::All, Limits::default()).unwrap();
        let expected = reads(&val);
        assert_eq!(packed.with_node(|n| reads(n)), expected);
        assert_eq!(reads(&json), expected, "parsed JSON reads the same");
        assert!(expected.contains(&"i=7".to_owned()), "{expected:?}");
        assert!(
            expected.contains(&"{\"k\":\"v\"}".to_owned()),
            "{expected:?}"
        );
        // Packed again, the long key is now an id in the table.
        let again = Packed::pack(&json, &Keep::All, Limits::default()).unwrap();
        assert_eq!(again.with_node(|n| reads(n)), expected);
    }

    #[test]
    fn malformed_and_empty_buffers_read_as_nothing() {
        let empty = Packed::default();
        assert!(empty.with_node(|n| n.get("a").is_none() && n.items().count() == 0));
        let json = json!({"list": [1, 2, 3], "m": {"k": "v"}});
        let packed = Packed::pack(&json, &Keep::All, Limits::default()).unwrap();
        let bytes = packed.raw_bytes();
        for cut in 0..bytes.len() {
            let broken = Packed::from_raw(bytes.slice(..cut));
            // Whatever it reads, it neither panics nor loops.
            let _ = broken.with_node(|n| reads(n));
        }
    }
}
