//! Another process's hold on a SQLite file's write lock: the storage outage a test can start
//! and end when it likes.

use sea_orm::{ConnectionTrait, DatabaseConnection};
use timer_service::storage::db::{DatabaseTarget, connect};

/// Another connection takes the write lock of the file and keeps it until [`release`].
pub async fn hold(db_path: &std::path::Path) -> DatabaseConnection {
    let other = connect(&DatabaseTarget::sqlite(db_path), 1).await.unwrap();
    other.execute_unprepared("BEGIN EXCLUSIVE").await.unwrap();
    other
}

pub async fn release(other: DatabaseConnection) {
    other.execute_unprepared("COMMIT").await.unwrap();
    other.close().await.unwrap();
}
