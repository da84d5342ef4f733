//! `supervisorctl policy test`: the engine offline, JSON Lines in and out.
//!
//! Each input line is `{"tool":"…","args":{…},"mode":"…"}` (`mode` optional;
//! a wrapped MCP server's tool is `"tool":"mcp(NAME.TOOL)"`, args ignored;
//! an optional `"read":["path",…]` lists files the session is taken to have
//! read, for overwrite checks). Each output line, in order, is
//! `{"decision":"allow|ask|deny","code":"…","reason":"…","rule":null|"…","destructive":false,"consequence":"…"}`;
//! a line that is not a JSON call gets `{"error":"…"}` and the run goes on.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::PathBuf;

use serde_json::{Value, json};

use crate::paths::{follow, lexical_join};
use crate::{
    Code, Context, Decision, Engine, FsFacts, Mode, ModeCap, PolicyConfig, Resolver, ToolCall,
};

/// What `supervisorctl policy test` was given.
#[derive(Debug, Clone, PartialEq)]
pub struct TestOptions {
    /// The directory path arguments are judged against (absolute).
    pub workspace: PathBuf,
    /// The mode for lines that name none.
    pub mode: Mode,
    /// The `[policy]` section of the supervisor config.
    pub config: PolicyConfig,
    /// The config's cap on modes (`[session]` max_mode, allow_dangerously_skip).
    pub cap: ModeCap,
    /// The home directory `~` stands for (credential paths); `None`: root's.
    pub home: Option<PathBuf>,
    /// The supervisor's own files (config, state and audit dirs).
    pub protected: Vec<PathBuf>,
    /// The workspace repository's host-executed paths (as the daemon finds
    /// them: `core.hooksPath`, included configs, git directories).
    pub repo: Vec<crate::host_exec::RepoPath>,
}

impl TestOptions {
    pub fn new(workspace: PathBuf, mode: Mode, config: PolicyConfig) -> TestOptions {
        TestOptions {
            workspace,
            mode,
            config,
            cap: ModeCap::NONE,
            home: None,
            protected: Vec::new(),
            repo: Vec::new(),
        }
    }
}

/// Runs the line protocol. Fails only when the policy itself does not load
/// (`InvalidData`, with the policy error as message) or on I/O errors.
pub fn run(
    input: &mut dyn BufRead,
    output: &mut dyn Write,
    opts: &TestOptions,
    fs: &dyn FsFacts,
    dns: &dyn Resolver,
) -> std::io::Result<()> {
    let engine = Engine::new(&opts.config).map_err(|e| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("policy: {e}"))
    })?;
    // Judge against the real workspace, as the daemon does (it canonicalises
    // at OpenSession): resolve its symlinks through the same facts.
    let workspace = if opts.workspace.is_absolute() {
        follow(&opts.workspace, &opts.workspace, fs).unwrap_or_else(|| opts.workspace.clone())
    } else {
        opts.workspace.clone()
    };
    let mut line = String::new();
    let mut n = 0usize;
    loop {
        line.clear();
        if input.read_line(&mut line)? == 0 {
            break;
        }
        n += 1;
        let text = line.trim_end_matches(['\n', '\r']);
        let out = match one_line(text, n, &engine, opts, &workspace, fs, dns) {
            Ok(d) => decision_json(&d),
            Err(e) => json!({ "error": e }),
        };
        writeln!(output, "{out}")?;
    }
    output.flush()
}

