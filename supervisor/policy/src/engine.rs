//! The engine: the PEP pipeline from tool allowlist to mode (docs/ARCHITECTURE.md
//! "The PEP pipeline").
//!
//! Order, strictest first: registry and session allowlist, schema
//! validation, the hard floor (which nothing overrides), deny rules, plan
//! mode, the always-confirm tier, secret files, ask rules, allow rules, and
//! finally the mode table.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use regex::Regex;
use tollgate_toolcall::{Tool, ToolCall, ToolName};

use crate::decision::VettedFetch;
use crate::display::{bytes, cut_for_display, escape, shorten};
use crate::paths::{self, Access, Resolved};
use crate::registry::{self, ToolClass, ToolSpec};
use crate::rules::{RuleSet, Subject};
use crate::shell::lists::NameSet;
use crate::shell::patterns::{Pattern, PatternSet};
use crate::shell::{self, ShellCtx};
use crate::{
    Code, Decision, FileKind, FsFacts, Mode, PolicyConfig, PolicyError, Resolver, Verdict,
};

/// What the engine knows about the session making the call.
#[derive(Debug, Clone, PartialEq)]
pub struct Context {
    /// Canonical absolute workspace path.
    pub workspace: PathBuf,
    pub mode: Mode,
    /// The session's own tool allowlist (`--tools`); `None` means all tools.
    pub tools: Option<BTreeSet<String>>,
    /// The session owner's home directory, for `~` and credential paths.
    pub home: Option<PathBuf>,
    /// Paths that are never readable or writable whatever the workspace:
    /// the supervisor's state dir, audit dir, sockets, config file.
    pub protected: Vec<PathBuf>,
    /// Files (absolute) this session has read: overwriting one it has not
    /// read is destructive.
    pub read_files: BTreeSet<PathBuf>,
    /// Paths the workspace's own git configuration makes host-executed
    /// (`core.hooksPath`, included config files, git directories not named
    /// `.git`), found on the host; writes to them are guarded like the
    /// names of [`crate::host_exec::HOST_EXEC`].
    pub repo: Vec<crate::host_exec::RepoPath>,
}

/// The compiled policy.
#[derive(Debug)]
pub struct Engine {
    rules: RuleSet,
    extra_denied: NameSet,
    allowed_binaries: Vec<String>,
    confirm_patterns: Vec<(String, Regex)>,
    /// The shell floor's dangerous patterns lifted for this host, and why.
    lifted: PatternSet,
    lift_reasons: Vec<(Pattern, String)>,
    /// `[network]` is configured: sandboxes reach the hosts it allows
    /// through the network wall, so network clients are decided by where
    /// they connect, not refused by name.
    network_wall: bool,
}

/// What a tool-specific analysis found, before rules and mode.
struct Analysis {
    consequence: String,
    target: String,
    path: Option<PathBuf>,
    fetch: Option<VettedFetch>,
    /// A hard-floor refusal: (rule, reason).
    floor: Option<(String, String)>,
    /// The always-confirm tier: (rule, reason, target override).
    destructive: Option<(String, String, Option<String>)>,
    /// A workspace secret file: what to call it in the reason.
    secret: Option<String>,
    subject: Subject,
}

impl Analysis {
    fn new(consequence: String, subject: Subject) -> Analysis {
        Analysis {
            consequence,
            target: String::new(),
            path: None,
            fetch: None,
            floor: None,
            destructive: None,
            secret: None,
            subject,
        }
    }

    fn refused(rule: &str, reason: String, consequence: String) -> Analysis {
        let mut a = Analysis::new(consequence, Subject::Nothing);
        a.floor = Some((rule.to_string(), reason));
        a
    }
}

/// Filesystem facts for checking examples at load: nothing exists.
struct NoFiles;

impl FsFacts for NoFiles {
    fn symlink_metadata(&self, _: &Path) -> Option<crate::FileFacts> {
        None
    }
    fn read_link(&self, _: &Path) -> Option<PathBuf> {
        None
    }
}

/// How much of a command its consequence shows (the rest is marked as cut;
/// the approval's target holds all of it).
const COMMAND_SHOWN: usize = 200;

const EXAMPLE_WORKSPACE: &str = "/workspace";
const EXAMPLE_HOME: &str = "/home/user";

