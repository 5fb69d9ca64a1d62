//! A timer's optional `data` (docs/CONTRACT.md §3): any JSON value a client hands over with a
//! ScheduleTimer, stored with the timer and echoed in its DueTimeReached, byte for byte.
//!
//! It is kept as the JSON text the client wrote, never as a tree: checked where it enters (the
//! command's payload, a stored row: a scan of the text), then carried and written out as it is,
//! so the firing path never decodes it into values nor encodes it again.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;

/// Valid JSON text, shared cheaply between the copies of a timer (claims, batches, events).
#[derive(Clone)]
pub struct TimerData(Arc<RawValue>);

impl TimerData {
    /// The data as stored text, from the text a row holds; `Err` when it is not JSON.
    pub fn from_stored(text: String) -> Result<Self, String> {
        RawValue::from_string(text)
            .map(|raw| Self(Arc::from(raw)))
            .map_err(|e| format!("data is not JSON: {e}"))
    }

    /// The JSON text, as the client wrote it (without surrounding blanks).
    pub fn as_str(&self) -> &str {
        self.0.get()
    }

    /// Its size in bytes, as `max_data_bytes` counts it.
    pub fn len(&self) -> usize {
        self.as_str().len()
    }

    pub fn is_empty(&self) -> bool {
        self.as_str().is_empty()
    }
}

impl PartialEq for TimerData {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for TimerData {}

impl std::fmt::Debug for TimerData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Written out as the JSON it is (serde_json writes a `RawValue` verbatim).
impl Serialize for TimerData {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// Read as any JSON value, kept as its text. A JSON `null` where data is optional reads as no
/// data (serde's `Option`), so `"data": null` and no `data` are one thing.
impl<'de> Deserialize<'de> for TimerData {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Box::<RawValue>::deserialize(deserializer).map(|raw| Self(Arc::from(raw)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Holder {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<TimerData>,
    }

    #[test]
    fn data_travels_as_the_text_the_client_wrote() {
        let json = r#"{"data": {"b": [1, 2.50, "x"], "a": null}}"#;
        let holder: Holder = serde_json::from_str(json).unwrap();
        let data = holder.data.clone().unwrap();
        assert_eq!(data.as_str(), r#"{"b": [1, 2.50, "x"], "a": null}"#);
        assert_eq!(data.len(), r#"{"b": [1, 2.50, "x"], "a": null}"#.len());
        assert_eq!(
            serde_json::to_string(&holder).unwrap(),
            r#"{"data":{"b": [1, 2.50, "x"], "a": null}}"#
        );
        for scalar in ["\"text\"", "42", "true", "[]"] {
            let holder: Holder = serde_json::from_str(&format!(r#"{{"data":{scalar}}}"#)).unwrap();
            assert_eq!(holder.data.unwrap().as_str(), scalar);
        }
    }

    #[test]
    fn null_or_absent_is_no_data() {
        let absent: Holder = serde_json::from_str("{}").unwrap();
        let null: Holder = serde_json::from_str(r#"{"data": null}"#).unwrap();
        assert_eq!((absent.data, null.data), (None, None));
        assert_eq!(serde_json::to_string(&Holder { data: None }).unwrap(), "{}");
    }

    #[test]
    fn stored_text_is_checked() {
        assert_eq!(
            TimerData::from_stored(r#"{"a":1}"#.into())
                .unwrap()
                .as_str(),
            r#"{"a":1}"#
        );
        assert!(TimerData::from_stored("{not json".into()).is_err());
    }
}
