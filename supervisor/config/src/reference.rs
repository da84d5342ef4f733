//! Every key of the config file, with its type, default and meaning: the
//! one source of `tollgate.toml(5)` (rendered by `tollgate_clidocs`, written
//! by `supervisor __generate-docs DIR`). A test holds it to the parser: each
//! section's keys are exactly the ones the parser accepts, and each default
//! written here is the one a config without the key gets.

/// One key.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    pub key: &'static str,
    /// What it holds, in words (`integer`, `path`, `"native" | "docker"`).
    pub kind: &'static str,
    /// The default as TOML; `None` when the key is unset by default.
    pub default: Option<&'static str>,
    pub doc: &'static str,
}

/// One section.
#[derive(Debug, Clone, Copy)]
pub struct Section {
    pub name: &'static str,
    pub doc: &'static str,
    pub keys: &'static [Key],
}

const fn key(
    key: &'static str,
    kind: &'static str,
    default: Option<&'static str>,
    doc: &'static str,
) -> Key {
    Key {
        key,
        kind,
        default,
        doc,
    }
}

const INT: &str = "integer";
const NUM: &str = "number";
const BOOL: &str = "boolean";
const STR: &str = "string";
const PATH: &str = "path";
const RULES: &str = "array of rules";
const LIST: &str = "array of strings";
const MODE: &str = "default | acceptEdits | plan | dontAsk | dangerouslySkipPermissions";

