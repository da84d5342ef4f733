//! How an approval is shown and answered at the agent's terminal
//! (docs/ARCHITECTURE.md, "The PEP pipeline", step 5):
//! the consequence first, then the diff, then `[y]es / [n]o / [s]ession`. A
//! destructive call needs a second, typed confirmation of its target.

use tollgate_proto::{Approval, ApprovalDecision, ApprovalResolved, ApprovalScope, ApprovalStatus};
use tollgate_toolcall::ToolName;

use crate::text::escape_display;

/// Lines of diff shown at the prompt; the supervisor caps the diff's size too.
const MAX_DIFF_LINES: usize = 60;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Yes,
    No,
    Session,
    Unclear,
}

/// Parses an answer to `[y]es / [n]o / [s]ession`.
pub fn parse_answer(line: &str) -> Answer {
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Answer::Yes,
        "n" | "no" => Answer::No,
        "s" | "session" => Answer::Session,
        _ => Answer::Unclear,
    }
}

/// The question line.
pub const CHOICES: &str = "[y]es / [n]o / [s]ession: ";

/// The second prompt of a destructive approval.
pub fn confirm_prompt(a: &Approval) -> String {
    format!(
        "type the target to confirm ({}): ",
        escape_display(&a.target, false)
    )
}

/// Whether the typed confirmation matches the target exactly.
pub fn confirmation_matches(a: &Approval, typed: &str) -> bool {
    !a.target.is_empty() && typed == a.target
}

/// "About to …": the consequence in words, with the tool as a fallback.
pub fn headline(a: &Approval) -> String {
    let what = if a.consequence.trim().is_empty() {
        format!("call {} on {}", a.tool, a.target)
    } else {
        a.consequence.clone()
    };
    let what = escape_display(&what, false);
    if a.destructive {
        format!("⚠ About to {what} — DESTRUCTIVE: cannot be undone")
    } else {
        format!("⚠ About to {what}")
    }
}

/// The block shown before the question: headline, details, diff.
pub fn render(a: &Approval, now_unix_ms: i64) -> Vec<String> {
    let mut lines = vec![headline(a)];
    let mut details = format!("  {} · approval {}", escape_display(&a.tool, false), a.id);
    if !a.rule.is_empty() {
        details.push_str(&format!(" · rule {}", escape_display(&a.rule, false)));
    }
    if a.deadline_unix_ms > 0 {
        let secs = ((a.deadline_unix_ms - now_unix_ms).max(0) + 999) / 1000;
        details.push_str(&format!(" · expires in {secs} s"));
    }
    lines.push(details);
    if a.diff.trim().is_empty() {
        if !a.arguments_json.is_empty() && !writes_a_file(&a.tool) {
            lines.push(format!(
                "  arguments: {}",
                escape_display(&crate::text::truncate_chars(&a.arguments_json, 400), false)
            ));
        }
    } else {
        let total = a.diff.lines().count();
        for l in a.diff.lines().take(MAX_DIFF_LINES) {
            lines.push(format!("  {}", escape_display(l, false)));
        }
        if total > MAX_DIFF_LINES {
            lines.push(format!("  … {} more diff lines", total - MAX_DIFF_LINES));
        }
    }
    if a.destructive {
        lines.push(format!(
            "  to approve, answer y and then type the target: {}",
            escape_display(&a.target, false)
        ));
    }
    lines
}

/// write_file and edit_file: their approval shows a diff, not the
/// arguments (the content would repeat it).
fn writes_a_file(tool: &str) -> bool {
    match ToolName::parse(tool) {
        Some(ToolName::WriteFile | ToolName::EditFile) => true,
        Some(
            ToolName::ReadFile
            | ToolName::GlobFiles
            | ToolName::Grep
            | ToolName::RunBash
            | ToolName::JobOutput
            | ToolName::KillJob
            | ToolName::Webfetch
            | ToolName::Mcp
            | ToolName::TodoAppend
            | ToolName::TodoList
            | ToolName::TodoUpdate
            | ToolName::ReadScratchpad
            | ToolName::WriteScratchpad
            | ToolName::AskQuestion,
        )
        | None => false,
    }
}

/// A decision on `a` with its scope in both fields (the text is deprecated,
/// docs/INTERFACES.md "Additions: wire enums"), no confirmation and no reason.
pub fn decision(a: &Approval, approve: bool, scope: ApprovalScope) -> ApprovalDecision {
    ApprovalDecision {
        approval_id: a.id.clone(),
        approve,
        scope: scope.text().to_string(),
        approval_scope: scope as i32,
        ..Default::default()
    }
}

