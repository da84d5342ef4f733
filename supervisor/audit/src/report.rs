//! `supervisorctl audit report`: decisions summed per tool and per rule, and
//! the suggestions of docs/ARCHITECTURE.md "Reference" (a gate confirmed
//! again and again and never refused is a candidate to relax; one denied
//! again and again points at a missing rule).
//!
//! Input: `permission_check {tool, decision: allow|ask|deny, rule, allowed_by,
//! call_id, …}`, `approval_requested {approval_id, tool, destructive, …}` and
//! `approval_decided {approval_id, tool, outcome: approved|denied|timeout|
//! withdrawn, scope, by}`. An approval is attributed to a rule by, in order:
//! a `rule` field on the approval record itself; the `call_id` it carries
//! matched to the `permission_check` with that `call_id`; else the oldest
//! not-yet-claimed `ask` check of the same tool in the same session.
//!
//! The report reads lines leniently (it is a summary, not a verifier: run
//! `audit verify` for integrity) and counts lines it could not parse.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Map, Value};

use crate::AuditError;
use crate::event::{
    AUTO_ALLOWED, ApprovalDecided, ApprovalOutcome, ApprovalRequested, Event, Parsed,
    PermissionCheck, SESSION_SCOPE, Verdict,
};
use crate::names::parse_file_name;
use crate::tail::sanitize;

/// The thresholds behind the suggestions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Thresholds {
    /// An ask gate approved at least this often, and never refused by a
    /// person, is a candidate to relax.
    pub relax_min_approved: u64,
    /// A tool denied by one rule (or by the mode) at least this often may be
    /// missing an allow rule.
    pub missing_rule_min_denied: u64,
    /// An ask gate refused by a person at least this often, and never
    /// approved, is a candidate for a deny rule.
    pub deny_min_rejected: u64,
}

impl Default for Thresholds {
    fn default() -> Thresholds {
        Thresholds {
            relax_min_approved: 50,
            missing_rule_min_denied: 5,
            deny_min_rejected: 5,
        }
    }
}

/// Counts for one tool and rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// `permission_check` allow (including the two below).
    pub allowed: u64,
    /// … of which `allowed_by: "auto-allow(config)"`.
    pub auto_allowed: u64,
    /// … of which `allowed_by: "allowed(session-scope)"`.
    pub session_scope: u64,
    /// `permission_check` ask.
    pub asked: u64,
    /// `approval_decided` approved.
    pub approved: u64,
    /// `approval_decided` denied (by a person).
    pub rejected: u64,
    /// `approval_decided` timeout or withdrawn.
    pub expired: u64,
    /// `permission_check` deny (by policy, the floor or the mode).
    pub denied: u64,
    /// Approvals requested as destructive (always-confirm tier).
    pub destructive: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.allowed += o.allowed;
        self.auto_allowed += o.auto_allowed;
        self.session_scope += o.session_scope;
        self.asked += o.asked;
        self.approved += o.approved;
        self.rejected += o.rejected;
        self.expired += o.expired;
        self.denied += o.denied;
        self.destructive += o.destructive;
    }
}

/// One row: a tool and the rule that decided (`"-"` when none was named).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleRow {
    pub tool: String,
    pub rule: String,
    #[serde(flatten)]
    pub counts: Counts,
}

