//! Summaries: percentiles of one run, and median with min–max across runs.

/// Percentiles of a latency sample, in milliseconds.
#[derive(Debug, Clone, Default)]
pub struct Lateness {
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    /// Events received before their `dueAt` (must be zero).
    pub early: usize,
    /// Events expected but never received.
    pub missing: usize,
}

impl Lateness {
    pub fn from_samples(mut samples: Vec<f64>, expected: usize) -> Self {
        samples.sort_by(f64::total_cmp);
        let early = samples.iter().filter(|s| **s < 0.0).count();
        let pct = |p: f64| {
            if samples.is_empty() {
                f64::NAN
            } else {
                samples[((samples.len() - 1) as f64 * p).round() as usize]
            }
        };
        Self {
            p50: pct(0.50),
            p99: pct(0.99),
            p999: pct(0.999),
            max: pct(1.0),
            early,
            missing: expected.saturating_sub(samples.len()),
        }
    }
}

/// Median of several runs with the range they spanned.
#[derive(Debug, Clone, Copy)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Self {
        let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
        if v.is_empty() {
            return Self {
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            };
        }
        v.sort_by(f64::total_cmp);
        let median = if v.len() % 2 == 1 {
            v[v.len() / 2]
        } else {
            (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
        };
        Self {
            median,
            min: v[0],
            max: v[v.len() - 1],
        }
    }

    /// `median (min–max)` with `decimals` digits.
    pub fn show(&self, decimals: usize) -> String {
        if !self.median.is_finite() {
            return "n/a".into();
        }
        format!(
            "{:.d$} ({:.d$}–{:.d$})",
            self.median,
            self.min,
            self.max,
            d = decimals
        )
    }
}
