//! The `data` section: ingest and fire at the default configuration, with no data and with
//! `--data-bytes` of data per timer, one after the other in each run (SQLite, and PostgreSQL with
//! one daemon when `--database` is given).

use std::time::Duration;

use super::Ctx;
use crate::Figures;
use crate::workloads::{self, data_of};
use crate::world::Backend;

/// How far ahead the fired timers are due: long enough to fill a database with data first.
const FIRE_LEAD: Duration = Duration::from_secs(20);

pub(super) async fn data(ctx: &Ctx<'_>, f: &mut Figures) {
    let args = ctx.args;
    let payload = data_of(args.data_bytes);
    for backend in ctx.stores() {
        let tag = backend.tag();
        for (label, data) in [("none", None), ("data", Some(&*payload))] {
            eprintln!("data ({}, {label}): ingest and fire", backend.label());
            let daemons = [ctx.default("d")];
            let w = ctx
                .world(&format!("data-ingest-{tag}-{label}"), backend, None)
                .await;
            let carried = workloads::Carried {
                data,
                traced: false,
            };
            let ingest = workloads::ingest_with(&w, args.ingest_n, &daemons, carried).await;
            f.run(&format!("data.ingest.{tag}.{label}"), ingest);
            size(f, &w, &format!("data.mb.{tag}.{label}"), backend).await;
            drop(w);
            let w = ctx
                .world(&format!("data-fire-{tag}-{label}"), backend, None)
                .await;
            let fire = workloads::fire_with(&w, args.fire_n, &daemons, carried, FIRE_LEAD).await;
            f.run(&format!("data.fire.{tag}.{label}"), fire);
        }
    }
}

/// The database's size after the ingest, MB.
async fn size(f: &mut Figures, w: &crate::world::World, key: &str, backend: &Backend) {
    let observer = w.observer().await;
    let bytes =
        match backend {
            Backend::Sqlite => observer
                .count("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()")
                .await,
            Backend::Postgres { .. } => {
                observer
                    .count("SELECT pg_total_relation_size('timer_schedules')")
                    .await
            }
        };
    observer.close().await;
    f.rate(key, bytes as f64 / 1e6);
}
