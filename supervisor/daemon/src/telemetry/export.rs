//! The export worker: takes events off the bounded queue in batches, turns
//! each into a span and a log record, and sends both through
//! `opentelemetry-otlp`'s gRPC exporters over one tonic channel. An export
//! that fails or outlasts `export_timeout_ms` counts its events as failed;
//! nothing here ever waits on a tool call, nor a tool call on this.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _};
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::logs::{
    LogBatch, LogExporter as _, SdkLogRecord, SdkLogger, SdkLoggerProvider,
};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter as _, SpanLinks};
use sha2::{Digest as _, Sha256};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tollgate_audit::Redactor;

use super::map::{self, Clients, Item, Signal};
use super::{Stats, TelemetrySection};

/// The collector's channel, connecting lazily: nothing is dialled until
/// the first export. An `https://` endpoint is TLS, its certificate checked
/// against the system's roots and `[telemetry] ca_file`.
pub fn channel(
    cfg: &TelemetrySection,
    endpoint: &str,
) -> anyhow::Result<tonic::transport::Channel> {
    let timeout = cfg.export_timeout();
    let mut ep = tonic::transport::Endpoint::from_shared(endpoint.to_string())
        .map_err(|e| anyhow::anyhow!("[telemetry] endpoint {endpoint:?}: {e}"))?
        .connect_timeout(timeout)
        .timeout(timeout);
    if endpoint.starts_with("https://") {
        let mut tls = tonic::transport::ClientTlsConfig::new().with_native_roots();
        if let Some(ca) = &cfg.ca_file {
            let pem = std::fs::read(ca)
                .map_err(|e| anyhow::anyhow!("[telemetry] ca_file {}: {e}", ca.display()))?;
            tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
        }
        ep = ep
            .tls_config(tls)
            .map_err(|e| anyhow::anyhow!("[telemetry] endpoint {endpoint:?}: TLS: {e}"))?;
    }
    Ok(ep.connect_lazy())
}

/// The two OTLP exporters and what every export shares.
pub struct Exporters {
    spans: opentelemetry_otlp::SpanExporter,
    logs: opentelemetry_otlp::LogExporter,
    logger: SdkLogger,
    scope: InstrumentationScope,
    timeout: Duration,
}

impl Exporters {
    /// Builds both exporters on one lazily connecting channel: nothing is
    /// dialled until the first export, so an unreachable collector never
    /// delays the start.
    pub fn new(cfg: &TelemetrySection, endpoint: &str) -> anyhow::Result<Exporters> {
        let timeout = cfg.export_timeout();
        let channel = channel(cfg, endpoint)?;
        let resource = Resource::builder_empty()
            .with_service_name(cfg.service_name.clone())
            .with_attributes([KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))])
            .build();
        let mut spans = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_channel(channel.clone())
            .with_timeout(timeout)
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .build()
            .map_err(|e| anyhow::anyhow!("[telemetry] building the span exporter: {e}"))?;
        let mut logs = opentelemetry_otlp::LogExporter::builder()
            .with_tonic()
            .with_channel(channel)
            .with_timeout(timeout)
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .build()
            .map_err(|e| anyhow::anyhow!("[telemetry] building the log exporter: {e}"))?;
        opentelemetry_sdk::trace::SpanExporter::set_resource(&mut spans, &resource);
        opentelemetry_sdk::logs::LogExporter::set_resource(&mut logs, &resource);
        let scope = InstrumentationScope::builder("tollgate-supervisor")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        // A provider with no processor: only a factory for log records.
        let logger = SdkLoggerProvider::builder()
            .build()
            .logger("tollgate-supervisor");
        Ok(Exporters {
            spans,
            logs,
            logger,
            scope,
            timeout,
        })
    }

    /// Sends one batch; `Err` says why it did not arrive.
    async fn send(&self, signals: &[Signal]) -> Result<(), String> {
        let spans: Vec<SpanData> = signals.iter().map(|s| self.span(s)).collect();
        let records: Vec<SdkLogRecord> = signals.iter().map(|s| self.record(s)).collect();
        let pairs: Vec<(&SdkLogRecord, &InstrumentationScope)> =
            records.iter().map(|r| (r, &self.scope)).collect();
        let both = async {
            let (s, l) = tokio::join!(
                self.spans.export(spans),
                self.logs.export(LogBatch::new(&pairs))
            );
            s.map_err(|e| format!("spans: {e}"))?;
            l.map_err(|e| format!("logs: {e}"))
        };
        match tokio::time::timeout(self.timeout, both).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "the collector did not answer within {} ms",
                self.timeout.as_millis()
            )),
        }
    }

    fn span(&self, s: &Signal) -> SpanData {
        let (trace_id, span_id) = ids(s);
        SpanData {
            span_context: SpanContext::new(
                trace_id,
                span_id,
                TraceFlags::SAMPLED,
                false,
                TraceState::default(),
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: Cow::Borrowed(s.name),
            start_time: s.start,
            end_time: s.end,
            attributes: s.attributes.clone(),
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: match &s.error {
                Some(e) => Status::error(e.clone()),
                None => Status::Ok,
            },
            instrumentation_scope: self.scope.clone(),
        }
    }

    fn record(&self, s: &Signal) -> SdkLogRecord {
        let (trace_id, span_id) = ids(s);
        let mut r = self.logger.create_log_record();
        r.set_event_name(s.name);
        r.set_timestamp(s.end);
        r.set_observed_timestamp(SystemTime::now());
        r.set_severity_number(s.severity);
        r.set_severity_text(s.severity.name());
        r.set_body(s.body.clone().into());
        for kv in &s.attributes {
            r.add_attribute(kv.key.clone(), any_value(&kv.value));
        }
        r.set_trace_context(trace_id, span_id, Some(TraceFlags::SAMPLED));
        r
    }
}

