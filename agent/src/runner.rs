//! The LLM loop: one user message in, model turns through the supervisor's Chat
//! proxy, tool calls through CallTool (or run here, for planning and questions),
//! until the model answers without tool calls or a limit stops it.
//!
//! Every long wait (a model call, a tool call, a line from the user) also watches
//! the session's control stream and Ctrl-C: an approval can be answered while a tool
//! call waits, a revocation ends the agent at once, and Ctrl-C drops the in-flight
//! RPC, which makes the supervisor cancel and kill the tool.

use std::collections::VecDeque;
use std::future::Future;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Map, Value, json};
use tollgate_proto::{
    Approval, ApprovalDecision, ApprovalResolved, ApprovalScope, ApprovalStatus, CallToolRequest,
    CallToolResponse, ChatMessage, ChatRequest, ChatResponse, ChatRole, ChatToolCall, DenialCode,
    ToolSpec,
};
use tollgate_toolcall::ToolName;
use tonic::Code;

use crate::approval::{self, Answer};
use crate::client::{ControlStream, ServerEvent, Session};
use crate::context::{self, message};
use crate::error::AgentError;
use crate::model_text::{self, Mapped, Outcome};
use crate::planning::{self, Planning};
use crate::prompt::{SYSTEM_PROMPT, TOOL_CAP_MESSAGE, TURN_CAP_MESSAGE};
use crate::term::{self, CtrlC, Sink, Stdin};
use crate::text::{cap_for_model, escape_display, one_line, truncate_chars};

/// Characters of each result shown in the transcript.
pub const RESULT_PREVIEW_CHARS: usize = 200;
/// Default cap on one tool result sent to the model (docs/ARCHITECTURE.md "Reference": 32 KiB).
pub const DEFAULT_RESULT_CAP_BYTES: usize = 32 * 1024;
/// After this long without an answer, a tool call says it is still waiting.
const WAIT_NOTE_AFTER: Duration = Duration::from_secs(3);
/// How often a refused decision is offered again at the prompt.
const MAX_DECISION_ATTEMPTS: u8 = 3;

/// Who answers approvals offered to this session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approver {
    /// The person at this terminal (stdin); EOF denies.
    Prompt,
    /// `agent demo`: answers by itself, visibly.
    Demo,
    /// Nobody here: operators decide with supervisorctl (`agent call` without a terminal).
    Operators,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub max_turns: u32,
    pub max_context_tokens: u32,
    pub approver: Approver,
    /// Where the transcript (tool calls, results, intermediate text) goes.
    pub transcript: Sink,
    /// Whether the final answer is printed to the transcript (interactive) or left
    /// to the caller (`-p`).
    pub print_final: bool,
    /// Show whole results (the demo): a denial as the exact text the model got,
    /// a multi-line output line by line, both capped at 1,500 characters.
    pub full_results: bool,
}

/// Why a user message's turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model answered without tool calls.
    Done,
    /// `--max-turns` was reached; the model was asked to summarise.
    TurnCap,
    /// The supervisor's tool-call cap was reached; the model was asked to summarise.
    ToolCap,
    /// The supervisor's cost cap was reached.
    CostCap,
    /// The model call failed or timed out.
    LlmError,
    /// Ctrl-C.
    Aborted,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    pub stop: StopReason,
    pub final_text: String,
    pub turns: u32,
}

/// A denial, as `--output json` and `agent call` print it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeniedJson {
    pub code: String,
    pub reason: String,
    pub rule: String,
}

/// One tool call, for `--output json`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolCallRecord {
    pub id: String,
    pub tool: String,
    pub arguments: Value,
    pub outcome: &'static str,
    pub ok: bool,
    pub denied: Option<DeniedJson>,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
}

/// Counters for the exit summary and `--output json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    pub tool_calls: u32,
    pub denied: u32,
    pub errors: u32,
    pub llm_calls: u32,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub usage_reported: bool,
    pub cost_usd: f64,
    #[serde(skip)]
    pub records: Vec<ToolCallRecord>,
}

/// Why a wait ended early.
#[derive(Debug)]
pub enum Interrupt {
    CtrlC,
    Fatal(AgentError),
}

impl From<AgentError> for Interrupt {
    fn from(e: AgentError) -> Self {
        Interrupt::Fatal(e)
    }
}

/// What a line read ended with.
#[derive(Debug)]
pub enum LineEvent {
    Line(String),
    Eof,
    /// The approval being asked about was decided elsewhere.
    Resolved(ApprovalResolved),
}

// Lives for one select! and is matched at once: boxing would only add an allocation.
#[allow(clippy::large_enum_variant)]
enum Got<T> {
    CtrlC,
    Event(Option<ServerEvent>),
    Done(T),
    Note,
    Line(Option<String>),
}

