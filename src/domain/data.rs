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

    /// Its shape as `max_data_depth` and `max_data_number_chars` count it.
    pub fn shape(&self) -> Shape {
        Shape::of(self.as_str())
    }
}

/// How deep a JSON text nests and how long its longest number is. Any JSON parser takes such a
/// text, but common consumers do not: Python's `json` raises on a 5,000-digit integer, serde_json
/// stops at a depth of 128. One tenant's data must not break a consumer of every tenant's events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Shape {
    /// The most arrays and objects open at once (`1` for `[1]`, `0` for `1`).
    pub depth: usize,
    /// The characters of the longest number, sign and exponent included.
    pub longest_number: usize,
}

impl Shape {
    /// One pass over valid JSON text, no tree: strings are skipped (their escapes too), and a
    /// number is a run of `-+.eE` and digits that starts outside a string with `-` or a digit.
    pub fn of(json: &str) -> Self {
        let mut shape = Self::default();
        let (mut depth, mut number) = (0usize, 0usize);
        let mut bytes = json.bytes();
        while let Some(b) = bytes.next() {
            if number > 0 {
                if matches!(b, b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-') {
                    number += 1;
                    continue;
                }
                shape.longest_number = shape.longest_number.max(number);
                number = 0;
            }
            match b {
                b'[' | b'{' => {
                    depth += 1;
                    shape.depth = shape.depth.max(depth);
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                b'-' | b'0'..=b'9' => number = 1,
                b'"' => {
                    while let Some(c) = bytes.next() {
                        match c {
                            b'\\' => {
                                bytes.next();
                            }
                            b'"' => break,
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        shape.longest_number = shape.longest_number.max(number);
        shape
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
    fn shape_counts_nesting_and_number_length_outside_strings() {
        let shape = |json: &str| Shape::of(json);
        assert_eq!(
            shape("1"),
            Shape {
                depth: 0,
                longest_number: 1
            }
        );
        assert_eq!(
            shape("true"),
            Shape {
                depth: 0,
                longest_number: 0
            }
        );
        assert_eq!(
            shape("[[{}]]"),
            Shape {
                depth: 3,
                longest_number: 0
            }
        );
        assert_eq!(shape("[1,[2],[[3]]]").depth, 3);
        assert_eq!(shape(r#"{"a":-12.5e+10,"b":[7]}"#).longest_number, 9);
        // Brackets, digits and escaped quotes inside strings are text.
        assert_eq!(
            shape(r#"{"[[[": "12345678 \" [[ 99999", "k": 12}"#),
            Shape {
                depth: 1,
                longest_number: 2
            }
        );
        assert_eq!(shape(r#"["\\", [1]]"#).depth, 2);
        let deep = format!("{}{}", "[".repeat(8000), "]".repeat(8000));
        assert_eq!(shape(&deep).depth, 8000);
        assert_eq!(shape(&"9".repeat(5000)).longest_number, 5000);
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
