//! The `backup` section (SQLite): a database of `--backup-n` pending timers, a steady load
//! without backups and with backups taken back to back; then a plain writer's commit times
//! alone and beside backups.

use super::Ctx;
use crate::Figures;
use crate::stats::Lateness;
use crate::workloads::{self, Load};

/// Seconds of each of the writer's two spells.
const WRITER_SECS: u64 = 5;

pub(super) async fn backup(ctx: &Ctx<'_>, f: &mut Figures) {
    let n = ctx.args.backup_n;
    let base = ctx.sqlite.pending_base(ctx.cache, n).await;
    let (rate, secs, lead) = (ctx.first_rate(), ctx.args.secs, ctx.lead());
    eprintln!("backup: {rate}/s with {n} pending, without backups");
    let w = ctx.world("backup-none", &ctx.sqlite, Some(&base)).await;
    let plain =
        workloads::lateness(&w, rate, secs, lead, &[ctx.default("d")], Load::default()).await;
    f.late("backup.none", plain);
    drop(w);

    eprintln!("backup: {rate}/s with {n} pending, backups back to back");
    let w = ctx.world("backup-running", &ctx.sqlite, Some(&base)).await;
    let run = workloads::backups_under_load(&w, rate, secs, lead, &ctx.default("d")).await;
    f.late("backup.running", run.lateness);
    f.rate("backup.count", run.backups.len() as f64);
    for taken in &run.backups {
        f.rate("backup.copy_s", taken.copy_s);
        f.rate("backup.total_s", taken.total_s);
        f.rate("backup.mb", taken.mb);
    }
    drop(w);

    eprintln!("backup: a writer's commits alone and beside backups");
    let w = ctx.world("backup-writer", &ctx.sqlite, Some(&base)).await;
    let (alone, beside) = workloads::writer_beside_backups(&w.database, &w.dir, WRITER_SECS).await;
    for (key, times) in [
        ("backup.writer.alone", alone),
        ("backup.writer.beside", beside),
    ] {
        f.rate(format!("{key}.commits"), times.len() as f64);
        f.lateness
            .entry(key.into())
            .or_default()
            .push(Lateness::from_samples(times, 0));
    }
}
