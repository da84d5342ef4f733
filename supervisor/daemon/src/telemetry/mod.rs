//! OpenTelemetry export of audit events (`[telemetry]`, off by default).
//!
//! The recorder offers each audit event it has written to a [`Sink`]: a
//! `try_send` into a bounded queue, so a tool call never waits for the
//! collector. When the queue is full the event is dropped and counted. A
//! worker task ([`export::run`]) maps each event to a span and a log record
//! ([`map::signal`], the one place that knows the mapping) and sends them
//! over OTLP/gRPC. The JSONL audit log stays the source of truth; what
//! telemetry lost is counted (`supervisorctl status`), never hidden.

pub mod export;
pub mod map;
pub mod metrics;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_audit::Redactor;
use tollgate_proto::v1 as pb;

pub use tollgate_config::TelemetrySection;

use map::Item;
use tollgate_audit::Event;

/// What telemetry did, for `supervisorctl status`.
#[derive(Debug, Default)]
pub struct Stats {
    queued: AtomicU64,
    exported: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    failed_batches: AtomicU64,
    last_error: parking_lot::Mutex<String>,
}

impl Stats {
    fn dequeued(&self, n: usize) {
        self.queued.fetch_sub(n as u64, Ordering::Relaxed);
    }

    fn exported(&self, n: usize) {
        self.exported.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Counts a failed export; true when it is worth a log line (the first
    /// failure, a new kind of error, then every 100th).
    fn failed(&self, n: usize, error: &str) -> bool {
        self.failed.fetch_add(n as u64, Ordering::Relaxed);
        let batches = self.failed_batches.fetch_add(1, Ordering::Relaxed) + 1;
        let mut last = self.last_error.lock();
        let new = *last != error;
        if new {
            *last = error.to_string();
        }
        new || batches.is_multiple_of(100)
    }
}

/// The recorder's end of the queue. Cloning is cheap.
#[derive(Clone)]
pub struct Sink {
    tx: mpsc::Sender<Item>,
    stats: Arc<Stats>,
    endpoint: String,
    queue_size: usize,
    details: bool,
}

impl Sink {
    /// Whether an event is one telemetry looks at (so the caller hands it
    /// over only then).
    pub fn wants(&self, event: &Event) -> bool {
        map::wanted(event)
    }

    /// Queues an event written to the audit log; never waits. A full queue
    /// drops it and counts the drop.
    pub fn offer(&self, session: &str, event: Event) {
        if !map::wanted(&event) {
            return;
        }
        let item = Item {
            ts: SystemTime::now(),
            session: session.to_string(),
            event,
        };
        // Counted before the send, so the worker's decrement never runs first.
        self.stats.queued.fetch_add(1, Ordering::Relaxed);
        if self.tx.try_send(item).is_err() {
            self.stats.queued.fetch_sub(1, Ordering::Relaxed);
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A snapshot for `Status`.
    pub fn status(&self) -> pb::TelemetryStatus {
        let s = &self.stats;
        pb::TelemetryStatus {
            enabled: true,
            endpoint: self.endpoint.clone(),
            queued: s.queued.load(Ordering::Relaxed),
            queue_size: self.queue_size as u64,
            exported: s.exported.load(Ordering::Relaxed),
            dropped: s.dropped.load(Ordering::Relaxed),
            failed: s.failed.load(Ordering::Relaxed),
            last_error: s.last_error.lock().clone(),
            log_tool_details: self.details,
        }
    }
}

/// The running export worker.
pub struct Worker {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Worker {
    /// Stops the worker after one last export of what is queued, waiting at
    /// most `limit`.
    pub async fn finish(self, limit: Duration) {
        self.stop.cancel();
        if tokio::time::timeout(limit, self.task).await.is_err() {
            tracing::warn!(
                "telemetry: the last export did not finish in time; its events are lost (the audit log has them)"
            );
        }
    }
}

/// Starts export when `[telemetry] endpoint` is set; `None` when it is off.
pub fn start(cfg: &TelemetrySection, redactor: Redactor) -> anyhow::Result<Option<(Sink, Worker)>> {
    let Some(endpoint) = cfg.endpoint.clone() else {
        return Ok(None);
    };
    let exporters = export::Exporters::new(cfg, &endpoint)?;
    let (tx, rx) = mpsc::channel(cfg.queue_size);
    let stats = Arc::new(Stats::default());
    let stop = CancellationToken::new();
    let task = tokio::spawn(export::run(
        rx,
        exporters,
        Arc::clone(&stats),
        cfg.clone(),
        redactor,
        stop.clone(),
    ));
    tracing::info!(%endpoint, "telemetry: exporting audit events over OTLP/gRPC");
    Ok(Some((
        Sink {
            tx,
            stats,
            endpoint,
            queue_size: cfg.queue_size,
            details: cfg.log_tool_details,
        },
        Worker { stop, task },
    )))
}