impl Engine {
    /// Compiles and validates a policy. A bad specifier, a rule failing its
    /// own example, a bad binary name or regex refuses the whole config.
    pub fn new(config: &PolicyConfig) -> Result<Engine, PolicyError> {
        let mut extra_denied = NameSet::default();
        for b in &config.extra_denied_binaries {
            let ok = !b.is_empty() && !b.contains('/') && !b.chars().any(char::is_whitespace);
            if !ok {
                return Err(PolicyError::InvalidRule {
                    rule: format!("extra_denied_binaries: {b}"),
                    reason: "give a program's base name, such as `helm`".to_string(),
                });
            }
            extra_denied.insert(b.clone());
        }
        let allowed_binaries = lifted_binaries(config, &extra_denied)?;
        let mut confirm_patterns = Vec::new();
        for p in &config.extra_confirm_patterns {
            let re = Regex::new(p).map_err(|e| PolicyError::InvalidRule {
                rule: format!("extra_confirm_patterns: {p}"),
                reason: format!("not a valid regular expression: {e}"),
            })?;
            confirm_patterns.push((p.clone(), re));
        }
        let example_subject =
            |tool: ToolName, ex: &str| example_subject(tool, ex, &allowed_binaries);
        let rules = RuleSet::compile(&config.allow, &config.ask, &config.deny, &example_subject)?;
        let lift_reasons = lifted_patterns(config)?;
        let mut lifted = PatternSet::default();
        for (p, _) in &lift_reasons {
            lifted.insert(*p);
        }
        Ok(Engine {
            rules,
            extra_denied,
            allowed_binaries,
            confirm_patterns,
            lifted,
            lift_reasons,
            network_wall: false,
        })
    }

    /// With `[network]` configured (docs/INTERFACES.md "[network]"): the
    /// denied-binaries list's network clients are decided by the network
    /// wall, where they connect, instead of refused by name.
    pub fn with_network_wall(mut self, on: bool) -> Engine {
        self.network_wall = on;
        self
    }

    /// The dangerous patterns this host lifted, with their reasons.
    pub fn lifted_patterns(&self) -> &[(Pattern, String)] {
        &self.lift_reasons
    }

    /// Decides one call of a wrapped MCP server's tool (`agent
    /// mcp-gateway`): `mcp(NAME.TOOL)` rules, then the mode.
    pub fn decide_mcp(&self, call: &crate::mcp::McpToolCall, mode: Mode) -> Decision {
        crate::mcp::decide(&self.rules, call, mode)
    }

    /// Decides an MCP protocol request between the client and the wrapped
    /// server `server` (see [`crate::mcp::is_decided_method`]).
    pub fn decide_mcp_method(&self, server: &str, method: &str) -> Decision {
        crate::mcp::decide_method(&self.rules, server, method)
    }