enum ChatResult {
    Ok(Box<ChatResponse>),
    Failed(String),
}

/// The outcome of one executed tool call.
struct Executed {
    text: String,
    outcome: Outcome,
    cap_reached: bool,
    denied: Option<DeniedJson>,
    exit_code: Option<i32>,
}

impl Executed {
    fn text(text: String, outcome: Outcome) -> Executed {
        Executed {
            text,
            outcome,
            cap_reached: false,
            denied: None,
            exit_code: None,
        }
    }
}

/// The raw result of `agent call`.
#[derive(Debug)]
pub enum CallOnce {
    Remote(CallToolResponse),
    Local(Result<String, String>),
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The session's agent: conversation, tools and terminal.
pub struct Agent {
    pub session: Session,
    tools: Vec<ToolSpec>,
    tool_names: Vec<String>,
    messages: Vec<ChatMessage>,
    planning: Planning,
    stdin: Stdin,
    ctrlc: CtrlC,
    control: ControlStream,
    control_open: bool,
    opts: Options,
    pub stats: Stats,
    queued: VecDeque<Approval>,
    /// Whether a CallTool is waiting: only then can an approval be pending.
    call_in_flight: bool,
    /// The approval we last answered: (approval, approved?, attempts).
    awaiting: Option<(Approval, bool, u8)>,
    next_local_id: u64,
}

impl Agent {
    pub fn new(
        session: Session,
        tools: Vec<ToolSpec>,
        stdin: Stdin,
        ctrlc: CtrlC,
        control: ControlStream,
        opts: Options,
    ) -> Agent {
        let tool_names = tools.iter().map(|t| t.name.clone()).collect();
        let control_open = control.available;
        Agent {
            session,
            tools,
            tool_names,
            messages: vec![message(ChatRole::System, SYSTEM_PROMPT)],
            planning: Planning::default(),
            stdin,
            ctrlc,
            control,
            control_open,
            opts,
            stats: Stats::default(),
            queued: VecDeque::new(),
            call_in_flight: false,
            awaiting: None,
            next_local_id: 0,
        }
    }

    pub fn tools(&self) -> &[ToolSpec] {
        &self.tools
    }

    pub fn messages(&self) -> &[ChatMessage] {
        &self.messages
    }

    pub fn planning(&self) -> &Planning {
        &self.planning
    }

    pub fn stdin_is_tty(&self) -> bool {
        self.stdin.is_tty
    }

    fn say(&self, text: &str) {
        term::line(self.opts.transcript, text);
    }

    /// Runs one user message to its end. Ctrl-C ends the turn (not the session);
    /// revocation and a lost supervisor are errors.
    pub async fn run_message(&mut self, text: &str) -> Result<TurnOutcome, AgentError> {
        self.messages.push(message(ChatRole::User, text));
        let mut turns = 0u32;
        match self.turn_loop(&mut turns).await {
            Ok(o) => Ok(o),
            Err(Interrupt::CtrlC) => {
                self.repair_history(
                    "Error: aborted by the user (Ctrl-C) before this call finished.",
                );
                if self.stdin.is_tty {
                    // The terminal echoed ^C on the line of whatever was running.
                    self.say("");
                }
                self.say("aborted (Ctrl-C): the turn was stopped and its tool call cancelled");
                self.session
                    .report("abort", json!({ "reason": "ctrl-c", "turns": turns }))
                    .await;
                Ok(TurnOutcome {
                    stop: StopReason::Aborted,
                    final_text: String::new(),
                    turns,
                })
            }
            Err(Interrupt::Fatal(e)) => Err(e),
        }
    }

    async fn turn_loop(&mut self, turns: &mut u32) -> Result<TurnOutcome, Interrupt> {
        loop {
            let resp = match self.chat(true).await? {
                ChatResult::Ok(r) => r,
                ChatResult::Failed(msg) => {
                    term::diag(&format!("agent: {msg}"));
                    return Ok(self.outcome(StopReason::LlmError, String::new(), *turns));
                }
            };
            if let Some(stop) = self.cost_cap(&resp) {
                return Ok(self.outcome(stop, String::new(), *turns));
            }
            let Some(mut msg) = resp.message else {
                term::diag("agent: the model returned no message; the turn ends here");
                return Ok(self.outcome(StopReason::LlmError, String::new(), *turns));
            };
            *turns += 1;
            crate::wire::set_role(&mut msg, ChatRole::Assistant);
            msg.tool_call_id.clear();
            self.normalise_call_ids(&mut msg.tool_calls);
            let content = msg.content.clone().unwrap_or_default();
            let calls = msg.tool_calls.clone();
            self.messages.push(msg);
            if calls.is_empty() {
                if self.opts.print_final && !content.is_empty() {
                    self.say(&escape_display(&content, true));
                }
                return Ok(self.outcome(StopReason::Done, content, *turns));
            }
            if !content.trim().is_empty() {
                self.say(&escape_display(&content, true));
            }
            let mut cap = false;
            for tc in &calls {
                cap |= self.run_tool_call(tc).await?;
            }
            if cap {
                term::diag(
                    "agent: the session's tool-call limit was reached; asking the model to summarise",
                );
                return self
                    .summarise(TOOL_CAP_MESSAGE, StopReason::ToolCap, *turns)
                    .await;
            }
            if *turns >= self.opts.max_turns {
                term::diag(&format!(
                    "agent: turn limit reached ({turns} turns); asking the model to summarise"
                ));
                self.session
                    .report("iteration_cap_hit", json!({ "turns": *turns }))
                    .await;
                return self
                    .summarise(TURN_CAP_MESSAGE, StopReason::TurnCap, *turns)
                    .await;
            }
        }
    }

