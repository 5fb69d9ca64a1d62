//! The lateness distribution of timer-service beside the broker's native scheduler, as a CDF.

use std::path::Path;

use plotters::prelude::*;

pub fn lateness_cdf(path: &Path, service: &[f64], native: &[f64]) {
    let cdf = |samples: &[f64]| {
        let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        s.sort_by(f64::total_cmp);
        let n = s.len().max(1) as f64;
        s.iter()
            .enumerate()
            .map(|(i, x)| (x.max(0.01), (i + 1) as f64 / n))
            .collect::<Vec<_>>()
    };
    let (a, b) = (cdf(service), cdf(native));
    let top = a.iter().chain(&b).map(|(x, _)| *x).fold(1.0_f64, f64::max) * 1.2;
    let root = SVGBackend::new(path, (900, 520)).into_drawing_area();
    let _ = root.fill(&WHITE);
    let Ok(mut chart) = ChartBuilder::on(&root)
        .caption("Lateness (received − dueAt), CDF", ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d((0.01_f64..top).log_scale(), 0.0_f64..1.0)
    else {
        return;
    };
    let _ = chart
        .configure_mesh()
        .x_desc("lateness, ms (log scale)")
        .y_desc("fraction of timers")
        .draw();
    for (series, label, color) in [
        (a, "timer-service", BLUE),
        (b, "NATS Nats-Schedule @at", RED),
    ] {
        if series.is_empty() {
            continue;
        }
        if let Ok(drawn) = chart.draw_series(LineSeries::new(series, color.stroke_width(2))) {
            drawn.label(label).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
    }
    let _ = chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw();
    let _ = root.present();
}