    /// The tools a session may use (what `ListTools` returns).
    pub fn tools_for(&self, session_tools: Option<&BTreeSet<String>>) -> Vec<&'static ToolSpec> {
        registry::registry()
            .iter()
            .filter(|t| session_tools.is_none_or(|s| s.contains(t.name)))
            .collect()
    }

    /// The SSRF guard alone, for re-vetting every redirect hop of a fetch.
    /// The refusal is a whole decision (rule `floor:ssrf`, reason,
    /// consequence) so a hop can be audited like a call.
    #[allow(clippy::result_large_err)] // the daemon's contract; a refusal is rare
    pub fn vet_url(&self, url: &str, dns: &dyn Resolver) -> Result<VettedFetch, Decision> {
        crate::ssrf::vet(url, dns).map_err(|r| {
            let mut d = Decision::deny(Code::PolicyDenied, r.reason, Some(crate::ssrf::RULE));
            d.consequence = r.consequence;
            d.target = url.to_string();
            d
        })
    }

    /// The connector check (docs/THREAT_MODEL.md, "The walls, by layer"):
    /// whether a fetch may connect to `ip`
    /// right now; `Err` with the sentence why not (an address class the
    /// floor refuses, or an address of the supervisor's own host as `dns`
    /// knows them now).
    pub fn vet_address(&self, ip: std::net::IpAddr, dns: &dyn Resolver) -> Result<(), String> {
        crate::ssrf::vet_address(ip, dns)
    }

    /// Decides one call. Never panics, whatever the bytes in `call`.
    pub fn decide(
        &self,
        call: &ToolCall,
        ctx: &Context,
        fs: &dyn FsFacts,
        dns: &dyn Resolver,
    ) -> Decision {
        match self.check(call, ctx) {
            Ok(tool) => self.decide_checked(&tool, ctx, fs, dns),
            Err(refused) => refused,
        }
    }

    /// The first steps of [`Engine::decide`]: the tool exists, the session
    /// may use it, and its arguments fit its schema (the sentence names the
    /// field). Then the arguments are typed, once: everything after matches
    /// on the [`Tool`].
    #[allow(clippy::result_large_err)] // a refusal is a whole decision, to be recorded
    pub fn check(&self, call: &ToolCall, ctx: &Context) -> Result<Tool, Decision> {
        let Some(spec) = registry::lookup(&call.tool) else {
            let names: Vec<&str> = self
                .tools_for(ctx.tools.as_ref())
                .iter()
                .map(|t| t.name)
                .collect();
            return Err(Decision::deny(
                Code::UnknownTool,
                format!(
                    "there is no tool named `{}`. The available tools are: {}.",
                    shorten(&call.tool, 64),
                    names.join(", ")
                ),
                Some("registry"),
            ));
        };
        if let Some(allowed) = &ctx.tools
            && !allowed.contains(spec.name)
        {
            let names: Vec<&str> = allowed.iter().map(String::as_str).collect();
            return Err(Decision::deny(
                Code::NotInAllowlist,
                format!(
                    "`{}` is not among this session's tools ({}); use one of those.",
                    spec.name,
                    names.join(", ")
                ),
                Some("session-tools"),
            ));
        }
        if let Err(e) = crate::validate::validate(spec, &call.args) {
            return Err(Decision::deny(Code::InvalidArgs, e, Some("schema")));
        }
        Tool::from_json(spec.tool, call.args.clone()).map_err(|e| {
            Decision::deny(
                Code::InvalidArgs,
                format!(
                    "the arguments for {} do not fit ({e}); {} takes {}",
                    spec.name,
                    spec.name,
                    crate::validate::signature(spec)
                ),
                Some("schema"),
            )
        })
    }

    /// The rest of [`Engine::decide`] for a checked call: the hard floor,
    /// the rules, the always-confirm tier, secrets and the mode.
    pub fn decide_checked(
        &self,
        tool: &Tool,
        ctx: &Context,
        fs: &dyn FsFacts,
        dns: &dyn Resolver,
    ) -> Decision {
        let Some(spec) = registry::spec(tool.name()) else {
            return Decision::deny(
                Code::UnknownTool,
                format!("the tool `{}` has no policy; it is refused.", tool.name()),
                Some("registry"),
            );
        };
        let a = self.analyze(tool, ctx, fs, dns);
        self.finish(spec, a, ctx.mode)
    }

    fn analyze(
        &self,
        tool: &Tool,
        ctx: &Context,
        fs: &dyn FsFacts,
        dns: &dyn Resolver,
    ) -> Analysis {
        match tool {
            Tool::ReadFile(a) => file_tool(&a.path, Access::Read, ctx, fs, |r| {
                ["read ", &shown_rel(r)].concat()
            }),
            Tool::WriteFile(a) => self.write_file(&a.path, &a.content, ctx, fs),
            Tool::EditFile(a) => {
                let all = a.replace_all.unwrap_or(false);
                file_tool(&a.path, Access::Write, ctx, fs, |r| match r.facts {
                    None => format!("edit {} (the file does not exist)", shown_rel(r)),
                    Some(_) if all => format!("edit {} (replace every occurrence)", shown_rel(r)),
                    Some(_) => format!("edit {} (replace 1 occurrence)", shown_rel(r)),
                })
            }
            Tool::GlobFiles(a) => search_tool(a.path.as_deref(), &[&a.pattern], ctx, fs, |r| {
                format!(
                    "list files matching `{}` in {}",
                    shorten(&a.pattern, 120),
                    place_name(r)
                )
            }),
            Tool::Grep(a) => search_tool(a.path.as_deref(), a.glob.as_slice(), ctx, fs, |r| {
                format!(
                    "search for `{}` in {}",
                    shorten(&a.pattern, 120),
                    place_name(r)
                )
            }),
            Tool::RunBash(a) if a.is_background() => {
                let mut an = self.run_bash(&a.command, ctx, fs);
                an.consequence
                    .push_str(" as a background job of the session");
                an
            }
            Tool::RunBash(a) => self.run_bash(&a.command, ctx, fs),
            Tool::JobOutput(a) => job_tool("read the output of background job", &a.job_id),
            Tool::KillJob(a) => job_tool("end background job", &a.job_id),
            Tool::Webfetch(a) => webfetch(&a.url, dns),
            Tool::Mcp(a) => mcp_call(&a.server, &a.tool),
            Tool::TodoAppend(a) => Analysis::new(
                format!("add a todo item: {}", shorten(&a.text, 120)),
                Subject::Nothing,
            ),
            Tool::TodoList(_) => Analysis::new("show the todo list".to_string(), Subject::Nothing),
            Tool::TodoUpdate(a) => {
                Analysis::new(format!("update todo item {}", a.id), Subject::Nothing)
            }
            Tool::ReadScratchpad(_) => {
                Analysis::new("read the scratchpad".to_string(), Subject::Nothing)
            }
            Tool::WriteScratchpad(a) => Analysis::new(
                format!("replace the scratchpad ({})", bytes(a.content.len() as u64)),
                Subject::Nothing,
            ),
            Tool::AskQuestion(a) => Analysis::new(
                format!("ask the user: {}", shorten(&a.question, 160)),
                Subject::Nothing,
            ),
        }
    }

    fn write_file(&self, raw: &str, content: &str, ctx: &Context, fs: &dyn FsFacts) -> Analysis {
        let new_len = content.len() as u64;
        let mut a = file_tool(raw, Access::Write, ctx, fs, |r| {
            let name = shown_rel(r);
            match r.facts {
                Some(f) if f.kind == FileKind::File && new_len == 0 => format!(
                    "write empty content over {name} ({}; same as deleting it)",
                    bytes(f.size)
                ),
                Some(f) if f.kind == FileKind::File => {
                    format!("overwrite {name} (existing {} will be lost)", bytes(f.size))
                }
                _ => format!("create {name} ({})", bytes(new_len)),
            }
        });
        if a.floor.is_some() || a.destructive.is_some() {
            return a;
        }
        let Some(abs) = a.path.clone() else { return a };
        let existing = match fs.symlink_metadata(&abs) {
            Some(f) if f.kind == FileKind::File => f.size,
            _ => return a,
        };
        let name = shorten(&a.target, 160);
        if new_len == 0 && existing > 0 {
            a.destructive = Some((
                "confirm:empty-overwrite".to_string(),
                format!(
                    "writing empty content over {name} ({}) is the same as deleting it; it needs the user's typed confirmation.",
                    bytes(existing)
                ),
                None,
            ));
        } else if existing > 0 && !ctx.read_files.contains(&abs) {
            a.destructive = Some((
                "confirm:overwrite-unread".to_string(),
                format!(
                    "{name} already exists ({}) and this session has not read it, so overwriting it could destroy work nobody has looked at. Read it first (then an overwrite is an ordinary write), or use edit_file.",
                    bytes(existing)
                ),
                None,
            ));
        }
        a
    }

    fn run_bash(&self, command: &str, ctx: &Context, fs: &dyn FsFacts) -> Analysis {
        let home = ctx.home.clone().unwrap_or_else(|| PathBuf::from("/root"));
        let sc = ShellCtx {
            workspace: &ctx.workspace,
            home: &home,
            protected: &ctx.protected,
            extra_denied: &self.extra_denied,
            allowed: &self.allowed_binaries,
            fs,
            collect: self.rules.has_tool(ToolName::RunBash),
            lifted: self.lifted,
            network_wall: self.network_wall,
        };
        let report = shell::analyze(command, &sc);
        let network = if self.network_wall {
            "network: only the hosts [network] allows"
        } else {
            "no network"
        };
        let mut consequence = format!(
            "run `{}` in the sandbox ({network})",
            cut_for_display(command, COMMAND_SHOWN)
        );
        for p in report.lifted.iter() {
            if let Some((_, why)) = self.lift_reasons.iter().find(|(q, _)| *q == p) {
                consequence.push_str(&format!(
                    "; it matches the dangerous pattern `{p}`, lifted on this host: {}",
                    shorten(why, 200)
                ));
            }
        }
        if let Some(f) = report.deny {
            return Analysis::refused(&f.rule, f.reason, consequence);
        }
        let mut a = Analysis::new(
            consequence,
            Subject::Command {
                commands: report.commands,
                outer: report.outer,
            },
        );
        a.target = escape(command);
        if let Some(f) = report.confirm.into_iter().next() {
            a.destructive = Some((f.rule, f.reason, f.target));
        } else if let Some((p, _)) = self
            .confirm_patterns
            .iter()
            .find(|(_, re)| re.is_match(command))
        {
            a.destructive = Some((
                "confirm:pattern".to_string(),
                format!(
                    "the command matches the always-confirm pattern `{}` of this supervisor's policy; it needs the user's confirmation.",
                    shorten(p, 80)
                ),
                None,
            ));
        }
        a.secret = report
            .secret
            .map(|s| format!("the command touches `{}`, which", shorten(&s, 160)));
        a
    }

    /// Rules, the always-confirm tier, secrets and the mode, in that order.
    fn finish(&self, spec: &ToolSpec, a: Analysis, mode: Mode) -> Decision {
        let d = Decision {
            verdict: Verdict::Deny,
            code: Code::PolicyDenied,
            reason: String::new(),
            rule: None,
            destructive: false,
            consequence: a.consequence,
            target: a.target,
            path: a.path,
            fetch: a.fetch,
            secret: a.secret.is_some(),
            rule_file: None,
        };
        if let Some((rule, reason)) = a.floor {
            return denied(d, &rule, reason);
        }
        let hit = self.rules.evaluate(spec.tool, &a.subject);
        if let Some((Verdict::Deny, label)) = hit {
            return denied(
                d,
                label,
                format!(
                    "this supervisor's policy refuses it (rule `{label}`). Do the task another way, or ask the user."
                ),
            );
        }
        let changes = matches!(spec.class, ToolClass::Write | ToolClass::Action);
        if mode == Mode::Plan && changes {
            return denied(
                d,
                "mode:plan",
                format!(
                    "the session is in plan mode, where only reads and planning run; `{}` changes things. Describe the step in your plan instead.",
                    spec.name
                ),
            );
        }
        if let Some(destructive) = a.destructive {
            return confirm_destructive(d, destructive, mode);
        }
        if let Some(what) = &a.secret {
            return approve_secret(d, what, mode);
        }
        match hit {
            Some((Verdict::Ask, label)) => return rule_asks(d, label, mode),
            Some((Verdict::Allow, label)) => {
                let mut d = d;
                d.verdict = Verdict::Allow;
                d.code = Code::Ok;
                d.rule = Some(label.to_string());
                d.reason = format!("allowed by rule `{label}`.");
                return d;
            }
            Some((Verdict::Deny, _)) | None => {}
        }
        by_mode(d, spec, mode)
    }
}

