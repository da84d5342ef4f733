//! Rows of the result table: samples reduced to a median and a p99, a
//! baseline to compare with, a target and whether it was met.

use std::time::Duration;

use serde::Serialize;

/// What a row's numbers are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    /// Latency; values are nanoseconds.
    Nanos,
    /// Throughput; values are operations per second.
    PerSecond,
    /// Memory; values are MiB.
    Mib,
    /// Throughput of bytes; values are MiB per second.
    MibPerSecond,
    /// A count (open descriptors).
    Count,
}

/// What a row promises, from the issue that set it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Target {
    /// median ≤ this many nanoseconds.
    MedianAtMostNanos { value: f64, issue: u32 },
    /// p99 ≤ this many nanoseconds (for "within", not "typically").
    P99AtMostNanos { value: f64, issue: u32 },
    /// median ≤ factor × the baseline's median.
    RatioAtMost { factor: f64, issue: u32 },
    /// value ≥ this many per second.
    AtLeastPerSecond { value: f64, issue: u32 },
    /// value ≤ this many MiB.
    AtMostMib { value: f64, issue: u32 },
    /// median − the baseline's median ≤ this many nanoseconds (what a
    /// layer adds).
    AddedAtMostNanos { value: f64, issue: u32 },
    /// median ≥ factor × the baseline's median (throughput).
    AtLeastRatio { factor: f64, issue: u32 },
}

impl Target {
    pub fn describe(&self) -> String {
        match self {
            Target::MedianAtMostNanos { value, issue } => {
                format!("≤ {} (#{issue})", fmt_nanos(*value))
            }
            Target::P99AtMostNanos { value, issue } => {
                format!("p99 ≤ {} (#{issue})", fmt_nanos(*value))
            }
            Target::RatioAtMost { factor, issue } => format!("≤ {factor}× base (#{issue})"),
            Target::AtLeastPerSecond { value, issue } => {
                format!("≥ {}/s (#{issue})", fmt_count(*value))
            }
            Target::AtMostMib { value, issue } => format!("≤ {value} MiB (#{issue})"),
            Target::AddedAtMostNanos { value, issue } => {
                format!("≤ base + {} (#{issue})", fmt_nanos(*value))
            }
            Target::AtLeastRatio { factor, issue } => format!("≥ {factor}× base (#{issue})"),
        }
    }
}

/// Whether a row could be measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", content = "reason", rename_all = "snake_case")]
pub enum Status {
    Measured,
    /// A baseline tool (or the engine, the image) is not installed here.
    Missing(String),
    /// It should have worked and did not; the reason says what failed.
    Failed(String),
}

/// One line of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Stable key for scripts (`native.run_bash_true`).
    pub id: String,
    /// What a person reads.
    pub name: String,
    pub unit: Unit,
    pub samples: usize,
    pub median: Option<f64>,
    pub p99: Option<f64>,
    /// The `id` of the row this one is compared with.
    pub baseline: Option<String>,
    /// median / the baseline's median.
    pub ratio: Option<f64>,
    pub target: Option<Target>,
    /// None when there is no target, or it cannot be judged (a missing
    /// baseline, a failed measurement).
    pub met: Option<bool>,
    pub status: Status,
    /// How it was measured, when the name alone does not say.
    pub note: String,
}

impl Row {
    fn empty(id: &str, name: &str, unit: Unit, status: Status) -> Row {
        Row {
            id: id.to_string(),
            name: name.to_string(),
            unit,
            samples: 0,
            median: None,
            p99: None,
            baseline: None,
            ratio: None,
            target: None,
            met: None,
            status,
            note: String::new(),
        }
    }

    /// A latency row from samples.
    pub fn latency(id: &str, name: &str, samples: &[Duration]) -> Row {
        let mut ns: Vec<f64> = samples.iter().map(|d| d.as_nanos() as f64).collect();
        ns.sort_by(f64::total_cmp);
        let mut r = Row::empty(id, name, Unit::Nanos, Status::Measured);
        r.samples = ns.len();
        r.median = percentile(&ns, 0.50);
        r.p99 = percentile(&ns, 0.99);
        r
    }

    /// A latency row from signed differences in nanoseconds (cold − warm).
    pub fn latency_ns(id: &str, name: &str, ns: &[f64]) -> Row {
        let mut ns = ns.to_vec();
        ns.sort_by(f64::total_cmp);
        let mut r = Row::empty(id, name, Unit::Nanos, Status::Measured);
        r.samples = ns.len();
        r.median = percentile(&ns, 0.50);
        r.p99 = percentile(&ns, 0.99);
        r
    }

    /// A single value (throughput or memory); `samples` says what it covers.
    pub fn value(id: &str, name: &str, unit: Unit, value: f64, samples: usize) -> Row {
        let mut r = Row::empty(id, name, unit, Status::Measured);
        r.samples = samples;
        r.median = Some(value);
        r
    }

