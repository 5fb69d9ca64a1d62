//! What `timers …` prints for people (tables, one timer's fields) and for scripts (JSON).

use serde_json::Value;

use crate::domain::api::TimerView;

pub(super) fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

pub(super) fn print_timer(timer: &TimerView) {
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    for (name, value) in [
        ("tenant", timer.tenant_id.clone()),
        ("id", timer.service_call_id.clone()),
        ("state", timer.state.clone()),
        ("due at", dash(&timer.due_at)),
        ("registered at", timer.registered_at.clone()),
        ("reached at", dash(&timer.reached_at)),
        ("cancelled at", dash(&timer.cancelled_at)),
        ("correlation id", timer.correlation_id.clone()),
        (
            "data",
            dash(&timer.data.as_ref().map(|d| d.as_str().to_owned())),
        ),
    ] {
        println!("{name:<15} {value}");
    }
}

pub(super) fn print_table(timers: &[TimerView]) {
    let header = [
        "ID",
        "STATE",
        "DUE AT",
        "REACHED/CANCELLED AT",
        "CORRELATION ID",
    ];
    let rows: Vec<[String; 5]> = timers
        .iter()
        .map(|t| {
            [
                t.service_call_id.clone(),
                t.state.clone(),
                t.due_at.clone().unwrap_or_else(|| "-".into()),
                t.reached_at
                    .clone()
                    .or_else(|| t.cancelled_at.clone())
                    .unwrap_or_else(|| "-".into()),
                t.correlation_id.clone(),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    println!("{}", line(&header.map(str::to_owned)));
    for row in &rows {
        println!("{}", line(row));
    }
    println!("({} timers)", timers.len());
}