/// Totals for one tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolRow {
    pub tool: String,
    #[serde(flatten)]
    pub counts: Counts,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SuggestionKind {
    /// An ask gate that people always approve.
    Relax,
    /// A tool denied repeatedly by a rule or the mode.
    MissingAllowRule,
    /// An ask gate that people always refuse.
    DenyRule,
    /// A tool that keeps hitting the hard floor (which cannot be relaxed).
    Floor,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Suggestion {
    pub kind: SuggestionKind,
    pub tool: String,
    pub rule: String,
    pub count: u64,
    pub text: String,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    pub files: u64,
    pub records: u64,
    pub unreadable_lines: u64,
    pub sessions: u64,
    /// Records per event name.
    pub events: BTreeMap<String, u64>,
    pub tools: Vec<ToolRow>,
    pub rules: Vec<RuleRow>,
    pub suggestions: Vec<Suggestion>,
    pub thresholds: Thresholds,
    /// `net_connection` records per host and port, most connections first
    /// (left out when there are none, as release 0.1.0 printed it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostRow>,
    /// Per session, the paths the sandbox's walls refused most
    /// (`sandbox_denial` records), at most [`TOP_REFUSED`] each (left out
    /// when there are none, as release 0.1.0 printed it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused_paths: Vec<RefusedPath>,
}

/// The network wall's records for one host and port.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostRow {
    /// `(bad request)` for refusals that named no host.
    pub host: String,
    pub port: u16,
    /// `open` records: connections that went through.
    pub opened: u64,
    /// `refused` records, and refusals only counted in a summary (no host).
    pub refused: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
}

/// Refused paths listed per session, at most.
pub const TOP_REFUSED: usize = 5;

/// One refused path of a session, with how many times.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusedPath {
    pub session: String,
    pub access: String,
    pub path: String,
    pub rule: String,
    pub count: u64,
}

/// Reports on the given files, and on the `*.jsonl` audit files of the
/// given directories.
pub fn report(paths: &[PathBuf]) -> Result<Report, AuditError> {
    report_with(paths, &Thresholds::default())
}

/// [`report`] with explicit thresholds.
pub fn report_with(paths: &[PathBuf], thresholds: &Thresholds) -> Result<Report, AuditError> {
    let files = expand(paths)?;
    let mut b = Builder::default();
    for f in &files {
        let data = std::fs::read(f).map_err(|e| AuditError::io(f, e))?;
        b.files += 1;
        for line in data.split(|&c| c == b'\n') {
            if line.is_empty() {
                continue;
            }
            match serde_json::from_slice::<Map<String, Value>>(line) {
                Ok(rec) => b.record(rec),
                Err(_) => b.unreadable += 1,
            }
        }
    }
    Ok(b.finish(thresholds))
}

fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, AuditError> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| AuditError::io(p, e))?;
        if meta.is_dir() {
            let mut found: Vec<(crate::LogName, PathBuf)> = Vec::new();
            let rd = std::fs::read_dir(p).map_err(|e| AuditError::io(p, e))?;
            for entry in rd {
                let entry = entry.map_err(|e| AuditError::io(p, e))?;
                if let Some(n) = entry.file_name().to_str().and_then(parse_file_name) {
                    found.push((n, entry.path()));
                }
            }
            found.sort();
            out.extend(found.into_iter().map(|(_, p)| p));
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

const NO_RULE: &str = "-";

#[derive(Default)]
struct Builder {
    files: u64,
    records: u64,
    unreadable: u64,
    sessions: std::collections::BTreeSet<String>,
    events: BTreeMap<String, u64>,
    rows: BTreeMap<(String, String), Counts>,
    /// (session, tool) -> rules of ask checks not yet claimed by an approval.
    open_asks: HashMap<(String, String), VecDeque<String>>,
    /// call_id -> rule of its permission_check.
    by_call: HashMap<String, String>,
    /// approval_id -> (tool, rule).
    approvals: HashMap<String, (String, String)>,
    /// approval_decided records whose request was not seen (yet).
    orphans: Vec<ApprovalDecided>,
    hosts: BTreeMap<(String, u16), HostRow>,
    /// (session, access, path, rule) -> refusals.
    refused: HashMap<(String, String, String, String), u64>,
}

impl Builder {
    fn row(&mut self, tool: &str, rule: &str) -> &mut Counts {
        self.rows
            .entry((tool.to_string(), rule.to_string()))
            .or_default()
    }

    /// One record (the whole JSON object of a line).
    fn record(&mut self, rec: Map<String, Value>) {
        self.records += 1;
        let text = |k: &str| rec.get(k).and_then(Value::as_str).map(str::to_string);
        let event = text("event").unwrap_or_else(|| "(none)".to_string());
        *self.events.entry(event).or_default() += 1;
        let session = text("session").unwrap_or_default();
        if !session.is_empty() {
            self.sessions.insert(session.clone());
        }
        let Parsed::Known(event) = Event::read_object(rec) else {
            return;
        };
        match event {
            Event::PermissionCheck(c) => self.checked(session, c),
            Event::ApprovalRequested(r) => self.requested(&session, r),
            Event::ApprovalDecided(d) => match self.approvals.get(&d.approval_id).cloned() {
                Some((tool, rule)) => self.decided(&d, &tool, &rule),
                None => self.orphans.push(d),
            },
            Event::NetConnection(c) => self.connection(&c),
            Event::SandboxDenial(d) if d.phase == "refused" => {
                *self
                    .refused
                    .entry((session, d.access, d.path, d.rule))
                    .or_default() += d.count;
            }
            Event::SandboxDenial(_) | Event::GitExposed(_) => {}
            Event::AuditOpened(_)
            | Event::AuditFileClosed(_)
            | Event::Config(_)
            | Event::HostAddresses(_)
            | Event::Recovered(_)
            | Event::Shutdown(_)
            | Event::AuditRefused(_)
            | Event::SandboxExec(_)
            | Event::SandboxError(_)
            | Event::SessionOpened(_)
            | Event::SessionClosed(_)
            | Event::SessionRevoked(_)
            | Event::TokenRotated(_)
            | Event::DiskFloorStop(_)
            | Event::ToolStarted(_)
            | Event::ToolResult(_)
            | Event::JobStarted(_)
            | Event::JobEnded(_)
            | Event::LlmRequest(_)
            | Event::LlmResponse(_)
            | Event::LlmCallError(_)
            | Event::LlmRetry(_)
            | Event::CostLimitHit(_)
            | Event::ClientTurnEnd(_)
            | Event::ClientToolResult(_)
            | Event::McpServerStarted(_)
            | Event::McpServerExited(_)
            | Event::McpEgress(_)
            | Event::NetworkRule(_)
            | Event::NetSecret(_)
            | Event::CacheCleared(_)
            | Event::QuestionAsked(_)
            | Event::ContextTrim(_)
            | Event::IterationCapHit(_)
            | Event::Abort(_)
            | Event::TurnSummary(_) => {}
        }
    }

    fn connection(&mut self, c: &crate::event::NetConnection) {
        let host = if c.host.is_empty() {
            "(bad request)".to_string()
        } else {
            c.host.clone()
        };
        let row = self
            .hosts
            .entry((host.clone(), c.port))
            .or_insert_with(|| HostRow {
                host,
                port: c.port,
                ..HostRow::default()
            });
        match c.phase.as_str() {
            "open" => row.opened += 1,
            "close" => {
                row.bytes_up += c.bytes_up;
                row.bytes_down += c.bytes_down;
            }
            "refused" => row.refused += 1,
            _ => row.refused += c.suppressed,
        }
    }

    fn checked(&mut self, session: String, c: PermissionCheck) {
        let rule = c.rule.unwrap_or_else(|| NO_RULE.to_string());
        self.by_call.insert(c.call_id, rule.clone());
        match c.decision {
            Verdict::Allow => {
                let counts = self.row(&c.tool, &rule);
                counts.allowed += 1;
                match c.allowed_by.as_deref() {
                    Some(AUTO_ALLOWED) => counts.auto_allowed += 1,
                    Some(SESSION_SCOPE) => counts.session_scope += 1,
                    _ => {}
                }
            }
            Verdict::Ask => {
                self.row(&c.tool, &rule).asked += 1;
                self.open_asks
                    .entry((session, c.tool))
                    .or_default()
                    .push_back(rule);
            }
            Verdict::Deny => self.row(&c.tool, &rule).denied += 1,
        }
    }

    fn requested(&mut self, session: &str, r: ApprovalRequested) {
        let rule = self.rule_for_approval(&r, session);
        if r.destructive {
            self.row(&r.tool, &rule).destructive += 1;
        }
        self.approvals.insert(r.approval_id, (r.tool, rule));
    }

    fn rule_for_approval(&mut self, r: &ApprovalRequested, session: &str) -> String {
        let queue = self
            .open_asks
            .get_mut(&(session.to_string(), r.tool.clone()));
        if let Some(rule) = &r.rule {
            if let Some(q) = queue
                && let Some(i) = q.iter().position(|x| x == rule)
            {
                q.remove(i);
            }
            return rule.clone();
        }
        if let Some(rule) = self.by_call.get(&r.call_id).cloned() {
            if let Some(q) = queue
                && let Some(i) = q.iter().position(|x| *x == rule)
            {
                q.remove(i);
            }
            return rule;
        }
        queue
            .and_then(VecDeque::pop_front)
            .unwrap_or_else(|| NO_RULE.to_string())
    }

    fn decided(&mut self, d: &ApprovalDecided, tool: &str, rule: &str) {
        let c = self.row(tool, rule);
        match d.outcome {
            ApprovalOutcome::Approved => c.approved += 1,
            ApprovalOutcome::Denied => c.rejected += 1,
            ApprovalOutcome::Timeout | ApprovalOutcome::Withdrawn => c.expired += 1,
        }
    }

    fn finish(mut self, t: &Thresholds) -> Report {
        // Decisions whose request came later in the input (or never).
        for d in std::mem::take(&mut self.orphans) {
            let (tool, rule) = match self.approvals.get(&d.approval_id) {
                Some((tool, rule)) => (tool.clone(), rule.clone()),
                None => (
                    d.tool.clone(),
                    d.rule
                        .clone()
                        .flatten()
                        .unwrap_or_else(|| NO_RULE.to_string()),
                ),
            };
            self.decided(&d, &tool, &rule);
        }
        let rules: Vec<RuleRow> = self
            .rows
            .iter()
            .map(|((tool, rule), counts)| RuleRow {
                tool: tool.clone(),
                rule: rule.clone(),
                counts: counts.clone(),
            })
            .collect();
        let mut tools: BTreeMap<String, Counts> = BTreeMap::new();
        for r in &rules {
            tools.entry(r.tool.clone()).or_default().add(&r.counts);
        }
        let suggestions = suggest(&rules, t);
        let mut hosts: Vec<HostRow> = self.hosts.into_values().collect();
        hosts.sort_by(|a, b| {
            (b.opened + b.refused)
                .cmp(&(a.opened + a.refused))
                .then_with(|| (&a.host, a.port).cmp(&(&b.host, b.port)))
        });
        let refused_paths = top_refused(std::mem::take(&mut self.refused));
        Report {
            hosts,
            files: self.files,
            records: self.records,
            unreadable_lines: self.unreadable,
            sessions: self.sessions.len() as u64,
            events: self.events,
            tools: tools
                .into_iter()
                .map(|(tool, counts)| ToolRow { tool, counts })
                .collect(),
            rules,
            suggestions,
            thresholds: t.clone(),
            refused_paths,
        }
    }
}

/// The most refused paths of each session, most first.
fn top_refused(all: HashMap<(String, String, String, String), u64>) -> Vec<RefusedPath> {
    let mut rows: Vec<RefusedPath> = all
        .into_iter()
        .map(|((session, access, path, rule), count)| RefusedPath {
            session,
            access,
            path,
            rule,
            count,
        })
        .collect();
    rows.sort_by(|a, b| {
        (&a.session, std::cmp::Reverse(a.count), &a.path).cmp(&(
            &b.session,
            std::cmp::Reverse(b.count),
            &b.path,
        ))
    });
    let mut out: Vec<RefusedPath> = Vec::new();
    for r in rows {
        let shown = out.iter().filter(|o| o.session == r.session).count();
        if shown < TOP_REFUSED {
            out.push(r);
        }
    }
    out
}

fn suggest(rows: &[RuleRow], t: &Thresholds) -> Vec<Suggestion> {
    let mut out = Vec::new();
    for r in rows {
        let c = &r.counts;
        let rule = if r.rule == NO_RULE {
            "(no rule)".to_string()
        } else {
            format!("`{}`", r.rule)
        };
        let tool = &r.tool;
        if c.approved >= t.relax_min_approved && c.rejected == 0 && c.destructive == 0 {
            out.push(Suggestion {
                kind: SuggestionKind::Relax,
                tool: tool.clone(),
                rule: r.rule.clone(),
                count: c.approved,
                text: format!(
                    "ask rule {rule} for {tool} confirmed {} times and never denied: candidate to relax (an allow rule)",
                    c.approved
                ),
            });
        }
        if c.rejected >= t.deny_min_rejected && c.approved == 0 {
            out.push(Suggestion {
                kind: SuggestionKind::DenyRule,
                tool: tool.clone(),
                rule: r.rule.clone(),
                count: c.rejected,
                text: format!(
                    "ask rule {rule} for {tool} refused by a person {} times and never approved: candidate for a deny rule",
                    c.rejected
                ),
            });
        }
        if c.denied >= t.missing_rule_min_denied {
            if r.rule.starts_with("floor:") {
                out.push(Suggestion {
                    kind: SuggestionKind::Floor,
                    tool: tool.clone(),
                    rule: r.rule.clone(),
                    count: c.denied,
                    text: format!(
                        "tool {tool} hit the hard floor {rule} {} times: it cannot be relaxed; check what the agent is being asked to do",
                        c.denied
                    ),
                });
            } else {
                out.push(Suggestion {
                    kind: SuggestionKind::MissingAllowRule,
                    tool: tool.clone(),
                    rule: r.rule.clone(),
                    count: c.denied,
                    text: format!(
                        "tool {tool} denied {} times by rule {rule}: a missing allow rule?",
                        c.denied
                    ),
                });
            }
        }
    }
    out.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.text.cmp(&b.text)));
    out
}