    fn outcome(&self, stop: StopReason, final_text: String, turns: u32) -> TurnOutcome {
        TurnOutcome {
            stop,
            final_text,
            turns,
        }
    }

    /// A cost-cap denial on a Chat response: print it and end the turn.
    fn cost_cap(&self, resp: &ChatResponse) -> Option<StopReason> {
        let d = resp.denied.as_ref()?;
        if model_text::denial_code(d) == DenialCode::Unspecified {
            return None;
        }
        let reason = if d.reason.is_empty() {
            "the session's cost limit was reached".to_string()
        } else {
            escape_display(&d.reason, false)
        };
        if model_text::denial_code(d) == DenialCode::CapReached {
            term::diag(&format!("agent: cost limit reached: {reason}"));
        } else {
            term::diag(&format!("agent: the model call was refused: {reason}"));
        }
        if let Some(m) = &resp.message
            && let Some(c) = &m.content
            && !c.trim().is_empty()
        {
            self.say(&escape_display(c, true));
        }
        Some(StopReason::CostCap)
    }

    /// Asks the model, without tools, to stop and summarise.
    async fn summarise(
        &mut self,
        text: &str,
        stop: StopReason,
        turns: u32,
    ) -> Result<TurnOutcome, Interrupt> {
        self.messages.push(message(ChatRole::User, text));
        let resp = match self.chat(false).await? {
            ChatResult::Ok(r) => r,
            ChatResult::Failed(msg) => {
                term::diag(&format!("agent: {msg}"));
                return Ok(self.outcome(stop, String::new(), turns));
            }
        };
        if self.cost_cap(&resp).is_some() {
            return Ok(self.outcome(stop, String::new(), turns));
        }
        let content = resp.message.and_then(|m| m.content).unwrap_or_default();
        // Only the text is kept: tool calls in an answer that offered no tools
        // would leave calls without results in the history.
        self.messages
            .push(message(ChatRole::Assistant, content.clone()));
        if self.opts.print_final && !content.is_empty() {
            self.say(&escape_display(&content, true));
        }
        Ok(self.outcome(stop, content, turns))
    }

    /// Gives every call an id the tool messages can answer, unique in this message.
    fn normalise_call_ids(&mut self, calls: &mut [ChatToolCall]) {
        let mut seen: Vec<String> = Vec::new();
        for tc in calls.iter_mut() {
            if tc.id.is_empty() || seen.contains(&tc.id) {
                self.next_local_id += 1;
                tc.id = format!("call_agent_{}", self.next_local_id);
            }
            seen.push(tc.id.clone());
        }
    }

    /// After an abort: every tool call of the last assistant message gets a result,
    /// so the next request is still a valid conversation.
    fn repair_history(&mut self, text: &str) {
        let Some(idx) = self.messages.iter().rposition(|m| {
            crate::wire::role_of(m) == Some(ChatRole::Assistant) && !m.tool_calls.is_empty()
        }) else {
            return;
        };
        let answered: Vec<String> = self.messages[idx + 1..]
            .iter()
            .filter(|m| crate::wire::is_tool(m))
            .map(|m| m.tool_call_id.clone())
            .collect();
        let missing: Vec<String> = self.messages[idx]
            .tool_calls
            .iter()
            .filter(|tc| !answered.contains(&tc.id))
            .map(|tc| tc.id.clone())
            .collect();
        for id in missing {
            self.messages.push(tool_message(&id, text));
        }
    }

    fn result_cap(&self) -> usize {
        let budget = self.opts.max_context_tokens as usize * context::CHARS_PER_TOKEN;
        DEFAULT_RESULT_CAP_BYTES.min(budget / 4).max(1_024)
    }

