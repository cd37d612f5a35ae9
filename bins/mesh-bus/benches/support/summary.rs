//! Percentiles of a benchmark's samples, shared by the mesh-bus benchmarks.

use std::time::Duration;

/// p50, p90, p99 and the mean of some samples.
#[derive(Clone, Copy)]
pub struct Summary {
    /// The median.
    pub p50: Duration,
    /// The 90th percentile.
    pub p90: Duration,
    /// The 99th percentile.
    pub p99: Duration,
    /// The mean.
    pub mean: Duration,
}

/// The summary of `samples` (at least one).
pub fn summarize(mut samples: Vec<Duration>) -> Summary {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    Summary {
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        mean: samples.iter().sum::<Duration>() / samples.len() as u32,
    }
}