/// One line saying how an approval ended, and who decided.
pub fn resolved_line(r: &ApprovalResolved) -> String {
    let who = if r.decided_by.is_empty() {
        "the supervisor".to_string()
    } else {
        escape_display(&r.decided_by, false)
    };
    let outcome = r.approval_outcome();
    let mut s = match outcome {
        ApprovalStatus::Approved => format!("approval {} approved by {who}", r.approval_id),
        ApprovalStatus::Denied => format!("approval {} denied by {who}", r.approval_id),
        ApprovalStatus::Timeout => format!(
            "approval {} timed out: no one decided in time",
            r.approval_id
        ),
        ApprovalStatus::Withdrawn => format!("approval {} withdrawn", r.approval_id),
        other @ (ApprovalStatus::Pending | ApprovalStatus::Unspecified) => {
            format!("approval {} {} by {who}", r.approval_id, other.text())
        }
    };
    if r.approval_scope() == ApprovalScope::Session && outcome == ApprovalStatus::Approved {
        s.push_str(" (for the rest of the session)");
    }
    if !r.reason.is_empty() {
        s.push_str(&format!(": {}", escape_display(&r.reason, false)));
    }
    s
}

/// How the demo answers approvals by itself: it approves everything except an
/// overwrite of an existing file, which it denies to show a denial reaching the model.
pub fn demo_decision(a: &Approval) -> bool {
    let overwrite = writes_a_file(&a.tool) && a.consequence.trim_start().starts_with("overwrite");
    !overwrite
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval() -> Approval {
        Approval {
            id: "ap1".into(),
            session_id: "s".into(),
            tool: "write_file".into(),
            consequence: "overwrite README.md (existing 214 bytes will be lost)".into(),
            diff: "--- a/README.md\n+++ b/README.md\n@@ -1 +1 @@\n-old\n+new\x1b[31m".into(),
            destructive: false,
            target: "README.md".into(),
            created_unix_ms: 0,
            deadline_unix_ms: 300_000,
            rule: "mode: default asks for writes".into(),
            reason: String::new(),
            arguments_json: String::new(),
            approval_status: ApprovalStatus::Pending as i32,
            ..Default::default()
        }
    }

    #[test]
    fn consequence_first_then_diff() {
        let lines = render(&approval(), 1_000);
        assert_eq!(
            lines,
            vec![
                "⚠ About to overwrite README.md (existing 214 bytes will be lost)".to_string(),
                "  write_file · approval ap1 · rule mode: default asks for writes · expires in 299 s"
                    .to_string(),
                "  --- a/README.md".to_string(),
                "  +++ b/README.md".to_string(),
                "  @@ -1 +1 @@".to_string(),
                "  -old".to_string(),
                "  +new\\u{1b}[31m".to_string(),
            ]
        );
    }

    #[test]
    fn destructive_asks_for_the_target() {
        let mut a = approval();
        a.destructive = true;
        a.consequence = "run `rm -r build` in the sandbox".into();
        a.target = "rm -r build".into();
        let lines = render(&a, 0);
        assert_eq!(
            lines[0],
            "⚠ About to run `rm -r build` in the sandbox — DESTRUCTIVE: cannot be undone"
        );
        assert_eq!(
            lines.last().unwrap(),
            "  to approve, answer y and then type the target: rm -r build"
        );
        assert!(confirmation_matches(&a, "rm -r build"));
        assert!(!confirmation_matches(&a, "rm -r build "));
        assert!(!confirmation_matches(&a, "y"));
        a.target.clear();
        assert!(!confirmation_matches(&a, ""));
    }

    #[test]
    fn answers() {
        assert_eq!(parse_answer("y"), Answer::Yes);
        assert_eq!(parse_answer(" YES "), Answer::Yes);
        assert_eq!(parse_answer("n"), Answer::No);
        assert_eq!(parse_answer("s"), Answer::Session);
        assert_eq!(parse_answer(""), Answer::Unclear);
        assert_eq!(parse_answer("yolo"), Answer::Unclear);
    }

    #[test]
    fn resolutions_name_who_decided() {
        let r = ApprovalResolved {
            approval_id: "ap1".into(),
            approval_outcome: ApprovalStatus::Approved as i32,
            decided_by: "uid 0 via operator".into(),
            approval_scope: ApprovalScope::Session as i32,
            ..Default::default()
        };
        assert_eq!(
            resolved_line(&r),
            "approval ap1 approved by uid 0 via operator (for the rest of the session)"
        );
        let r = ApprovalResolved {
            approval_outcome: ApprovalStatus::Timeout as i32,
            ..r
        };
        assert_eq!(
            resolved_line(&r),
            "approval ap1 timed out: no one decided in time"
        );
    }

    #[test]
    fn demo_denies_overwrites_only() {
        let a = approval();
        assert!(!demo_decision(&a));
        let mut b = approval();
        b.consequence = "create NOTES.md (61 bytes)".into();
        assert!(demo_decision(&b));
        b.tool = "run_bash".into();
        b.consequence = "run `id` in the sandbox (no network)".into();
        assert!(demo_decision(&b));
    }
}