    async fn chat(&mut self, with_tools: bool) -> Result<ChatResult, Interrupt> {
        if let Some(report) =
            context::trim(&mut self.messages, self.opts.max_context_tokens as usize)
        {
            term::diag(&format!(
                "agent: context trimmed: {} messages ({} characters) replaced by a summary",
                report.dropped_messages, report.dropped_chars
            ));
            self.session
                .report(
                    "context_trim",
                    json!({
                        "dropped_messages": report.dropped_messages,
                        "dropped_chars": report.dropped_chars,
                        "summary_sha256_16": report.sha256_16,
                        "tools": report.tools,
                        "shortened_results": report.shortened,
                    }),
                )
                .await;
        }
        let req = ChatRequest {
            messages: self.messages.clone(),
            tools: if with_tools {
                self.tools.clone()
            } else {
                Vec::new()
            },
        };
        let mut client = self.session.client.clone();
        let result = self
            .drive(async move { client.chat(req).await }, None)
            .await?;
        self.stats.llm_calls += 1;
        match result {
            Ok(resp) => {
                let resp = resp.into_inner();
                if let Some(u) = &resp.usage
                    && u.reported
                {
                    self.stats.usage_reported = true;
                    self.stats.prompt_tokens += u.prompt_tokens;
                    self.stats.completion_tokens += u.completion_tokens;
                }
                if resp.session_cost_usd > 0.0 {
                    self.stats.cost_usd = resp.session_cost_usd;
                } else {
                    self.stats.cost_usd += resp.cost_usd;
                }
                Ok(ChatResult::Ok(Box::new(resp)))
            }
            Err(status) => match status.code() {
                Code::Unauthenticated | Code::PermissionDenied => Err(Interrupt::Fatal(
                    AgentError::Revoked(status.message().to_string()),
                )),
                code => {
                    let msg = if status.message().is_empty() {
                        format!("the model call failed ({code:?})")
                    } else {
                        escape_display(status.message(), false)
                    };
                    Ok(ChatResult::Failed(msg))
                }
            },
        }
    }

    /// Waits for `fut` while answering approvals, watching for revocation and
    /// Ctrl-C. Dropping `fut` on Ctrl-C cancels its RPC.
    async fn drive<F: Future>(
        &mut self,
        fut: F,
        note: Option<&str>,
    ) -> Result<F::Output, Interrupt> {
        tokio::pin!(fut);
        let timer = tokio::time::sleep(WAIT_NOTE_AFTER);
        tokio::pin!(timer);
        let mut noted = note.is_none();
        loop {
            if let Some(a) = self.queued.pop_front() {
                // An approval belongs to the CallTool in flight; with none in
                // flight it is stale (already withdrawn) and is not offered.
                if self.call_in_flight {
                    self.on_requested(a).await?;
                }
                continue;
            }
            let got = tokio::select! {
                biased;
                _ = self.ctrlc.recv() => Got::CtrlC,
                ev = self.control.rx.recv(), if self.control_open => Got::Event(ev),
                out = &mut fut => Got::Done(out),
                _ = &mut timer, if !noted => Got::Note,
            };
            match got {
                Got::CtrlC => return Err(Interrupt::CtrlC),
                Got::Event(ev) => self.handle_event(ev).await?,
                Got::Done(out) => return Ok(out),
                Got::Note => {
                    noted = true;
                    if let Some(n) = note {
                        self.say(n);
                    }
                }
                Got::Line(_) => {}
            }
        }
    }

    /// Reads one line from the user, watching the control stream and Ctrl-C. With
    /// `watch`, a resolution of that approval ends the read.
    pub async fn read_line(&mut self, watch: Option<&str>) -> Result<LineEvent, Interrupt> {
        loop {
            let got: Got<()> = tokio::select! {
                biased;
                _ = self.ctrlc.recv() => Got::CtrlC,
                ev = self.control.rx.recv(), if self.control_open => Got::Event(ev),
                l = self.stdin.next_line() => Got::Line(l),
            };
            match got {
                Got::CtrlC => return Err(Interrupt::CtrlC),
                Got::Line(Some(l)) => return Ok(LineEvent::Line(l)),
                Got::Line(None) => return Ok(LineEvent::Eof),
                Got::Event(Some(ServerEvent::Resolved(r)))
                    if watch.is_some_and(|w| w == r.approval_id) =>
                {
                    return Ok(LineEvent::Resolved(r));
                }
                Got::Event(Some(ServerEvent::Requested(a))) => self.queued.push_back(a),
                Got::Event(ev) => self.handle_event(ev).await?,
                Got::Done(()) | Got::Note => {}
            }
        }
    }

