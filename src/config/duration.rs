//! Durations as text (`500ms`, `30s`, `15m`, `7d`, `0`), or a bare number of milliseconds.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer, de::Error};

pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&humantime::format_duration(*value).to_string())
}

pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Text {
        Millis(u64),
        Text(String),
    }
    match Text::deserialize(deserializer)? {
        Text::Millis(ms) => Ok(Duration::from_millis(ms)),
        Text::Text(text) => humantime::parse_duration(text.trim()).map_err(|e| {
            D::Error::custom(format!(
                "{text:?} is not a duration like 500ms, 30s, 15m or 7d ({e})"
            ))
        }),
    }
}
