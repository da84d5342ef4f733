//! A host for the gate's tests: a real engine, a real audit log in a
//! temporary directory, a recording sandbox backend, and a log of the
//! records written (in order) that can be told to fail a kind of record.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tollgate_audit::event::Verdict;
use tollgate_audit::{Audit, AuditError, AuditFile, Durable, Event, Priority, Redactor, SyncMode};
use tollgate_config::Config;
use tollgate_policy::Engine;
use tollgate_policy::host::SystemResolver;
use tollgate_sandbox::recording::RecordingBackend;
use tollgate_sandbox::{Backend, SandboxSpec};

use crate::approvals::{Answer, Approvals, Scope};
use crate::disk::DiskGuard;
use crate::host::{Ctx, Host};
use crate::in_force::InForce;
use crate::session::{Caps, NewSession, Session};

pub struct TestHost {
    config: Config,
    engine: Arc<InForce>,
    redactor: Redactor,
    pub approvals: Approvals,
    disk: DiskGuard,
    /// One line per record written, in order.
    written: Mutex<Vec<String>>,
    /// The kind of record (its event name) whose write fails.
    fail: Mutex<Option<&'static str>>,
}

/// One line per record: its name and what it says of the call.
fn line(e: &Event) -> String {
    match e {
        Event::PermissionCheck(c) => format!("permission_check {}", verdict(c.decision)),
        Event::ApprovalRequested(_) => "approval_requested".to_string(),
        Event::ApprovalDecided(d) => format!("approval_decided {}", d.outcome.as_str()),
        Event::ToolStarted(_) => "tool_started".to_string(),
        Event::ToolResult(r) => format!("tool_result {}", r.status.as_str()),
        other => other.name().to_string(),
    }
}

fn verdict(v: Verdict) -> &'static str {
    v.as_str()
}

impl Host for TestHost {
    fn config(&self) -> &Config {
        &self.config
    }
    fn engine(&self) -> Arc<InForce> {
        Arc::clone(&self.engine)
    }
    fn redactor(&self) -> &Redactor {
        &self.redactor
    }
    fn approvals(&self) -> &Approvals {
        &self.approvals
    }
    fn disk(&self) -> &DiskGuard {
        &self.disk
    }
    fn write(
        &self,
        session: &Session,
        event: Event,
        durable: Durable,
        priority: Priority,
    ) -> Result<(), AuditError> {
        let file = &session.audit;
        if *self.fail.lock().unwrap() == Some(event.name()) {
            return Err(AuditError::Broken {
                path: file.path().to_path_buf(),
                reason: "fdatasync failed: EIO (injected)".to_string(),
            });
        }
        let l = line(&event);
        file.append_event(&session.id, &event, durable, priority)?;
        self.written.lock().unwrap().push(l);
        Ok(())
    }
    fn sync(&self, file: &AuditFile) -> Result<(), AuditError> {
        file.sync()
    }
    fn resolver(&self) -> SystemResolver {
        SystemResolver::default()
    }
    fn resolver_now(&self) -> SystemResolver {
        SystemResolver::default()
    }
    fn protected_paths(&self) -> Vec<PathBuf> {
        Vec::new()
    }
    fn audit_refused(&self, _session: &str, _what: &str, _error: &dyn std::fmt::Display) {}
    fn sandbox_spec(&self, session: &Session, _token: Option<&str>) -> SandboxSpec {
        SandboxSpec {
            session_id: session.id.clone(),
            workspace: session.workspace.clone(),
            workspace_id: None,
            uid: session.uid,
            gid: session.gid,
            env: Vec::new(),
            limits: tollgate_sandbox::Limits::default(),
            hidden: Vec::new(),
            host_exec: Vec::new(),
            git_dir: tollgate_policy::host_exec::GitDirMode::ReadOnly,
            home: None,
            egress: None,
            private_home: None,
            lease: Default::default(),
            wall: false,
            image: None,
            extra_ca: None,
        }
    }
}