    async fn handle_event(&mut self, ev: Option<ServerEvent>) -> Result<(), Interrupt> {
        match ev {
            None => {
                self.control_open = false;
                Ok(())
            }
            Some(ServerEvent::Requested(a)) => {
                self.queued.push_back(a);
                Ok(())
            }
            Some(ServerEvent::Resolved(r)) => {
                self.queued.retain(|q| q.id != r.approval_id);
                let ours = match &self.awaiting {
                    Some((a, approved, _)) if a.id == r.approval_id => {
                        let want = if *approved {
                            ApprovalStatus::Approved
                        } else {
                            ApprovalStatus::Denied
                        };
                        let matches = r.approval_outcome() == want;
                        self.awaiting = None;
                        matches
                    }
                    _ => false,
                };
                if !ours && self.opts.approver != Approver::Demo {
                    self.say(&format!("  {}", approval::resolved_line(&r)));
                }
                Ok(())
            }
            Some(ServerEvent::Ended { reason, .. }) => {
                self.control_open = false;
                Err(Interrupt::Fatal(AgentError::Revoked(escape_display(
                    &reason, false,
                ))))
            }
            Some(ServerEvent::Error(msg)) => {
                term::diag(&format!(
                    "agent: the supervisor did not accept the decision: {}",
                    escape_display(&msg, false)
                ));
                // Offer the approval again (prompt_approval counts the attempts on
                // from `awaiting`), a few times at most.
                match &self.awaiting {
                    Some((a, _, attempts))
                        if *attempts < MAX_DECISION_ATTEMPTS
                            && self.call_in_flight
                            && self.opts.approver == Approver::Prompt =>
                    {
                        self.queued.push_front(a.clone());
                    }
                    Some((a, _, _)) => {
                        term::diag(&format!(
                            "agent: approval {} stays open for the operators (supervisorctl approve {})",
                            a.id, a.id
                        ));
                        self.awaiting = None;
                    }
                    None => {}
                }
                Ok(())
            }
            Some(ServerEvent::Closed(msg)) => {
                self.control_open = false;
                Err(Interrupt::Fatal(AgentError::Lost(msg)))
            }
        }
    }

    async fn on_requested(&mut self, a: Approval) -> Result<(), Interrupt> {
        match self.opts.approver {
            Approver::Operators => {
                term::diag(&format!(
                    "agent: approval {} is waiting for an operator: {} (supervisorctl approve {})",
                    a.id,
                    escape_display(&a.consequence, false),
                    a.id
                ));
                Ok(())
            }
            Approver::Demo => {
                let approve = approval::demo_decision(&a);
                self.say(&format!(
                    "demo: {} {}: {}",
                    if approve { "approving" } else { "denying" },
                    escape_display(&a.tool, false),
                    escape_display(&a.consequence, false)
                ));
                // No reason: the model gets exactly the contract's text.
                let decision = ApprovalDecision {
                    confirm: if approve && a.destructive {
                        a.target.clone()
                    } else {
                        String::new()
                    },
                    ..approval::decision(&a, approve, ApprovalScope::Once)
                };
                self.control.decide(decision).await;
                self.awaiting = Some((a, approve, 1));
                Ok(())
            }
            Approver::Prompt => self.prompt_approval(a).await,
        }
    }

    /// A denial. The supervisor adds a non-empty reason to what the model is told
    /// ("The user said: …"), so the agent's denials carry none: the model gets
    /// exactly the contract's text.
    fn deny(a: &Approval, reason: &str) -> ApprovalDecision {
        ApprovalDecision {
            reason: reason.into(),
            ..approval::decision(a, false, ApprovalScope::Once)
        }
    }

    async fn prompt_approval(&mut self, a: Approval) -> Result<(), Interrupt> {
        let attempts = match &self.awaiting {
            Some((p, _, n)) if p.id == a.id => *n,
            _ => 0,
        };
        self.stdin.discard_typeahead();
        for l in approval::render(&a, now_ms()) {
            term::diag(&l);
        }
        let decision = loop {
            term::prompt(approval::CHOICES);
            let ev = match self.read_line(Some(&a.id)).await {
                Ok(ev) => ev,
                Err(Interrupt::CtrlC) => {
                    // Dropping the CallTool withdraws the approval; a decision
                    // sent now would only race the withdrawal.
                    self.awaiting = None;
                    return Err(Interrupt::CtrlC);
                }
                Err(e) => return Err(e),
            };
            match ev {
                LineEvent::Resolved(r) => {
                    term::diag("");
                    term::diag(&format!("  {}", approval::resolved_line(&r)));
                    return Ok(());
                }
                LineEvent::Eof => {
                    term::diag("(no input: denied)");
                    break Self::deny(&a, "");
                }
                LineEvent::Line(l) => match approval::parse_answer(&l) {
                    Answer::Unclear => {
                        term::diag("please answer y, n or s");
                    }
                    Answer::No => break Self::deny(&a, ""),
                    answer @ (Answer::Yes | Answer::Session) => {
                        let mut scope = if answer == Answer::Session {
                            ApprovalScope::Session
                        } else {
                            ApprovalScope::Once
                        };
                        let mut confirm = String::new();
                        if a.destructive {
                            if scope == ApprovalScope::Session {
                                term::diag(
                                    "(a destructive call is approved once, never for the session)",
                                );
                                scope = ApprovalScope::Once;
                            }
                            term::prompt(&approval::confirm_prompt(&a));
                            let ev = match self.read_line(Some(&a.id)).await {
                                Ok(ev) => ev,
                                Err(Interrupt::CtrlC) => {
                                    self.awaiting = None;
                                    return Err(Interrupt::CtrlC);
                                }
                                Err(e) => return Err(e),
                            };
                            match ev {
                                LineEvent::Resolved(r) => {
                                    term::diag("");
                                    term::diag(&format!("  {}", approval::resolved_line(&r)));
                                    return Ok(());
                                }
                                LineEvent::Eof => {
                                    term::diag("(no confirmation: denied)");
                                    break Self::deny(&a, "");
                                }
                                LineEvent::Line(typed) => {
                                    if approval::confirmation_matches(&a, &typed) {
                                        confirm = typed;
                                    } else {
                                        term::diag(
                                            "the typed text does not match the target: denied",
                                        );
                                        break Self::deny(&a, "");
                                    }
                                }
                            }
                        }
                        break ApprovalDecision {
                            confirm,
                            ..approval::decision(&a, true, scope)
                        };
                    }
                },
            }
        };
        let approved = decision.approve;
        self.control.decide(decision).await;
        self.awaiting = Some((a, approved, attempts + 1));
        Ok(())
    }

