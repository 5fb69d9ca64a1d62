//! Which settings differ between two configurations: what a reload (SIGHUP) reports as taking
//! effect only at the next start. Names only, never values (some are secrets).

use serde_json::Value;

use super::Config;

impl Config {
    /// The key paths (`batch_size`, `nats.user`, `quotas.tenants`) whose values differ between
    /// `self` and `other`, in key order.
    pub fn changed_settings(&self, other: &Config) -> Vec<String> {
        let (Ok(a), Ok(b)) = (serde_json::to_value(self), serde_json::to_value(other)) else {
            return vec!["(unreadable)".into()];
        };
        let mut changed = Vec::new();
        differ("", &a, &b, &mut changed);
        changed
    }
}

/// Collects the paths under `path` where `a` and `b` differ, descending into sections (the
/// top-level tables) only: a key of a section is reported whole.
fn differ(path: &str, a: &Value, b: &Value, changed: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) if path.is_empty() => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let (x, y) = (a.get(key), b.get(key));
                match (x, y) {
                    (Some(x), Some(y)) => differ(key, x, y, changed),
                    _ => changed.push(key.clone()),
                }
            }
        }
        (Value::Object(a), Value::Object(b)) if !path.contains('.') => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                if a.get(key) != b.get(key) {
                    changed.push(format!("{path}.{key}"));
                }
            }
        }
        _ if a != b => changed.push(path.to_owned()),
        _ => {}
    }
}
