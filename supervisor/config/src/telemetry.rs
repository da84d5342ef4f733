//! `[telemetry]`: where to export, how much to hold, what to include.

use std::time::Duration;

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetrySection {
    /// OTLP/gRPC collector, e.g. `http://127.0.0.1:4317`. Absent: no export.
    pub endpoint: Option<String>,
    /// Include tool arguments, targets, consequences, reasons and output
    /// excerpts (redacted as the audit log is). Off: only names, verdicts,
    /// codes, rules, durations and sizes leave the host.
    pub log_tool_details: bool,
    /// Events held for export; past this they are dropped and counted.
    pub queue_size: usize,
    /// Events sent per export request.
    pub batch_size: usize,
    /// One export (connect included) gives up after this long; its events
    /// are counted as failed.
    pub export_timeout_ms: u64,
    /// `service.name` of the exported resource.
    pub service_name: String,
    /// Seconds between OTLP metrics exports (the counters `status` shows);
    /// 0: no metrics.
    pub metrics_interval_s: u64,
}

impl Default for TelemetrySection {
    fn default() -> Self {
        TelemetrySection {
            endpoint: None,
            log_tool_details: false,
            queue_size: 4096,
            batch_size: 256,
            export_timeout_ms: 5000,
            service_name: "tollgate".to_string(),
            metrics_interval_s: 60,
        }
    }
}

impl TelemetrySection {
    /// Whether export is on.
    pub fn enabled(&self) -> bool {
        self.endpoint.is_some()
    }

    pub fn export_timeout(&self) -> Duration {
        Duration::from_millis(self.export_timeout_ms)
    }

    /// Checks the section at load: a garbage endpoint stops the start.
    pub fn check(&self) -> Result<(), String> {
        if let Some(endpoint) = &self.endpoint {
            check_endpoint(endpoint)?;
        }
        if self.queue_size == 0 || self.queue_size > 1_000_000 {
            return Err(format!(
                "[telemetry] queue_size {} must be between 1 and 1000000",
                self.queue_size
            ));
        }
        if self.batch_size == 0 || self.batch_size > self.queue_size {
            return Err(format!(
                "[telemetry] batch_size {} must be between 1 and queue_size ({})",
                self.batch_size, self.queue_size
            ));
        }
        if self.export_timeout_ms == 0 || self.export_timeout_ms > 60_000 {
            return Err(format!(
                "[telemetry] export_timeout_ms {} must be between 1 and 60000",
                self.export_timeout_ms
            ));
        }
        if self.service_name.trim().is_empty() {
            return Err("[telemetry] service_name must not be empty".to_string());
        }
        Ok(())
    }
}

/// An OTLP/gRPC endpoint: `http://HOST:PORT`, nothing else.
fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let hint = "expected an OTLP/gRPC collector such as \"http://127.0.0.1:4317\"";
    let url = url::Url::parse(endpoint)
        .map_err(|e| format!("[telemetry] endpoint {endpoint:?} is not a URL ({e}); {hint}"))?;
    match url.scheme() {
        "http" => {}
        "https" => {
            return Err(format!(
                "[telemetry] endpoint {endpoint:?}: https is not built in; send to a collector on this host (\"http://127.0.0.1:4317\") and let it forward over TLS"
            ));
        }
        other => {
            return Err(format!(
                "[telemetry] endpoint {endpoint:?} has scheme {other:?}; {hint}"
            ));
        }
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!(
            "[telemetry] endpoint {endpoint:?} names no host; {hint}"
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "[telemetry] endpoint {endpoint:?} carries credentials; remove them (they would be shown in status)"
        ));
    }
    if !(url.path().is_empty() || url.path() == "/") || url.query().is_some() {
        return Err(format!(
            "[telemetry] endpoint {endpoint:?} has a path or query; gRPC needs none ({hint})"
        ));
    }
    // What the exporter's gRPC transport will be given must parse as its
    // URI too (tonic's `Endpoint::from_shared` is this parse).
    endpoint
        .parse::<http::Uri>()
        .map_err(|e| format!("[telemetry] endpoint {endpoint:?}: {e}; {hint}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(endpoint: &str) -> TelemetrySection {
        TelemetrySection {
            endpoint: Some(endpoint.to_string()),
            ..TelemetrySection::default()
        }
    }

    #[test]
    fn off_by_default() {
        let t = TelemetrySection::default();
        assert!(!t.enabled());
        assert!(!t.log_tool_details);
        assert_eq!(t.check(), Ok(()));
    }

    #[test]
    fn plain_grpc_endpoints_are_accepted() {
        for e in [
            "http://127.0.0.1:4317",
            "http://localhost:4317/",
            "http://[::1]:4317",
            "http://collector.internal:4317",
        ] {
            assert_eq!(with(e).check(), Ok(()), "{e}");
        }
    }

    #[test]
    fn garbage_endpoints_are_refused_with_the_reason() {
        let cases = [
            ("not a url", "is not a URL"),
            ("127.0.0.1:4317", "is not a URL"),
            ("collector:4317", "scheme \"collector\""),
            ("ftp://127.0.0.1:4317", "scheme \"ftp\""),
            ("https://collector:4317", "https is not built in"),
            ("http://user:pw@collector:4317", "carries credentials"),
            ("http://collector:4317/v1/traces", "has a path or query"),
            ("http://:4317", "not a URL"),
            ("", "is not a URL"),
        ];
        for (endpoint, want) in cases {
            let err = with(endpoint).check().unwrap_err();
            assert!(err.contains(want), "{endpoint:?}: {err}");
            assert!(err.starts_with("[telemetry] endpoint"), "{err}");
        }
    }

    #[test]
    fn sizes_are_bounded() {
        let t = TelemetrySection {
            queue_size: 0,
            ..TelemetrySection::default()
        };
        assert!(t.check().unwrap_err().contains("queue_size"));
        let t = TelemetrySection {
            batch_size: 5000,
            ..TelemetrySection::default()
        };
        assert!(t.check().unwrap_err().contains("batch_size"));
        let t = TelemetrySection {
            export_timeout_ms: 0,
            ..TelemetrySection::default()
        };
        assert!(t.check().unwrap_err().contains("export_timeout_ms"));
    }
}