    /// Shows the question on stderr and reads the answer; EOF gives
    /// `(no answer - EOF)`. The exchange is reported to the audit log.
    async fn ask_question(&mut self, question: &str) -> Result<String, Interrupt> {
        self.stdin.discard_typeahead();
        term::diag(&format!("? {}", escape_display(question, true)));
        term::prompt("answer: ");
        let answer = match self.read_line(None).await? {
            LineEvent::Line(l) => l,
            LineEvent::Eof | LineEvent::Resolved(_) => {
                term::diag("(no answer - EOF)");
                "(no answer - EOF)".to_string()
            }
        };
        self.session
            .report(
                "question_asked",
                // The supervisor takes at most 16 KiB of fields per event.
                json!({
                    "question": truncate_chars(question, 4_000),
                    "answer": truncate_chars(&answer, 4_000),
                }),
            )
            .await;
        Ok(answer)
    }

    fn show_call(&self, tc: &ChatToolCall) {
        self.say(&format!(
            "▸ {} {}",
            one_line(&tc.name, 80),
            one_line(&tc.arguments, RESULT_PREVIEW_CHARS)
        ));
    }

    fn show_result(&self, ex: &Executed, text: &str) {
        let label = match ex.outcome {
            Outcome::Ok => "ok",
            Outcome::Denied => "denied",
            Outcome::Error | Outcome::InvalidArgs | Outcome::UnknownTool => "error",
            Outcome::Aborted => "aborted",
        };
        if self.opts.full_results && ex.outcome == Outcome::Denied {
            self.say(&format!(
                "  ⎿ denied; the model is told: {}",
                escape_display(&truncate_chars(text, 1_500), false)
            ));
        } else if self.opts.full_results && text.trim_end().contains('\n') {
            self.say(&format!("  ⎿ {label}:"));
            for l in truncate_chars(text.trim_end(), 1_500).lines() {
                self.say(&format!("    │ {}", escape_display(l, false)));
            }
        } else {
            self.say(&format!(
                "  ⎿ {label}: {}",
                one_line(text, RESULT_PREVIEW_CHARS)
            ));
        }
    }

    /// Runs one tool call and appends its tool message. Returns whether the
    /// session's tool-call cap was reached.
    async fn run_tool_call(&mut self, tc: &ChatToolCall) -> Result<bool, Interrupt> {
        let started = Instant::now();
        self.show_call(tc);
        let ex = self.execute(tc).await?;
        let (text, _) = cap_for_model(&ex.text, self.result_cap());
        self.show_result(&ex, &text);
        self.stats.tool_calls += 1;
        match ex.outcome {
            Outcome::Denied => self.stats.denied += 1,
            Outcome::Error | Outcome::InvalidArgs | Outcome::UnknownTool | Outcome::Aborted => {
                self.stats.errors += 1;
            }
            Outcome::Ok => {}
        }
        let arguments = match serde_json::from_str::<Value>(&tc.arguments) {
            Ok(v) => v,
            Err(_) => Value::String(tc.arguments.clone()),
        };
        self.stats.records.push(ToolCallRecord {
            id: tc.id.clone(),
            tool: tc.name.clone(),
            arguments,
            outcome: ex.outcome.as_str(),
            ok: ex.outcome == Outcome::Ok,
            denied: ex.denied.clone(),
            exit_code: ex.exit_code,
            duration_ms: started.elapsed().as_millis() as u64,
        });
        self.messages.push(tool_message(&tc.id, &text));
        Ok(ex.cap_reached)
    }