/// `d` refused by `rule`.
fn denied(mut d: Decision, rule: &str, reason: String) -> Decision {
    d.verdict = Verdict::Deny;
    d.code = Code::PolicyDenied;
    d.rule = Some(rule.to_string());
    d.reason = reason;
    d.fetch = None;
    d
}

/// `d` asked for by `rule`.
fn asked(mut d: Decision, rule: &str, reason: String) -> Decision {
    d.verdict = Verdict::Ask;
    d.code = Code::ApprovalRequired;
    d.rule = Some(rule.to_string());
    d.reason = reason;
    d
}

/// A destructive call (the always-confirm tier): asked for where somebody
/// can confirm it, refused where nobody can.
fn confirm_destructive(
    mut d: Decision,
    (rule, reason, target): (String, String, Option<String>),
    mode: Mode,
) -> Decision {
    d.destructive = true;
    if let Some(t) = target {
        // A literal from the command (a branch name): shown to the
        // operator and typed back, so escaped like every target.
        d.target = escape(&t);
    }
    match mode {
        Mode::DangerouslySkipPermissions => denied(
            d,
            &rule,
            format!(
                "{reason} In dangerouslySkipPermissions mode destructive calls are refused, not run; ask the user to do it or to change mode."
            ),
        ),
        Mode::DontAsk => denied(
            d,
            &rule,
            format!("{reason} Nobody can confirm it in dontAsk mode, so it is refused."),
        ),
        Mode::Default | Mode::AcceptEdits | Mode::Plan => asked(d, &rule, reason),
    }
}