fn counts_cells(c: &Counts) -> [String; 8] {
    [
        c.allowed.to_string(),
        c.auto_allowed.to_string(),
        c.session_scope.to_string(),
        c.asked.to_string(),
        c.approved.to_string(),
        c.rejected.to_string(),
        c.expired.to_string(),
        c.denied.to_string(),
    ]
}

const HEADER: [&str; 10] = [
    "TOOL", "RULE", "ALLOWED", "AUTO", "SESSION", "ASKED", "APPROVED", "REJECTED", "EXPIRED",
    "DENIED",
];

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "audit report: {} files, {} records, {} sessions{}",
            self.files,
            self.records,
            self.sessions,
            if self.unreadable_lines > 0 {
                format!(", {} unreadable lines", self.unreadable_lines)
            } else {
                String::new()
            }
        )?;
        let mut table: Vec<[String; 10]> = Vec::new();
        table.push(HEADER.map(str::to_string));
        for t in &self.tools {
            let c = counts_cells(&t.counts);
            table.push([
                sanitize(&t.tool),
                "(all)".to_string(),
                c[0].clone(),
                c[1].clone(),
                c[2].clone(),
                c[3].clone(),
                c[4].clone(),
                c[5].clone(),
                c[6].clone(),
                c[7].clone(),
            ]);
            for r in self.rules.iter().filter(|r| r.tool == t.tool) {
                let c = counts_cells(&r.counts);
                table.push([
                    String::new(),
                    sanitize(&r.rule),
                    c[0].clone(),
                    c[1].clone(),
                    c[2].clone(),
                    c[3].clone(),
                    c[4].clone(),
                    c[5].clone(),
                    c[6].clone(),
                    c[7].clone(),
                ]);
            }
        }
        if self.tools.is_empty() {
            writeln!(f, "\nno permission checks recorded")?;
        } else {
            writeln!(f)?;
            let mut widths = [0usize; 10];
            for row in &table {
                for (w, cell) in widths.iter_mut().zip(row) {
                    *w = (*w).max(cell.chars().count());
                }
            }
            for row in &table {
                let mut line = String::new();
                for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
                    if i < 2 {
                        line.push_str(&format!("{cell:<w$}  "));
                    } else {
                        line.push_str(&format!("{cell:>w$}  "));
                    }
                }
                writeln!(f, "{}", line.trim_end())?;
            }
            writeln!(
                f,
                "\nALLOWED includes AUTO (auto-allow(config)) and SESSION (allowed(session-scope)); \
                 REJECTED = approvals denied by a person; EXPIRED = approvals timed out or withdrawn; \
                 DENIED = denied by policy, floor or mode."
            )?;
        }
        writeln!(
            f,
            "\nsuggestions (relax: approved >= {} and never rejected; missing rule: denied >= {}; deny rule: rejected >= {} and never approved):",
            self.thresholds.relax_min_approved,
            self.thresholds.missing_rule_min_denied,
            self.thresholds.deny_min_rejected
        )?;
        if self.suggestions.is_empty() {
            writeln!(f, "  none")?;
        }
        for s in &self.suggestions {
            writeln!(f, "  - {}", sanitize(&s.text))?;
        }
        write_hosts(f, &self.hosts)?;
        write_refused_paths(f, &self.refused_paths)
    }
}