/// A span attribute's value as a log attribute's.
fn any_value(v: &opentelemetry::Value) -> AnyValue {
    match v {
        opentelemetry::Value::Bool(b) => AnyValue::Boolean(*b),
        opentelemetry::Value::I64(i) => AnyValue::Int(*i),
        opentelemetry::Value::F64(f) => AnyValue::Double(*f),
        opentelemetry::Value::String(s) => AnyValue::String(s.clone()),
        other => AnyValue::String(other.to_string().into()),
    }
}

/// A session's signals share one trace (derived from its id); each signal
/// has its own span id, derived from its content and time.
fn ids(s: &Signal) -> (TraceId, SpanId) {
    let trace = Sha256::digest(format!("tollgate-session\0{}", s.session));
    let nanos = s
        .end
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let span = Sha256::digest(format!(
        "{}\0{}\0{nanos}\0{:?}",
        s.session, s.name, s.attributes
    ));
    let mut t = [0u8; 16];
    t.copy_from_slice(&trace[..16]);
    let mut sp = [0u8; 8];
    sp.copy_from_slice(&span[..8]);
    // All-zero ids are invalid; a hash is never zero in practice, but be sure.
    t[0] |= 1;
    sp[0] |= 1;
    (TraceId::from_bytes(t), SpanId::from_bytes(sp))
}

/// Runs until `stop`, then sends what is queued (bounded by one timeout).
pub async fn run(
    mut rx: mpsc::Receiver<Item>,
    exporters: Exporters,
    stats: Arc<Stats>,
    cfg: TelemetrySection,
    redactor: Redactor,
    stop: CancellationToken,
) {
    let mut clients = Clients::default();
    loop {
        let first = tokio::select! {
            item = rx.recv() => match item {
                Some(i) => i,
                None => break,
            },
            _ = stop.cancelled() => break,
        };
        let mut items = vec![first];
        while items.len() < cfg.batch_size {
            match rx.try_recv() {
                Ok(i) => items.push(i),
                Err(_) => break,
            }
        }
        export(&exporters, &stats, &cfg, &redactor, &mut clients, items).await;
    }
    // Shutting down: one last batch of what is queued.
    let mut rest = Vec::new();
    while let Ok(i) = rx.try_recv() {
        rest.push(i);
    }
    if !rest.is_empty() {
        export(&exporters, &stats, &cfg, &redactor, &mut clients, rest).await;
    }
}

async fn export(
    exporters: &Exporters,
    stats: &Stats,
    cfg: &TelemetrySection,
    redactor: &Redactor,
    clients: &mut Clients,
    items: Vec<Item>,
) {
    stats.dequeued(items.len());
    let mut signals = Vec::with_capacity(items.len());
    for item in &items {
        if clients.observe(item) {
            continue;
        }
        if let Some(s) = map::signal(item, clients, cfg.log_tool_details, redactor) {
            signals.push(s);
        }
        clients.forget_after(item);
    }
    if signals.is_empty() {
        return;
    }
    match exporters.send(&signals).await {
        Ok(()) => stats.exported(signals.len()),
        Err(e) => {
            if stats.failed(signals.len(), &e) {
                tracing::warn!(error = %e, events = signals.len(), "telemetry export failed; the events are counted as failed (the audit log has them)");
            }
        }
    }
}