/// A secret file's content would reach the model: asked for where somebody
/// approves, refused where nobody does.
fn approve_secret(d: Decision, what: &str, mode: Mode) -> Decision {
    let reason = format!(
        "{what} looks like a secret file (keys, passwords, tokens); its content would reach the model, so it needs the user's approval."
    );
    match mode {
        Mode::DangerouslySkipPermissions | Mode::DontAsk => denied(
            d,
            "floor:secret-file",
            format!("{reason} Nobody approves calls in {mode} mode, so it is refused."),
        ),
        Mode::Default | Mode::AcceptEdits | Mode::Plan => asked(d, "floor:secret-file", reason),
    }
}

/// An ask rule matched: asked for, except in dontAsk mode.
fn rule_asks(d: Decision, label: &str, mode: Mode) -> Decision {
    match mode {
        Mode::DontAsk => denied(
            d,
            label,
            format!(
                "this supervisor's policy asks for approval (rule `{label}`), and nobody can approve in dontAsk mode."
            ),
        ),
        Mode::Default | Mode::AcceptEdits | Mode::Plan | Mode::DangerouslySkipPermissions => asked(
            d,
            label,
            format!("this supervisor's policy asks for the user's approval (rule `{label}`)."),
        ),
    }
}

/// No rule matched: the mode decides by the tool's class.
fn by_mode(mut d: Decision, spec: &ToolSpec, mode: Mode) -> Decision {
    // Most calls end here: built by concatenation, not `format!`.
    let rule = ["mode:", mode.as_str()].concat();
    match mode_verdict(mode, spec.class) {
        Verdict::Allow => {
            d.verdict = Verdict::Allow;
            d.code = Code::Ok;
            d.rule = Some(rule);
            d.reason = [
                spec.class.as_str(),
                " calls run without approval in ",
                mode.as_str(),
                " mode.",
            ]
            .concat();
            d
        }
        Verdict::Ask => {
            let what = match spec.class {
                ToolClass::Write => "writing files",
                ToolClass::Action if spec.tool == ToolName::Mcp => "calling an MCP server's tool",
                ToolClass::Action => "running commands and fetching URLs",
                ToolClass::Read | ToolClass::Planning | ToolClass::Interaction => "this call",
            };
            asked(
                d,
                &rule,
                format!("{what} needs the user's approval in {mode} mode."),
            )
        }
        Verdict::Deny => denied(
            d,
            &rule,
            format!(
                "the session runs in {mode} mode and no rule of this supervisor allows this call, so it is refused. Do without it, or ask the operator for an allow rule."
            ),
        ),
    }
}