/// The sections in the order the page lists them.
pub const SECTIONS: &[Section] = &[
    Section {
        name: "supervisor",
        doc: "The supervisor's sockets and its limits per connecting user.",
        keys: &[
            key(
                "state_dir",
                PATH,
                Some("\"/run/tollgate\""),
                "Where agent.sock and operator.sock are created (overridden by --state-dir). Changes at the next start.",
            ),
            key(
                "operator_group",
                STR,
                None,
                "A group whose members may use operator.sock (mode 0660 then); unset: root only (0600).",
            ),
            key(
                "max_sessions_per_uid",
                INT,
                Some("16"),
                "Live sessions one uid may hold.",
            ),
            key(
                "max_connections_per_uid",
                INT,
                Some("64"),
                "Connections one uid may hold open on agent.sock at once; more are refused at once.",
            ),
            key(
                "idle_connection_timeout_s",
                INT,
                Some("5"),
                "An agent.sock connection with no request in flight this long is closed.",
            ),
            key(
                "fd_reserve",
                INT,
                Some("256"),
                "File descriptors agent.sock can never take: operators, the audit log, sandboxes and LLM calls keep them.",
            ),
        ],
    },
    Section {
        name: "sandbox",
        doc: "Where commands run: the native sandbox (namespaces, Landlock, seccomp, cgroups) or a Docker container.",
        keys: &[
            key(
                "backend",
                "\"native\" | \"docker\"",
                Some("\"native\""),
                "The sandbox backend (overridden by --sandbox).",
            ),
            key(
                "image",
                STR,
                Some("\"\""),
                "The Docker image; empty: the backend's default tag.",
            ),
            key(
                "memory_mb",
                INT,
                Some("2048"),
                "Memory limit of each sandbox.",
            ),
            key("pids", INT, Some("256"), "Process limit of each sandbox."),
            key("cpus", NUM, Some("1.0"), "CPU limit of each sandbox."),
            key(
                "run_timeout_s",
                INT,
                Some("120"),
                "A command's time limit when the call names none.",
            ),
            key(
                "max_run_timeout_s",
                INT,
                Some("600"),
                "The most a call may ask for.",
            ),
            key(
                "tmp_mb",
                INT,
                Some("256"),
                "Size of each sandbox's private /tmp.",
            ),
            key(
                "fsize_mb",
                INT,
                Some("1024"),
                "The largest file a sandboxed command may write (RLIMIT_FSIZE).",
            ),
            key(
                "docker_socket",
                PATH,
                Some("\"\""),
                "The Docker engine socket; empty: found as the docker CLI finds it (DOCKER_HOST, the context, /var/run/docker.sock).",
            ),
            key(
                "min_free_mb",
                INT,
                Some("256"),
                "Free space a workspace's filesystem must keep; below it commands stop and writes are refused. 0: no floor.",
            ),
            key(
                "docker_exec_agent",
                PATH,
                Some("\"\""),
                "The Docker backend's resident exec agent; empty: the one beside the supervisor.",
            ),
            key(
                "git_dir",
                "\"read-only\" | \"split\"",
                Some("\"read-only\""),
                "How a workspace's git directories are attached: all read-only, or split (what the host's git obeys read-only, the rest writable).",
            ),
            key(
                "toolchain_dirs",
                LIST,
                Some(
                    "[\".cargo/bin\", \".rustup\", \".local/bin\", \".local/lib\", \".pyenv\", \".nvm\", \".volta\", \".bun\", \"go/bin\", \".deno\", \".sdkman\"]",
                ),
                "The owner's toolchain directories (relative to their home) shown read-only inside the sandbox; never a credential path or a file the host runs by itself.",
            ),
            key(
                "attribute_refusals",
                "\"auto\" | \"on\" | \"off\"",
                Some("\"auto\""),
                "Attribute the native sandbox's refusals from the kernel's audit records: when audit is already on, also turn it on, or never.",
            ),
            key(
                "cache",
                "\"owner\" | \"workspace\" | \"off\"",
                Some("\"owner\""),
                "Package caches (npm, pip, cargo, Go modules, bun, yarn) kept between sessions: one per owner, one per owner and workspace, or none (the session's private home, emptied when it ends).",
            ),
            key(
                "cache_max_mb",
                INT,
                Some("2048"),
                "The most one cache may hold; over it the oldest files are removed when a sandbox is built. 0: no cap.",
            ),
            key(
                "cache_dir",
                PATH,
                Some("\"\""),
                "Where the caches are kept, outside every workspace; empty: caches beneath the state directory.",
            ),
        ],
    },
    Section {
        name: "audit",
        doc: "The hash-chained audit log.",
        keys: &[
            key(
                "dir",
                PATH,
                Some("\"/var/log/tollgate\""),
                "The audit directory (overridden by --audit-dir). Changes at the next start.",
            ),
            key(
                "sync",
                "\"always\" | \"batch\"",
                Some("\"always\""),
                "fsync every record before it counts, or in batches (a crash may lose the last few).",
            ),
            key(
                "reserve_mb",
                INT,
                Some("16"),
                "Space held back for refusals, revocations, anchors and shutdown when the disk fills. 0: none.",
            ),
        ],
    },
    Section {
        name: "session",
        doc: "What a session may do and for how long.",
        keys: &[
            key(
                "default_mode",
                MODE,
                Some("\"default\""),
                "The mode of a session that asks for none.",
            ),
            key(
                "max_mode",
                MODE,
                Some("\"dangerouslySkipPermissions\""),
                "The most permissive mode a session may ask for.",
            ),
            key(
                "allow_dangerously_skip",
                BOOL,
                Some("true"),
                "Whether dangerouslySkipPermissions may be asked for at all.",
            ),
            key(
                "session_can_approve",
                BOOL,
                Some("true"),
                "Whether the agent's own terminal may decide its session's approvals.",
            ),
            key(
                "approval_timeout_s",
                INT,
                Some("300"),
                "An approval nobody decides in this long is refused.",
            ),
            key(
                "auto_approve",
                BOOL,
                Some("false"),
                "Approve the non-destructive ask tier automatically (unattended runs).",
            ),
            key(
                "max_tool_calls",
                INT,
                Some("200"),
                "Tool calls per session.",
            ),
            key(
                "token_ttl_s",
                INT,
                Some("900"),
                "A session token's lifetime; the agent refreshes it.",
            ),
            key(
                "output_cap_bytes",
                INT,
                Some("32768"),
                "The most of a tool's output the model gets.",
            ),
            key(
                "fetch_max_bytes",
                INT,
                Some("1048576"),
                "webfetch: the largest body read.",
            ),
            key(
                "fetch_timeout_s",
                INT,
                Some("30"),
                "webfetch: the per-fetch timeout.",
            ),
        ],
    },
    Section {
        name: "clients",
        doc: "Claude Code and Codex behind `agent hook`.",
        keys: &[
            key(
                "route_shell",
                BOOL,
                Some("true"),
                "Run the clients' shell tool through run_bash in the session's sandbox; off: decisions only.",
            ),
            key(
                "mode",
                MODE,
                None,
                "The mode of a client's session; unset: [session] default_mode.",
            ),
            key(
                "idle_timeout_s",
                INT,
                Some("3600"),
                "A client's session with no event this long is closed.",
            ),
        ],
    },
    Section {
        name: "llm",
        doc: "The model the agent talks to, through the supervisor (the key never reaches the agent).",
        keys: &[
            key(
                "provider",
                "\"openai\" | \"script\"",
                Some("\"script\""),
                "An OpenAI-compatible server, or a script of replies (tests, demos).",
            ),
            key(
                "base_url",
                STR,
                Some("\"\""),
                "The OpenAI-compatible base URL, e.g. http://127.0.0.1:11434/v1.",
            ),
            key(
                "api_key_env",
                STR,
                Some("\"\""),
                "The environment variable holding the API key.",
            ),
            key(
                "api_key_file",
                PATH,
                None,
                "A file holding the key: the supervisor's own, readable by no one else.",
            ),
            key(
                "api_key_credential",
                STR,
                Some("\"\""),
                "A systemd credential holding the key (LoadCredential=NAME:...), read from $CREDENTIALS_DIRECTORY/NAME.",
            ),
            key(
                "model",
                STR,
                Some("\"\""),
                "The model name sent to the provider.",
            ),
            key(
                "timeout_s",
                INT,
                Some("120"),
                "One provider call's time limit.",
            ),
            key(
                "max_cost_usd",
                NUM,
                Some("5.0"),
                "A session's spending cap.",
            ),
            key(
                "price_in_per_1k",
                NUM,
                Some("0.0"),
                "Price of 1000 input tokens, for the cap.",
            ),
            key(
                "price_out_per_1k",
                NUM,
                Some("0.0"),
                "Price of 1000 output tokens, for the cap.",
            ),
            key(
                "script",
                PATH,
                None,
                "For provider \"script\": a JSON array of assistant turns.",
            ),
            key(
                "max_response_bytes",
                INT,
                Some("8388608"),
                "The largest provider response accepted.",
            ),
            key(
                "proxy",
                STR,
                None,
                "The HTTP(S) proxy the provider is reached through (http://HOST:PORT); unset: none. HTTP_PROXY and HTTPS_PROXY in the environment are never used.",
            ),
            key(
                "retries",
                INT,
                Some("2"),
                "Times a call the provider answered 429 or 5xx is tried again, after its Retry-After (else 1 s, then 2 s, ...); each retry is an llm_retry audit record. 0: never.",
            ),
            key(
                "max_retry_wait_s",
                INT,
                Some("30"),
                "The longest wait before a retry; a Retry-After asking for longer ends the call.",
            ),
        ],
    },
    Section {
        name: "policy",
        doc: "The rules (also merged from policy.d/*.toml beside the file, in name order). A rule is `tool` or `tool(pattern)`, or a table { rule = \"...\", match = [...], not_match = [...] } whose examples are checked at load. A reload (SIGHUP, supervisorctl reload) puts a new [policy] in force at once.",
        keys: &[
            key("allow", RULES, Some("[]"), "Calls that run without asking."),
            key(
                "ask",
                RULES,
                Some("[]"),
                "Calls that need a person's approval.",
            ),
            key(
                "deny",
                RULES,
                Some("[]"),
                "Calls that are refused; deny wins over ask, ask over allow.",
            ),
            key(
                "extra_denied_binaries",
                LIST,
                Some("[]"),
                "Binaries refused in every mode, on top of the built-in denylist.",
            ),
            key(
                "allow_binaries",
                LIST,
                Some("[]"),
                "Names lifted from the built-in denylist for this host (still judged like any command).",
            ),
            key(
                "extra_confirm_patterns",
                LIST,
                Some("[]"),
                "Regexes over a run_bash command that put it in the always-confirm tier.",
            ),
            key(
                "lift_patterns",
                "array of { pattern, reason }",
                Some("[]"),
                "Dangerous patterns of the shell floor lifted for this host, each with why.",
            ),
        ],
    },
    Section {
        name: "network",
        doc: "Which hosts sandboxed commands may reach; absent: no network at all.",
        keys: &[
            key(
                "allow",
                LIST,
                None,
                "Host names (globs) and ports a command may connect to.",
            ),
            key(
                "deny",
                LIST,
                None,
                "Host names refused even when an allow entry matches.",
            ),
            key(
                "unlisted",
                "\"deny\" | \"ask\"",
                None,
                "What a host no entry names gets (default deny).",
            ),
            key(
                "allow_private",
                LIST,
                None,
                "CIDRs an allowed name may resolve to despite the SSRF guard.",
            ),
            key(
                "trust_ca",
                LIST,
                None,
                "PEM files of extra CAs (a corporate one) the egress proxy trusts, beside the host's trust store, when it connects on to a host a secret is bound to.",
            ),
            key(
                "upstream_proxy",
                STR,
                None,
                "http://HOST:PORT of an HTTP proxy (a corporate one) that every allowed connection goes out through by CONNECT; absent: straight out.",
            ),
        ],
    },
    Section {
        // An array of tables: `[[secrets]]`, one per secret.
        name: "[secrets]",
        doc: "Secrets a sandbox can use but never read: the sandbox sees a placeholder, the egress proxy puts the value in toward the bound hosts only (one [[secrets]] table per secret).",
        keys: &[
            key(
                "name",
                STR,
                None,
                "What records and supervisorctl secrets list show: 1-64 letters, digits, - or _.",
            ),
            key(
                "from_env",
                STR,
                None,
                "The supervisor's environment variable holding the value (one source of three).",
            ),
            key(
                "from_file",
                PATH,
                None,
                "A file holding it, owned by the supervisor's uid and readable by no one else.",
            ),
            key(
                "from_credential",
                STR,
                None,
                "A systemd credential (LoadCredential=NAME:...), read from $CREDENTIALS_DIRECTORY/NAME.",
            ),
            key(
                "hosts",
                LIST,
                None,
                "Where it may be sent: [network] allow's grammar.",
            ),
            key(
                "env",
                STR,
                None,
                "The variable the sandbox sees, holding a placeholder.",
            ),
            key(
                "header",
                STR,
                None,
                "The header the proxy sets on every request to a bound host.",
            ),
            key(
                "format",
                STR,
                None,
                "\"TEXT{}TEXT\" (\"Bearer {}\"), \"basic\" (the value is user:password) or \"basic:USER\"; needs header.",
            ),
            key(
                "owners",
                LIST,
                None,
                "The users whose sessions get it; empty: every session's.",
            ),
        ],
    },
    Section {
        name: "telemetry",
        doc: "OpenTelemetry export of the audit events; off unless an endpoint is set.",
        keys: &[
            key(
                "endpoint",
                STR,
                None,
                "The OTLP/gRPC collector, e.g. http://127.0.0.1:4317, or https://HOST:PORT (TLS, checked against the system's roots and ca_file).",
            ),
            key(
                "log_tool_details",
                BOOL,
                Some("false"),
                "Include arguments, targets, reasons and output excerpts (redacted as the audit log is).",
            ),
            key(
                "queue_size",
                INT,
                Some("4096"),
                "Events held for export; past this they are dropped and counted.",
            ),
            key(
                "batch_size",
                INT,
                Some("256"),
                "Events sent per export request.",
            ),
            key(
                "export_timeout_ms",
                INT,
                Some("5000"),
                "One export's time limit; its events count as failed past it.",
            ),
            key(
                "service_name",
                STR,
                Some("\"tollgate\""),
                "service.name of the exported resource.",
            ),
            key(
                "metrics_interval_s",
                INT,
                Some("60"),
                "Seconds between OTLP metrics exports of the counters supervisorctl status shows (sessions, decisions by verdict, refusals, approvals pending, egress connections); 0: none.",
            ),
            key(
                "ca_file",
                PATH,
                None,
                "For an https:// endpoint: a PEM file of the CA(s) that signed the collector's certificate, trusted besides the system's roots.",
            ),
        ],
    },
    Section {
        name: "log",
        doc: "The supervisor's own diagnostics on stderr or the journal (RUST_LOG, when set, wins).",
        keys: &[key(
            "level",
            "\"error\" | \"warn\" | \"info\" | \"debug\" | \"trace\"",
            None,
            "Unset: lifecycle events (start, ready, reload, sessions opened and closed, revocations) at info, the rest at warn.",
        )],
    },
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;
    use std::path::Path;

    /// The names the parser accepts where `text` has an unknown one, from
    /// its own refusal ("expected one of `a`, `b`", "expected `a`").
    fn expected(text: &str) -> Vec<String> {
        let err = Config::parse(text, Path::new("x.toml"))
            .unwrap_err()
            .to_string();
        let list = err
            .split("expected")
            .nth(1)
            .unwrap_or_else(|| panic!("{text}: {err}"));
        let mut keys: Vec<String> = list
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_string)
            .collect();
        keys.sort();
        keys
    }

    fn accepted(section: &str) -> Vec<String> {
        expected(&format!("[{section}]\nno_such_key_here = 1\n"))
    }

    #[test]
    fn every_section_and_key_the_parser_accepts_is_documented_and_no_other() {
        let mut sections: Vec<String> = SECTIONS
            .iter()
            .map(|s| s.name.trim_matches(['[', ']']).to_string())
            .collect();
        sections.sort();
        assert_eq!(sections, expected("no_such_section = 1\n"), "sections");
        for s in SECTIONS {
            let mut documented: Vec<String> = s.keys.iter().map(|k| k.key.to_string()).collect();
            documented.sort();
            assert_eq!(documented, accepted(s.name), "[{}]", s.name);
        }
    }

    #[test]
    fn each_documented_default_is_the_real_one() {
        let defaults = Config::default();
        for s in SECTIONS {
            for k in s.keys {
                let Some(d) = k.default else { continue };
                let text = format!("[{}]\n{} = {d}\n", s.name, k.key);
                let c = Config::parse(&text, Path::new("x.toml"))
                    .unwrap_or_else(|e| panic!("[{}] {} = {d}: {e}", s.name, k.key));
                assert!(
                    c == defaults,
                    "[{}] {}: the default is not {d}",
                    s.name,
                    k.key
                );
            }
        }
    }
}