fn one_line(
    text: &str,
    n: usize,
    engine: &Engine,
    opts: &TestOptions,
    workspace: &std::path::Path,
    fs: &dyn FsFacts,
    dns: &dyn Resolver,
) -> Result<Decision, String> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("line {n}: not valid JSON: {e}"))?;
    let shape = || format!("line {n}: expected {{\"tool\":\"…\",\"args\":{{…}},\"mode\":\"…\"}}");
    let Some(obj) = v.as_object() else {
        return Err(shape());
    };
    let Some(tool) = obj.get("tool").and_then(Value::as_str) else {
        return Err(shape());
    };
    let mode = match obj.get("mode") {
        None | Some(Value::Null) => opts.mode,
        Some(Value::String(m)) => Mode::parse(m).map_err(|e| format!("line {n}: {e}"))?,
        Some(_) => return Err(format!("line {n}: `mode` must be a string")),
    };
    if let Err(e) = opts.cap.check(mode) {
        let mut d = Decision::deny(
            Code::PolicyDenied,
            format!("{e}; start the session in a permitted mode."),
            Some("mode-cap"),
        );
        d.consequence = String::new();
        return Ok(d);
    }
    let mut read_files = BTreeSet::new();
    if let Some(read) = obj.get("read") {
        let Some(list) = read.as_array() else {
            return Err(format!("line {n}: `read` must be an array of paths"));
        };
        for p in list {
            let Some(p) = p.as_str() else {
                return Err(format!("line {n}: `read` must be an array of paths"));
            };
            let abs = lexical_join(workspace, p);
            read_files.insert(follow(&abs, workspace, fs).unwrap_or(abs));
        }
    }
    let ctx = Context {
        workspace: workspace.to_path_buf(),
        mode,
        tools: None,
        home: opts.home.clone(),
        protected: opts.protected.clone(),
        read_files,
        repo: opts.repo.clone(),
        // Judged as run_bash is: in the sandbox of an owner with this home.
        sandbox: Some(crate::sandbox_env::SandboxView::of(
            opts.home.as_deref(),
            Vec::new(),
        )),
    };
    if let Some(mcp) = crate::mcp::parse_call(tool) {
        return Ok(engine.decide_mcp(&mcp, mode));
    }
    let call = ToolCall {
        tool: tool.to_string(),
        args: obj.get("args").cloned().unwrap_or(Value::Null),
    };
    Ok(engine.decide(&call, &ctx, fs, dns))
}