/// The policy every test runs under: `echo` allowed, `ls` denied by rule,
/// everything else asked (default mode).
pub const POLICY: &str = r#"
[policy]
allow = ["run_bash(echo *)", "mcp(srv.read)"]
deny = ["run_bash(ls *)", "mcp(srv.drop)"]
ask = ["mcp(srv.write)"]

[session]
approval_timeout_s = 1
"#;

pub struct Fixture {
    pub host: Arc<TestHost>,
    pub backend: RecordingBackend,
    pub session: Arc<Session>,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl Fixture {
    pub fn new() -> Fixture {
        Fixture::with_mode(tollgate_policy::Mode::Default)
    }

    pub fn with_mode(mode: tollgate_policy::Mode) -> Fixture {
        let config = Config::parse(POLICY, std::path::Path::new("test.toml")).unwrap();
        let engine = Arc::new(InForce::new(
            Engine::new(&config.policy).unwrap(),
            &config.policy,
            Vec::new(),
        ));
        let ws_dir = tempfile::tempdir().unwrap();
        let audit_dir = tempfile::tempdir().unwrap();
        let ws = std::fs::canonicalize(ws_dir.path()).unwrap();
        std::fs::write(ws.join("notes.txt"), "inside the workspace\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        // The audit directory must be the supervisor's alone.
        std::fs::set_permissions(audit_dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let audit = Audit::open(audit_dir.path(), SyncMode::Always, None).unwrap();
        let id = crate::credentials::new_session_id().unwrap();
        let file = audit.open_session(&id).unwrap();
        let (uid, gid) = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        let backend = RecordingBackend::new();
        let (session, _token) = Session::create(NewSession {
            id,
            uid,
            gid,
            pid: std::process::id(),
            workspace: ws.clone(),
            home: None,
            user: "tester".to_string(),
            credentials: Arc::from(Vec::new()),
            repo: Vec::new(),
            mode,
            tools: None,
            caps: Caps {
                max_tool_calls: 100,
                max_cost_usd: 1.0,
                llm_timeout: Duration::from_secs(10),
            },
            model: "m".to_string(),
            client: "test".to_string(),
            client_session_id: String::new(),
            audit: Arc::clone(&file),
            backend: Arc::new(backend.clone()) as Arc<dyn Backend>,
            files: tollgate_tools::Workspace::open(&ws, uid, gid).unwrap(),
            token_ttl: Duration::from_secs(60),
        })
        .unwrap();
        let host = Arc::new(TestHost {
            config,
            engine,
            redactor: Redactor::new(vec!["hunter2-secret".to_string()]),
            approvals: Approvals::default(),
            disk: DiskGuard::new(0),
            written: Mutex::new(Vec::new()),
            fail: Mutex::new(None),
        });
        Fixture {
            host,
            backend,
            session,
            _dirs: (ws_dir, audit_dir),
        }
    }

    pub fn cx(&self) -> Ctx {
        Ctx::new(
            Arc::clone(&self.host) as Arc<dyn Host>,
            Arc::clone(&self.session),
        )
    }

    /// The records written so far, one line each.
    pub fn written(&self) -> Vec<String> {
        self.host.written.lock().unwrap().clone()
    }

    /// Records of kind `name` fail to be written from now on.
    pub fn fail(&self, name: &'static str) {
        *self.host.fail.lock().unwrap() = Some(name);
    }

    /// Waits until an approval is pending, then answers it.
    pub async fn answer(&self, approve: bool, scope: Scope) {
        let (id, target) = loop {
            if let Some(a) = self.host.approvals.list(false).first() {
                break (a.id.clone(), a.target.clone());
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        let answer = Answer {
            approval_id: id,
            approve,
            scope,
            // A destructive approval is confirmed by its target.
            confirm: target,
            reason: if approve {
                String::new()
            } else {
                "not now".to_string()
            },
        };
        self.host
            .approvals
            .decide(&answer, "uid 0 via operator", None)
            .unwrap();
    }

    /// Waits until an approval is pending.
    pub async fn pending(&self) {
        while self.host.approvals.list(false).is_empty() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}