/// The report's refused-paths table (none: nothing).
fn write_refused_paths(f: &mut std::fmt::Formatter<'_>, rows: &[RefusedPath]) -> std::fmt::Result {
    if !rows.is_empty() {
        writeln!(
            f,
            "\nrefused by the sandbox (top {TOP_REFUSED} per session):"
        )?;
    }
    for r in rows {
        writeln!(
            f,
            "  {}  {} {}  {}  x{}",
            sanitize(&r.session),
            sanitize(&r.access),
            sanitize(&r.path),
            sanitize(&r.rule),
            r.count
        )?;
    }
    Ok(())
}

/// The hosts table: connections through the network wall per host.
fn write_hosts(f: &mut fmt::Formatter<'_>, hosts: &[HostRow]) -> fmt::Result {
    if hosts.is_empty() {
        return Ok(());
    }
    writeln!(f, "\nnetwork (net_connection records per host):")?;
    let rows: Vec<[String; 6]> = std::iter::once(
        [
            "HOST",
            "PORT",
            "OPENED",
            "REFUSED",
            "BYTES UP",
            "BYTES DOWN",
        ]
        .map(str::to_string),
    )
    .chain(hosts.iter().map(|h| {
        [
            sanitize(&h.host),
            h.port.to_string(),
            h.opened.to_string(),
            h.refused.to_string(),
            h.bytes_up.to_string(),
            h.bytes_down.to_string(),
        ]
    }))
    .collect();
    let mut widths = [0usize; 6];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in &rows {
        let mut line = String::from("  ");
        for (i, (cell, w)) in row.iter().zip(widths).enumerate() {
            if i == 0 {
                line.push_str(&format!("{cell:<w$}  "));
            } else {
                line.push_str(&format!("{cell:>w$}  "));
            }
        }
        writeln!(f, "{}", line.trim_end())?;
    }
    Ok(())
}

/// Reports on the audit directory (what `audit report` with no PATH does).
pub fn report_dir(dir: &Path) -> Result<Report, AuditError> {
    report(&[dir.to_path_buf()])
}
