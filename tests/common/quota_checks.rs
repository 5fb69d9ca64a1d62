//! What the quota tests read back: a tenant's pending timers, whether every command was
//! handled, and the rejections published.

use std::time::Duration;

use serde_json::Value;

use super::{Scratch, TestClient, eventually};

/// Pending timers of `tenant`, read on a connection of the test's own.
pub async fn pending(scratch: &Scratch, tenant: &str) -> i64 {
    let sql = format!(
        "SELECT COUNT(*) FROM timer_schedules WHERE tenant_id = '{tenant}' AND state = 'Scheduled'"
    );
    super::query_rows(&scratch.database(), &sql, |row| {
        row.try_get_by_index::<i64>(0).expect("count")
    })
    .await[0]
}

/// Waits until the broker holds no command for the daemon: every one published so far has
/// been stored or rejected.
pub async fn all_handled(client: &TestClient) {
    eventually(Duration::from_secs(20), "every command handled", || async {
        (client.commands_outstanding().await == 0).then_some(())
    })
    .await;
}

/// The rejections published so far for `tenant`: the service call id of each refused command
/// and its reason.
pub async fn rejections(client: &TestClient, tenant: &str) -> Vec<(String, String)> {
    client
        .events(&format!("timer.evt.rejected.{tenant}"))
        .await
        .iter()
        .map(|event| {
            let payload = &event.envelope["payload"];
            let original: Value =
                serde_json::from_str(payload["original"].as_str().unwrap()).unwrap();
            (
                original["payload"]["serviceCallId"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                payload["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}