    pub fn missing(id: &str, name: &str, unit: Unit, reason: impl Into<String>) -> Row {
        Row::empty(id, name, unit, Status::Missing(reason.into()))
    }

    pub fn failed(id: &str, name: &str, unit: Unit, reason: impl Into<String>) -> Row {
        Row::empty(id, name, unit, Status::Failed(reason.into()))
    }

    pub fn with_target(mut self, t: Target) -> Row {
        self.target = Some(t);
        self
    }

    pub fn with_baseline(mut self, id: &str) -> Row {
        self.baseline = Some(id.to_string());
        self
    }

    pub fn with_note(mut self, note: impl Into<String>) -> Row {
        self.note = note.into();
        self
    }
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Fills in ratios and verdicts once every row is known.
pub fn judge(rows: &mut [Row]) {
    let medians: Vec<(String, Option<f64>)> =
        rows.iter().map(|r| (r.id.clone(), r.median)).collect();
    for r in rows.iter_mut() {
        let base = r
            .baseline
            .as_ref()
            .and_then(|b| medians.iter().find(|(id, _)| id == b).and_then(|(_, m)| *m));
        r.ratio = match (r.median, base) {
            (Some(m), Some(b)) if b > 0.0 => Some(m / b),
            _ => None,
        };
        r.met = match (&r.target, r.median) {
            (None, _) | (_, None) => None,
            (Some(t), Some(m)) => match t {
                Target::MedianAtMostNanos { value, .. } => Some(m <= *value),
                Target::P99AtMostNanos { value, .. } => r.p99.map(|p| p <= *value),
                Target::RatioAtMost { factor, .. } => r.ratio.map(|q| q <= *factor),
                Target::AtLeastPerSecond { value, .. } => Some(m >= *value),
                Target::AtMostMib { value, .. } => Some(m <= *value),
                Target::AddedAtMostNanos { value, .. } => base.map(|b| m - b <= *value),
                Target::AtLeastRatio { factor, .. } => r.ratio.map(|q| q >= *factor),
            },
        };
    }
}

pub fn fmt_nanos(ns: f64) -> String {
    let a = ns.abs();
    if a < 1_000.0 {
        format!("{ns:.0} ns")
    } else if a < 1_000_000.0 {
        format!("{:.1} µs", ns / 1_000.0)
    } else if a < 1_000_000_000.0 {
        format!("{:.2} ms", ns / 1_000_000.0)
    } else {
        format!("{:.2} s", ns / 1_000_000_000.0)
    }
}

pub fn fmt_count(v: f64) -> String {
    if v >= 100_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 10_000.0 {
        format!("{:.1}k", v / 1000.0)
    } else {
        format!("{v:.0}")
    }
}

/// A value in the row's unit.
pub fn fmt_value(unit: Unit, v: f64) -> String {
    match unit {
        Unit::Nanos => fmt_nanos(v),
        Unit::PerSecond => format!("{}/s", fmt_count(v)),
        Unit::Mib => format!("{v:.1} MiB"),
        Unit::MibPerSecond => format!("{v:.0} MiB/s"),
        Unit::Count => format!("{v:.0}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Some(100.0));
        assert_eq!(percentile(&v, 0.99), Some(198.0));
        assert_eq!(percentile(&[7.0], 0.99), Some(7.0));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn ratios_and_verdicts() {
        let ms = Duration::from_millis;
        let mut rows = vec![
            Row::latency("base", "base", &[ms(10), ms(10), ms(10)]),
            Row::latency("ours", "ours", &[ms(5), ms(5), ms(5)])
                .with_baseline("base")
                .with_target(Target::RatioAtMost {
                    factor: 0.6,
                    issue: 4,
                }),
            Row::latency("slow", "slow", &[ms(3)]).with_target(Target::MedianAtMostNanos {
                value: 2e6,
                issue: 2,
            }),
            Row::missing("gone", "gone", Unit::Nanos, "not installed"),
            Row::latency("orphan", "orphan", &[ms(1)])
                .with_baseline("gone")
                .with_target(Target::RatioAtMost {
                    factor: 1.0,
                    issue: 8,
                }),
        ];
        judge(&mut rows);
        assert_eq!(rows[1].ratio, Some(0.5));
        assert_eq!(rows[1].met, Some(true));
        assert_eq!(rows[2].met, Some(false));
        assert_eq!(rows[3].met, None);
        // A missing baseline leaves the verdict open, never "met".
        assert_eq!(rows[4].ratio, None);
        assert_eq!(rows[4].met, None);
    }

    #[test]
    fn human_units() {
        assert_eq!(fmt_nanos(850.0), "850 ns");
        assert_eq!(fmt_nanos(123_456.0), "123.5 µs");
        assert_eq!(fmt_nanos(2_500_000.0), "2.50 ms");
        assert_eq!(fmt_value(Unit::PerSecond, 23_456.0), "23.5k/s");
        assert_eq!(fmt_value(Unit::Mib, 12.34), "12.3 MiB");
    }
}
