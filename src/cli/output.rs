//! Printing proto messages as proto3 canonical JSON or YAML.

use anyhow::Context;
use serde::Serialize;

/// Proto3 canonical JSON, pretty-printed.
pub fn json<T: Serialize>(message: &T) -> anyhow::Result<String> {
    serde_json::to_string_pretty(message).context("encoding JSON")
}

/// The canonical JSON document rendered as YAML.
pub fn yaml<T: Serialize>(message: &T) -> anyhow::Result<String> {
    let value = serde_json::to_value(message).context("encoding JSON")?;
    serde_saphyr::to_string(&value).context("encoding YAML")
}