fn decision_json(d: &Decision) -> Value {
    json!({
        "decision": d.verdict.as_str(),
        "code": d.code.as_str(),
        "reason": d.reason,
        "rule": d.rule,
        "destructive": d.destructive,
        "consequence": d.consequence,
    })
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::path::Path;

    use super::*;
    use crate::{FileFacts, FileKind, HostAddrs, HostAddrsError, ResolveError};

    struct Fs;
    impl FsFacts for Fs {
        fn symlink_metadata(&self, p: &Path) -> Option<FileFacts> {
            let dir = FileFacts {
                kind: FileKind::Dir,
                size: 0,
                nlink: 1,
            };
            match p.to_str()? {
                "/" | "/w" => Some(dir),
                "/w/README.md" => Some(FileFacts {
                    kind: FileKind::File,
                    size: 214,
                    nlink: 1,
                }),
                _ => None,
            }
        }
        fn read_link(&self, _: &Path) -> Option<PathBuf> {
            None
        }
    }

    struct Dns;
    impl Resolver for Dns {
        fn host_addrs(&self) -> Result<&HostAddrs, HostAddrsError> {
            Ok(HostAddrs::none())
        }

        fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, ResolveError> {
            match host {
                "example.com" => Ok(vec!["93.184.216.34".parse().unwrap()]),
                _ => Err(ResolveError::NotFound(host.to_string())),
            }
        }
    }

    fn run_lines(input: &str, opts: &TestOptions) -> Vec<Value> {
        let mut out = Vec::new();
        run(&mut input.as_bytes(), &mut out, opts, &Fs, &Dns).unwrap();
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn one_line_out_per_line_in_with_errors_inline() {
        let opts = TestOptions::new("/w".into(), Mode::Default, PolicyConfig::default());
        let input = concat!(
            "{\"tool\":\"read_file\",\"args\":{\"path\":\"README.md\"}}\n",
            "not json\n",
            "{\"tool\":\"write_file\",\"args\":{\"path\":\"README.md\",\"content\":\"\"},\"read\":[\"README.md\"]}\n",
            "{\"tool\":\"run_bash\",\"args\":{\"command\":\"curl x\"},\"mode\":\"dangerouslySkipPermissions\"}\n",
            "{\"tool\":\"webfetch\",\"args\":{\"url\":\"http://example.com/\"}}\n",
            "{\"tool\":\"x\",\"mode\":\"yolo\"}\n",
            "[1]\n",
        );
        let out = run_lines(input, &opts);
        assert_eq!(out.len(), 7);
        assert_eq!(
            out[0],
            json!({"decision":"allow","code":"OK","reason":"read calls run without approval in default mode.","rule":"mode:default","destructive":false,"consequence":"read README.md"})
        );
        assert!(
            out[1]["error"]
                .as_str()
                .unwrap()
                .starts_with("line 2: not valid JSON")
        );
        assert_eq!(out[2]["decision"], "ask");
        assert_eq!(out[2]["destructive"], true);
        assert_eq!(
            out[2]["consequence"],
            "write empty content over README.md (214 bytes; same as deleting it)"
        );
        assert_eq!(out[3]["decision"], "deny");
        assert_eq!(out[3]["rule"], "floor:denied-binary");
        assert_eq!(out[4]["decision"], "ask");
        assert_eq!(
            out[4]["consequence"],
            "fetch http://example.com/ (93.184.216.34)"
        );
        assert!(
            out[5]["error"]
                .as_str()
                .unwrap()
                .contains("unknown mode \"yolo\"")
        );
        assert!(
            out[6]["error"]
                .as_str()
                .unwrap()
                .starts_with("line 7: expected")
        );
        let keys: Vec<&String> = out[0].as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 6);
    }

    #[test]
    fn mcp_calls_are_decided_by_mcp_rules_default_ask() {
        let mut config = PolicyConfig::default();
        config
            .allow
            .push(crate::RuleSpec::Bare("mcp(docs.*)".into()));
        config
            .deny
            .push(crate::RuleSpec::Bare("mcp(github.delete_*)".into()));
        let opts = TestOptions::new("/w".into(), Mode::Default, config);
        let out = run_lines(
            concat!(
                "{\"tool\":\"mcp\",\"args\":{\"server\":\"github\",\"tool\":\"create_issue\"}}\n",
                "{\"tool\":\"mcp\",\"args\":{\"server\":\"github\",\"tool\":\"delete_repo\"}}\n",
                "{\"tool\":\"mcp\",\"args\":{\"server\":\"docs\",\"tool\":\"search\"}}\n",
                "{\"tool\":\"mcp\",\"args\":{\"server\":\"a.b\",\"tool\":\"x\"}}\n",
                "{\"tool\":\"mcp\",\"args\":{\"server\":\"docs\"}}\n",
            ),
            &opts,
        );
        assert_eq!(
            out[0],
            json!({"decision":"ask","code":"APPROVAL_REQUIRED","reason":"calling an MCP server's tool needs the user's approval in default mode.","rule":"mode:default","destructive":false,"consequence":"call `create_issue` of the MCP server `github`"})
        );
        assert_eq!(out[1]["decision"], "deny");
        assert_eq!(out[1]["rule"], "deny: mcp(github.delete_*)");
        assert_eq!(out[2]["decision"], "allow");
        assert_eq!(out[2]["rule"], "allow: mcp(docs.*)");
        assert_eq!(out[3]["rule"], "floor:mcp-name");
        assert_eq!(out[4]["code"], "INVALID_ARGS");
    }

    #[test]
    fn mcp_gateway_calls_are_decided_by_mcp_rules() {
        let mut config = PolicyConfig::default();
        config
            .deny
            .push(crate::RuleSpec::Bare("mcp(fs.write_file)".into()));
        config.allow.push(crate::RuleSpec::Bare("mcp(fs.*)".into()));
        let opts = TestOptions::new("/w".into(), Mode::Default, config);
        let out = run_lines(
            concat!(
                "{\"tool\":\"mcp(fs.write_file)\",\"args\":{\"path\":\"/etc/x\"}}\n",
                "{\"tool\":\"mcp(fs.read_file)\"}\n",
                "{\"tool\":\"mcp(git.push)\"}\n",
            ),
            &opts,
        );
        assert_eq!(out[0]["decision"], "deny");
        assert_eq!(out[0]["rule"], "deny: mcp(fs.write_file)");
        assert_eq!(out[1]["decision"], "allow");
        assert_eq!(out[2]["decision"], "ask");
        assert_eq!(out[2]["rule"], "mode:default");
    }

    #[test]
    fn the_mode_cap_is_applied_per_line() {
        let mut opts = TestOptions::new("/w".into(), Mode::Default, PolicyConfig::default());
        opts.cap = ModeCap {
            max: Mode::AcceptEdits,
            allow_dangerously_skip: false,
        };
        let out = run_lines(
            "{\"tool\":\"todo_list\",\"args\":{},\"mode\":\"dangerouslySkipPermissions\"}\n",
            &opts,
        );
        assert_eq!(out[0]["decision"], "deny");
        assert_eq!(out[0]["rule"], "mode-cap");
    }

    #[test]
    fn a_bad_policy_fails_the_run() {
        let mut config = PolicyConfig::default();
        config.deny.push(crate::RuleSpec::Bare("nosuchtool".into()));
        let opts = TestOptions::new("/w".into(), Mode::Default, config);
        let mut out = Vec::new();
        let e = run(&mut "".as_bytes(), &mut out, &opts, &Fs, &Dns).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("unknown tool `nosuchtool`"), "{e}");
    }
}