/// What a rule's example offers rules to match, as a call of `tool` would
/// (run_bash examples are analysed like real commands, against no files).
fn example_subject(tool: ToolName, ex: &str, allowed_binaries: &[String]) -> Subject {
    let none = NameSet::default();
    match tool {
        ToolName::RunBash => {
            let sc = ShellCtx {
                workspace: Path::new(EXAMPLE_WORKSPACE),
                home: Path::new(EXAMPLE_HOME),
                protected: &[],
                extra_denied: &none,
                allowed: allowed_binaries,
                fs: &NoFiles,
                collect: true,
                lifted: PatternSet::default(),
                network_wall: false,
            };
            let r = shell::analyze(ex, &sc);
            Subject::Command {
                commands: r.commands,
                outer: r.outer,
            }
        }
        ToolName::Mcp => {
            let (server, tool) = ex.split_once('.').unwrap_or((ex, ""));
            Subject::Mcp {
                server: server.to_string(),
                tool: tool.to_string(),
            }
        }
        ToolName::Webfetch => match url::Url::parse(ex) {
            Ok(u) => Subject::Url {
                host: u.host_str().unwrap_or("").to_string(),
                url: u.to_string(),
            },
            Err(_) => Subject::Url {
                host: ex.to_string(),
                url: ex.to_string(),
            },
        },
        ToolName::ReadFile
        | ToolName::GlobFiles
        | ToolName::Grep
        | ToolName::WriteFile
        | ToolName::EditFile
        | ToolName::JobOutput
        | ToolName::KillJob
        | ToolName::TodoAppend
        | ToolName::TodoList
        | ToolName::TodoUpdate
        | ToolName::ReadScratchpad
        | ToolName::WriteScratchpad
        | ToolName::AskQuestion => Subject::Path(
            ex.trim_start_matches("./")
                .trim_start_matches('/')
                .to_string(),
        ),
    }
}

