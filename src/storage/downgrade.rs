//! `timer-service migrate --to NAME`: undoes the migrations applied after `NAME`, newest first,
//! so that an earlier release, which refuses a database migrated past it (it names the
//! migration it does not know and exits 1), can run on it again (docs/operations.md,
//! "Rollback"). What those migrations added goes with them: a column's values (a timer's
//! `data`, its trace context), a table's rows (the quota windows, the refusals recorded).
//! Run it with no daemon of this release on the database.

use migration::{Migrator, MigratorTrait};

use super::db::{DatabaseTarget, connect};

#[derive(Debug, thiserror::Error)]
pub enum DowngradeError {
    #[error("no migration is named {name:?}; this release knows: {known}")]
    Unknown { name: String, known: String },
    #[error(transparent)]
    Database(#[from] sea_orm::DbErr),
}

/// Undoes every applied migration that comes after `name`; returns their names, newest first.
pub async fn migrate_down_to(
    target: &DatabaseTarget,
    name: &str,
) -> Result<Vec<String>, DowngradeError> {
    let known: Vec<String> = Migrator::migrations()
        .iter()
        .map(|m| m.name().to_owned())
        .collect();
    let Some(keep) = known.iter().position(|n| n == name) else {
        return Err(DowngradeError::Unknown {
            name: name.to_owned(),
            known: known.join(", "),
        });
    };
    let db = connect(target, 1).await?;
    let mut undone: Vec<String> = Migrator::get_applied_migrations(&db)
        .await?
        .iter()
        .map(|m| m.name().to_owned())
        .filter(|applied| known.iter().position(|k| k == applied) > Some(keep))
        .collect();
    undone.reverse();
    if !undone.is_empty() {
        let steps = u32::try_from(undone.len()).unwrap_or(u32::MAX);
        Migrator::down(&db, Some(steps)).await?;
    }
    db.close().await?;
    Ok(undone)
}