    fn parse_args(raw: &str) -> Result<(String, Map<String, Value>), String> {
        let text = if raw.trim().is_empty() { "{}" } else { raw };
        match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => Ok((text.to_string(), m)),
            Ok(other) => Err(model_text::invalid_args(&format!(
                "expected a JSON object, got {}",
                match other {
                    Value::Null => "null",
                    Value::Bool(_) => "a boolean",
                    Value::Number(_) => "a number",
                    Value::String(_) => "a string",
                    Value::Array(_) => "an array",
                    Value::Object(_) => "an object",
                }
            ))),
            Err(e) => Err(model_text::invalid_json(&e.to_string())),
        }
    }

    fn runs_here(spec: &ToolSpec) -> bool {
        use tollgate_proto::ToolClass as C;
        matches!(spec.tool_class(), C::Planning | C::Interaction)
    }

    async fn execute(&mut self, tc: &ChatToolCall) -> Result<Executed, Interrupt> {
        let Some(spec) = self.tools.iter().find(|t| t.name == tc.name).cloned() else {
            return Ok(Executed::text(
                model_text::unknown_tool(&tc.name, &self.tool_names),
                Outcome::UnknownTool,
            ));
        };
        let (args_text, args) = match Self::parse_args(&tc.arguments) {
            Ok(a) => a,
            Err(text) => return Ok(Executed::text(text, Outcome::InvalidArgs)),
        };
        if Self::runs_here(&spec) {
            return Ok(match self.run_local(&spec.name, &args).await? {
                Ok(text) => Executed::text(text, Outcome::Ok),
                Err(text) => Executed::text(text, Outcome::InvalidArgs),
            });
        }
        let resp = self.call_remote(&tc.id, &spec.name, &args_text).await?;
        self.map_remote(&spec.name, &resp)
    }

    fn map_remote(&self, tool: &str, resp: &CallToolResponse) -> Result<Executed, Interrupt> {
        match model_text::map_response(tool, resp, &self.tool_names) {
            Mapped::Revoked(reason) => Err(Interrupt::Fatal(AgentError::Revoked(reason))),
            Mapped::Text {
                text,
                outcome,
                cap_reached,
            } => Ok(Executed {
                text,
                outcome,
                cap_reached,
                denied: resp.denied.as_ref().map(|d| DeniedJson {
                    code: model_text::code_name(d).to_string(),
                    reason: d.reason.clone(),
                    rule: d.rule.clone(),
                }),
                exit_code: resp.exit_code,
            }),
        }
    }

    /// A planning tool or a question. `Ok(Err(text))` is an argument error.
    async fn run_local(
        &mut self,
        tool: &str,
        args: &Map<String, Value>,
    ) -> Result<Result<String, String>, Interrupt> {
        let local = match ToolName::parse(tool) {
            Some(ToolName::AskQuestion) => {
                let q = match planning::question_of(args) {
                    Ok(q) => q,
                    Err(e) => return Ok(Err(model_text::invalid_args(&e))),
                };
                let answer = self.ask_question(&q).await?;
                return Ok(Ok(answer));
            }
            Some(
                t @ (ToolName::TodoAppend
                | ToolName::TodoList
                | ToolName::TodoUpdate
                | ToolName::ReadScratchpad
                | ToolName::WriteScratchpad),
            ) => t,
            // The supervisor's tools, and a tool this agent does not know.
            Some(
                ToolName::ReadFile
                | ToolName::GlobFiles
                | ToolName::Grep
                | ToolName::WriteFile
                | ToolName::EditFile
                | ToolName::RunBash
                | ToolName::JobOutput
                | ToolName::KillJob
                | ToolName::Webfetch
                | ToolName::Mcp,
            )
            | None => {
                return Ok(Err(format!(
                    "Error: tool '{tool}' is not available in this agent"
                )));
            }
        };
        Ok(self
            .planning
            .call(local, args)
            .map_err(|e| model_text::invalid_args(&e)))
    }

