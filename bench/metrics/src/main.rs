//! Figure 8: what metrics cost dispatch. 1,000,000 in-memory deliveries over 8 shards through
//! the serial loop and `workers(4, by_key)` (as in `dispatch_overhead`), with the `metrics`
//! feature compiled in, in 5 rounds per mode; each round runs the mode with no recorder (every
//! metric a no-op) and then with a Prometheus recorder installed, and takes the ratio of the
//! two rates. The verdict uses the median: metrics may cost at most 5 %.
//!
//! A recorder cannot be uninstalled, so one is installed that forwards to Prometheus' only
//! while switched on; metric handles are made when a shard's settlement is, so a round's
//! handles are no-ops or real for the whole round.

use std::sync::atomic::{AtomicBool, Ordering};

use kinesis_bench::{dispatch_run, figure, rate, DISPATCH_RECORDS as RECORDS};
use kinesis_dispatch::Workers;
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusRecorder};

const ROUNDS: usize = 5;

/// Forwards to Prometheus while `on`; hands out no-op metrics otherwise.
struct Switch {
    on: AtomicBool,
    inner: PrometheusRecorder,
}

impl Recorder for Switch {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_counter(key, unit, description);
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_gauge(key, unit, description);
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, description: SharedString) {
        self.inner.describe_histogram(key, unit, description);
    }
    fn register_counter(&self, key: &Key, metadata: &Metadata<'_>) -> Counter {
        if self.on.load(Ordering::SeqCst) {
            self.inner.register_counter(key, metadata)
        } else {
            Counter::noop()
        }
    }
    fn register_gauge(&self, key: &Key, metadata: &Metadata<'_>) -> Gauge {
        if self.on.load(Ordering::SeqCst) {
            self.inner.register_gauge(key, metadata)
        } else {
            Gauge::noop()
        }
    }
    fn register_histogram(&self, key: &Key, metadata: &Metadata<'_>) -> Histogram {
        if self.on.load(Ordering::SeqCst) {
            self.inner.register_histogram(key, metadata)
        } else {
            Histogram::noop()
        }
    }
}

fn main() {
    let recorder: &'static Switch = Box::leak(Box::new(Switch {
        on: AtomicBool::new(false),
        inner: PrometheusBuilder::new().build_recorder(),
    }));
    metrics::set_global_recorder(recorder).expect("the only recorder");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        for (name, workers) in [
            ("serial", Workers::Serial),
            ("workers(4, by_key)", Workers::ByKey(4)),
        ] {
            let mut ratios = Vec::new();
            for _ in 0..ROUNDS {
                recorder.on.store(false, Ordering::SeqCst);
                let off = rate(RECORDS, dispatch_run(workers, None).await);
                recorder.on.store(true, Ordering::SeqCst);
                let on = rate(RECORDS, dispatch_run(workers, None).await);
                ratios.push(on / off);
            }
            recorder.on.store(false, Ordering::SeqCst);
            eprintln!(
                "{name}: ratios {}",
                ratios
                    .iter()
                    .map(|r| format!("{r:.3}x"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
            ratios.sort_by(f64::total_cmp);
            let (lo, mid, hi) = (ratios[0], ratios[ROUNDS / 2], ratios[ROUNDS - 1]);
            figure(
                &format!("metrics: {name}, recorder on vs none (min / median / max)"),
                &format!("{lo:.3}x / {mid:.3}x / {hi:.3}x"),
                ">= 0.95x (median)",
                Some(mid >= 0.95),
            );
        }
    });
}
