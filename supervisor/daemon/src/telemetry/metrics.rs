//! OTLP metrics: every `[telemetry] metrics_interval_s`, the numbers
//! `supervisorctl status` shows (`tollgate_proto::metrics`, the same list
//! `status --prometheus` prints) are sent to the collector as cumulative
//! sums (counters) and gauges, and once more when the supervisor stops
//! (docs/OPERATIONS.md "Metrics"). A failed export is logged at debug and
//! tried at the next tick; it never holds anything else up.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use tollgate_proto::metrics as named;
use tollgate_proto::v1 as pb;

use crate::supervisor::Supervisor;

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.to_string())),
        }),
        ..Default::default()
    }
}

/// One named metric as OTLP: a counter's `_total` is dropped from its name
/// (a Prometheus exporter adds it back to a monotonic sum).
fn metric(m: &named::Metric, (start, now): (u64, u64)) -> Metric {
    let points = m
        .samples
        .iter()
        .map(|(labels, v)| NumberDataPoint {
            attributes: labels.iter().map(|(k, v)| kv(k, v)).collect(),
            start_time_unix_nano: start,
            time_unix_nano: now,
            value: Some(number_data_point::Value::AsInt(*v as i64)),
            ..Default::default()
        })
        .collect();
    let (name, data) = if m.kind == "counter" {
        let sum = Sum {
            data_points: points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: true,
        };
        (m.name.trim_end_matches("_total"), metric::Data::Sum(sum))
    } else {
        let gauge = Gauge {
            data_points: points,
        };
        (m.name, metric::Data::Gauge(gauge))
    };
    Metric {
        name: name.to_string(),
        description: m.help.to_string(),
        data: Some(data),
        ..Default::default()
    }
}

/// The export request for `status`.
pub fn request(
    status: &pb::StatusResponse,
    service: &str,
    started: SystemTime,
) -> ExportMetricsServiceRequest {
    let times = (nanos(started), nanos(SystemTime::now()));
    let metrics = named::of_status(status)
        .iter()
        .map(|m| metric(m, times))
        .collect();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", service),
                    kv("service.version", env!("CARGO_PKG_VERSION")),
                ],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "tollgate-supervisor".to_string(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Starts the export when `[telemetry]` has an endpoint and a non-zero
/// `metrics_interval_s`.
pub fn spawn(sup: &Arc<Supervisor>) {
    let cfg = &sup.config.telemetry;
    let (Some(endpoint), interval) = (cfg.endpoint.clone(), cfg.metrics_interval_s) else {
        return;
    };
    if interval == 0 {
        return;
    }
    let Ok(ep) = tonic::transport::Endpoint::from_shared(endpoint) else {
        return;
    };
    let timeout = cfg.export_timeout();
    let channel = ep.connect_timeout(timeout).timeout(timeout).connect_lazy();
    let sup = Arc::clone(sup);
    let started = SystemTime::now() - sup.started.elapsed();
    tokio::spawn(async move {
        let mut client = MetricsServiceClient::new(channel);
        let mut tick = tokio::time::interval(Duration::from_secs(interval));
        tick.tick().await;
        loop {
            let last = tokio::select! {
                _ = tick.tick() => false,
                _ = sup.shutdown.cancelled() => true,
            };
            let strength = sup.backends.primary().strength();
            let status = crate::operator_service::status_of(&sup, &strength);
            let req = request(&status, &sup.config.telemetry.service_name, started);
            let sent = tokio::time::timeout(timeout, client.export(req)).await;
            if !matches!(sent, Ok(Ok(_))) {
                tracing::debug!(
                    ?sent,
                    "the metrics export did not arrive; next tick tries again"
                );
            }
            if last {
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_become_cumulative_sums_and_the_rest_gauges() {
        let status = pb::StatusResponse {
            sessions_active: 2,
            records: Some(pb::RecordCounts {
                decisions_deny: 4,
                ..Default::default()
            }),
            ..Default::default()
        };
        let req = request(&status, "tollgate", SystemTime::UNIX_EPOCH);
        let metrics = &req.resource_metrics[0].scope_metrics[0].metrics;
        let find = |n: &str| metrics.iter().find(|m| m.name == n).unwrap();
        let Some(metric::Data::Sum(sum)) = &find("tollgate_decisions").data else {
            panic!("not a sum")
        };
        assert!(sum.is_monotonic);
        let deny = sum
            .data_points
            .iter()
            .find(|p| {
                p.attributes[0].value
                    == Some(AnyValue {
                        value: Some(any_value::Value::StringValue("deny".into())),
                    })
            })
            .unwrap();
        assert_eq!(deny.value, Some(number_data_point::Value::AsInt(4)));
        let Some(metric::Data::Gauge(g)) = &find("tollgate_sessions_active").data else {
            panic!("not a gauge")
        };
        assert_eq!(
            g.data_points[0].value,
            Some(number_data_point::Value::AsInt(2))
        );
    }
}