    /// CallTool, answering approvals while it waits.
    async fn call_remote(
        &mut self,
        call_id: &str,
        tool: &str,
        args_text: &str,
    ) -> Result<CallToolResponse, Interrupt> {
        let req = CallToolRequest {
            call_id: call_id.to_string(),
            tool: tool.to_string(),
            arguments_json: args_text.to_string(),
        };
        let mut client = self.session.client.clone();
        let note = match self.opts.approver {
            Approver::Operators => {
                "  … waiting (the tool is running, or an operator has to approve it)"
            }
            Approver::Prompt | Approver::Demo if !self.session.can_approve => {
                "  … waiting (the tool is running, or an operator has to approve it: supervisorctl approvals)"
            }
            Approver::Prompt | Approver::Demo => "  … still running",
        };
        self.call_in_flight = true;
        let result = self
            .drive(async move { client.call_tool(req).await }, Some(note))
            .await;
        self.call_in_flight = false;
        self.queued.clear();
        match result? {
            Ok(r) => Ok(r.into_inner()),
            Err(status) => match status.code() {
                Code::Unauthenticated | Code::PermissionDenied => Err(Interrupt::Fatal(
                    AgentError::Revoked(status.message().to_string()),
                )),
                Code::Unavailable if !self.control_open && self.control.available => Err(
                    Interrupt::Fatal(AgentError::Lost(status.message().to_string())),
                ),
                _ => Ok(CallToolResponse {
                    error: format!(
                        "the supervisor could not run the call: {}",
                        status.message()
                    ),
                    ..Default::default()
                }),
            },
        }
    }

    /// `agent call`: one call, answered as the contract prints it.
    pub async fn call_once(&mut self, tool: &str, args_text: &str) -> Result<CallOnce, Interrupt> {
        if let Some(spec) = self.tools.iter().find(|t| t.name == tool).cloned()
            && Self::runs_here(&spec)
        {
            let args = match Self::parse_args(args_text) {
                Ok((_, a)) => a,
                Err(text) => return Ok(CallOnce::Local(Err(text))),
            };
            return Ok(CallOnce::Local(self.run_local(tool, &args).await?));
        }
        self.next_local_id += 1;
        let id = format!("call_cli_{}", self.next_local_id);
        Ok(CallOnce::Remote(
            self.call_remote(&id, tool, args_text).await?,
        ))
    }
}

fn tool_message(id: &str, text: &str) -> ChatMessage {
    ChatMessage {
        content: Some(text.to_string()),
        tool_call_id: id.to_string(),
        ..crate::wire::message_from(ChatRole::Tool)
    }
}

/// The one-line summary printed at exit.
pub fn summary_line(
    session_id: &str,
    stats: &Stats,
    info: Option<&tollgate_proto::SessionInfo>,
) -> String {
    let (tin, tout, cost) = match info {
        Some(i) if i.tokens_in > 0 || i.tokens_out > 0 || i.cost_usd > 0.0 => {
            (i.tokens_in, i.tokens_out, i.cost_usd)
        }
        _ => (stats.prompt_tokens, stats.completion_tokens, stats.cost_usd),
    };
    let tokens = if tin == 0 && tout == 0 && !stats.usage_reported {
        "tokens not reported".to_string()
    } else {
        format!("tokens in {tin} / out {tout}")
    };
    format!(
        "agent: session {session_id} closed: {} tool call{} ({} denied, {} failed), {} model call{}, {tokens}, cost ${cost:.4}",
        stats.tool_calls,
        if stats.tool_calls == 1 { "" } else { "s" },
        stats.denied,
        stats.errors,
        stats.llm_calls,
        if stats.llm_calls == 1 { "" } else { "s" },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_parsing() {
        assert_eq!(Agent::parse_args("").unwrap().0, "{}");
        assert_eq!(Agent::parse_args("  ").unwrap().0, "{}");
        assert_eq!(
            Agent::parse_args("[1]").unwrap_err(),
            "Error: invalid arguments: expected a JSON object, got an array"
        );
        assert!(
            Agent::parse_args("{path: x}")
                .unwrap_err()
                .starts_with("Error: invalid arguments: not valid JSON: key must be a string")
        );
        let (text, map) = Agent::parse_args(r#"{"path":"a"}"#).unwrap();
        assert_eq!(text, r#"{"path":"a"}"#);
        assert_eq!(map.get("path"), Some(&Value::String("a".into())));
    }

    #[test]
    fn summary_prefers_the_supervisors_counters() {
        let stats = Stats {
            tool_calls: 3,
            denied: 1,
            errors: 0,
            llm_calls: 2,
            prompt_tokens: 10,
            completion_tokens: 5,
            usage_reported: true,
            cost_usd: 0.5,
            records: vec![],
        };
        assert_eq!(
            summary_line("abc", &stats, None),
            "agent: session abc closed: 3 tool calls (1 denied, 0 failed), 2 model calls, tokens in 10 / out 5, cost $0.5000"
        );
        let info = tollgate_proto::SessionInfo {
            tokens_in: 100,
            tokens_out: 50,
            cost_usd: 0.25,
            ..Default::default()
        };
        assert_eq!(
            summary_line("abc", &stats, Some(&info)),
            "agent: session abc closed: 3 tool calls (1 denied, 0 failed), 2 model calls, tokens in 100 / out 50, cost $0.2500"
        );
        let none = Stats::default();
        assert_eq!(
            summary_line("x", &none, None),
            "agent: session x closed: 0 tool calls (0 denied, 0 failed), 0 model calls, tokens not reported, cost $0.0000"
        );
    }
}
