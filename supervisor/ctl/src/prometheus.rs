//! `status --prometheus`: what `status` shows, as Prometheus text
//! exposition (version 0.0.4), for a node exporter's textfile collector or
//! a scrape through a small wrapper (docs/OPERATIONS.md "Metrics").

use std::fmt::Write as _;

use tollgate_proto::v1 as pb;

/// A label value with `\`, `"` and newlines escaped.
fn label_value(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The exposition text.
pub fn render(s: &pb::StatusResponse) -> String {
    let mut out = String::new();
    for m in tollgate_proto::metrics::of_status(s) {
        let _ = writeln!(out, "# HELP {} {}", m.name, m.help);
        let _ = writeln!(out, "# TYPE {} {}", m.name, m.kind);
        for (labels, v) in m.samples {
            let labels = if labels.is_empty() {
                String::new()
            } else {
                let pairs: Vec<String> = labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", label_value(v)))
                    .collect();
                format!("{{{}}}", pairs.join(","))
            };
            let _ = writeln!(out, "{}{labels} {v}", m.name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_follows_its_help_and_type_and_parses() {
        let s = pb::StatusResponse {
            version: "0.1.0".into(),
            sandbox: "native".into(),
            sessions_active: 3,
            records: Some(pb::RecordCounts {
                decisions_allow: 7,
                decisions_deny: 2,
                ..Default::default()
            }),
            ..Default::default()
        };
        let text = render(&s);
        let mut declared = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(kind == "gauge" || kind == "counter", "{line}");
                declared.push(name.to_string());
                continue;
            }
            if line.starts_with("# HELP ") {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap();
            value.parse::<u64>().unwrap();
            let name = series.split('{').next().unwrap();
            assert_eq!(declared.last().map(String::as_str), Some(name), "{line}");
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
            if name.ends_with("_total") {
                assert!(text.contains(&format!("# TYPE {name} counter")), "{name}");
            }
        }
        assert!(text.contains("tollgate_sessions_active 3\n"), "{text}");
        assert!(text.contains("tollgate_decisions_total{verdict=\"allow\"} 7\n"));
        assert!(text.contains("tollgate_decisions_total{verdict=\"deny\"} 2\n"));
        assert!(text.contains("tollgate_info{version=\"0.1.0\",sandbox=\"native\"} 1\n"));
        assert_eq!(label_value("a\"b\\c"), "a\\\"b\\\\c");
    }
}