/// `lift_patterns`: known names, each once, each with its reason.
fn lifted_patterns(config: &PolicyConfig) -> Result<Vec<(Pattern, String)>, PolicyError> {
    let mut out: Vec<(Pattern, String)> = Vec::new();
    for l in &config.lift_patterns {
        let invalid = |reason: String| PolicyError::InvalidRule {
            rule: format!("lift_patterns: {}", shorten(&l.pattern, 64)),
            reason,
        };
        let Some(p) = Pattern::parse(&l.pattern) else {
            let names: Vec<&str> = Pattern::ALL.iter().map(|p| p.as_str()).collect();
            return Err(invalid(format!(
                "there is no dangerous pattern by that name; the patterns are {}",
                names.join(", ")
            )));
        };
        if l.reason.trim().is_empty() {
            return Err(invalid(
                "give the reason this host needs it (`reason = \"…\"`); it is shown with every command it lets through".to_string(),
            ));
        }
        if out.iter().any(|(q, _)| *q == p) {
            return Err(invalid(
                "the pattern is lifted twice; keep one rule".to_string(),
            ));
        }
        out.push((p, l.reason.trim().to_string()));
    }
    Ok(out)
}

/// `allow_binaries`: base names on the built-in denylist, lifted for this
/// host. A name the list does not hold (a typo, a path) refuses the config.
fn lifted_binaries(
    config: &PolicyConfig,
    extra_denied: &NameSet,
) -> Result<Vec<String>, PolicyError> {
    let mut lifted = Vec::new();
    for b in &config.allow_binaries {
        let invalid = |reason: String| PolicyError::InvalidRule {
            rule: format!("allow_binaries: {b}"),
            reason,
        };
        if b.is_empty() || b.contains('/') || b.chars().any(char::is_whitespace) {
            return Err(invalid(
                "give a program's base name, such as `ssh`".to_string(),
            ));
        }
        if !shell::lists::is_builtin_denied(b) {
            return Err(invalid(format!(
                "`{}` is not on the built-in denied-binaries list, so there is nothing to lift; name a denied program, such as `ssh` or `chmod`",
                shorten(b, 64)
            )));
        }
        if extra_denied.contains(b) {
            return Err(invalid(format!(
                "`{}` is also in extra_denied_binaries; remove it from one of the two",
                shorten(b, 64)
            )));
        }
        if !lifted.contains(b) {
            lifted.push(b.clone());
        }
    }
    Ok(lifted)
}

/// The mode table (docs/ARCHITECTURE.md "Reference: modes, tools,
/// budgets"), for calls no rule decided.
pub(crate) fn mode_verdict(mode: Mode, class: ToolClass) -> Verdict {
    match class {
        ToolClass::Read | ToolClass::Planning | ToolClass::Interaction => Verdict::Allow,
        ToolClass::Write => match mode {
            Mode::Default => Verdict::Ask,
            Mode::AcceptEdits | Mode::DangerouslySkipPermissions => Verdict::Allow,
            Mode::Plan | Mode::DontAsk => Verdict::Deny,
        },
        ToolClass::Action => match mode {
            Mode::Default | Mode::AcceptEdits => Verdict::Ask,
            Mode::DangerouslySkipPermissions => Verdict::Allow,
            Mode::Plan | Mode::DontAsk => Verdict::Deny,
        },
    }
}

fn shown_rel(r: &Resolved) -> String {
    paths::show(&r.rel)
}

fn place_name(r: &Resolved) -> String {
    if r.rel == "." {
        "the workspace".to_string()
    } else {
        shown_rel(r)
    }
}

/// job_output, kill_job: of one of the session's own background jobs (the
/// gate finds it in the session's table, or says there is none).
fn job_tool(what: &str, job_id: &str) -> Analysis {
    let id = shorten(job_id, 64);
    let mut a = Analysis::new(format!("{what} {id}"), Subject::Nothing);
    a.target = id;
    a
}

/// webfetch: the SSRF guard vets the URL and pins its addresses.
fn webfetch(url: &str, dns: &dyn Resolver) -> Analysis {
    match crate::ssrf::vet(url, dns) {
        Ok(f) => {
            let mut a = Analysis::new(
                crate::ssrf::consequence(&f),
                Subject::Url {
                    url: f.url.clone(),
                    host: f.host.clone(),
                },
            );
            a.target = f.url.clone();
            a.fetch = Some(f);
            a
        }
        Err(r) => Analysis::refused(crate::ssrf::RULE, r.reason, r.consequence),
    }
}

/// An MCP server's tool: the names must be what MCP allows (letters, digits,
/// `_`, `-`; a tool name may also hold `.`), so a rule's `SERVER.TOOL` is
/// never ambiguous and nothing odd reaches a reason or the audit log.
fn mcp_call(server: &str, tool: &str) -> Analysis {
    let consequence = format!(
        "call `{}` of the MCP server `{}`",
        shorten(tool, 128),
        shorten(server, 128)
    );
    let refused =
        crate::mcp::check_server_name(server).or_else(|| crate::mcp::check_tool_name(tool));
    if let Some(why) = refused {
        return Analysis::refused(
            "floor:mcp-name",
            format!("{why}, so it is refused."),
            consequence,
        );
    }
    let mut a = Analysis::new(
        consequence,
        Subject::Mcp {
            server: server.to_string(),
            tool: tool.to_string(),
        },
    );
    a.target = format!("{server}.{tool}");
    a
}

/// read_file, write_file, edit_file: resolve, floor, consequence.
fn file_tool(
    raw: &str,
    access: Access,
    ctx: &Context,
    fs: &dyn FsFacts,
    consequence: impl Fn(&Resolved) -> String,
) -> Analysis {
    let verb = match access {
        Access::Read => "read",
        Access::Write | Access::Search => "write",
    };
    match paths::resolve(raw, access, ctx, fs) {
        Err(r) => Analysis::refused(r.rule, r.reason, format!("{verb} {}", paths::show(raw))),
        Ok(r) => {
            let mut a = Analysis::new(consequence(&r), Subject::Path(r.rel.clone()));
            if r.secret {
                a.secret = Some(format!("`{}`", shown_rel(&r)));
            }
            if let Some(hit) = &r.host_exec {
                confirm_host_exec(&mut a, &r, hit);
            }
            a.target = escape(&r.rel);
            a.path = Some(r.abs);
            a
        }
    }
}

/// A write to a path the host runs by itself: destructive in every mode,
/// and the consequence says what will run it.
fn confirm_host_exec(a: &mut Analysis, r: &Resolved, hit: &crate::host_exec::HostExecHit) {
    let at = paths::show(&hit.at.to_string_lossy());
    a.consequence = format!("{}; {}", a.consequence, hit.runs);
    a.destructive = Some((
        "confirm:host-exec".to_string(),
        format!(
            "`{}` is in `{at}`, which the host runs by itself: {}. What is written there runs outside the sandbox, as the user, so it needs the user's typed confirmation.",
            shown_rel(r),
            hit.runs
        ),
        None,
    ));
}

/// glob_files, grep: the search root and any glob arguments stay inside.
fn search_tool(
    raw: Option<&str>,
    globs: &[impl AsRef<str>],
    ctx: &Context,
    fs: &dyn FsFacts,
    consequence: impl Fn(&Resolved) -> String,
) -> Analysis {
    for g in globs {
        let g = g.as_ref();
        let escapes =
            g.starts_with('/') || g.starts_with('~') || g.split(['/', '\\']).any(|c| c == "..");
        if escapes {
            return Analysis::refused(
                "floor:path-scope",
                format!(
                    "the glob `{}` reaches outside the workspace; globs are relative to the workspace and cannot use `..`, `~` or absolute paths.",
                    paths::show(g)
                ),
                String::new(),
            );
        }
    }
    // No path, or an empty one: the workspace.
    let raw = raw.filter(|r| !r.is_empty()).unwrap_or(".");
    match paths::resolve(raw, Access::Search, ctx, fs) {
        Err(r) => Analysis::refused(r.rule, r.reason, format!("search {}", paths::show(raw))),
        Ok(r) => {
            let mut a = Analysis::new(consequence(&r), Subject::Path(r.rel.clone()));
            if r.secret {
                a.secret = Some(format!("`{}`", shown_rel(&r)));
            }
            a.target = escape(&r.rel);
            a.path = Some(r.abs);
            a
        }
    }
}
