//! A session's background jobs (docs/INTERFACES.md, "Background jobs"): a
//! command started by run_bash with `background: true`, or a client's
//! routed command run in the background (Claude Code's
//! `run_in_background`). A job runs in the session's sandbox under its
//! limits until it exits, `kill_job` (or its client) ends it, or the
//! session ends; its output, redacted as it comes, waits here for
//! `job_output` (the latest `output_cap_bytes` of it).
//!
//! This file is the table and what one job holds; `exec/job.rs` starts,
//! reads and kills them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::SystemTime;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;
use tollgate_audit::event::JobEnd;

/// Ended jobs kept for a last `job_output` and the session listing; the
/// oldest ended job goes first when there are more.
const ENDED_KEPT: usize = 32;

/// The session's jobs, by id.
#[derive(Default)]
pub struct Jobs {
    next: AtomicU64,
    map: Mutex<BTreeMap<u64, Arc<Job>>>,
}

/// What a new job is.
pub(crate) struct NewJob<'a> {
    pub(crate) command: &'a str,
    /// `command` redacted and cut.
    pub(crate) shown: String,
    pub(crate) call_id: &'a str,
    pub(crate) routed: bool,
}

/// One background job.
pub struct Job {
    /// `job-N`, N counting from 1 in the session.
    pub id: String,
    /// The command as decided.
    pub command: String,
    /// The command redacted and cut, for records and listings.
    pub shown: String,
    /// The call that started it.
    pub call_id: String,
    /// A client's routed command: its output goes to the client.
    pub routed: bool,
    pub started: SystemTime,
    /// Cancelled to kill it (`kill_job`, the client went away, the session
    /// ended).
    pub(crate) kill: CancellationToken,
    /// Set by `kill_job` before it cancels, so the end says who ended it.
    pub(crate) killed_by_tool: AtomicBool,
    state: Mutex<JobState>,
    ended: tokio::sync::Notify,
}

#[derive(Default)]
struct JobState {
    /// Redacted output not read yet (the latest `keep` bytes).
    unread: Vec<u8>,
    /// Bytes dropped from the front of `unread` since the last read.
    dropped: u64,
    /// Bytes the job printed in all.
    bytes: u64,
    end: Option<Ended>,
}

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    pub how: JobEnd,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// A sentence for the model and the record.
    pub reason: String,
}

/// What one read of a job's output returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub text: String,
    /// Bytes dropped before `text` because nobody read them in time.
    pub dropped: u64,
    pub end: Option<Ended>,
}

/// A job as operators see it (`supervisorctl sessions`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobView {
    pub id: String,
    /// Redacted and cut.
    pub command: String,
    pub routed: bool,
    pub started: SystemTime,
    /// How it ended; `None` while it runs.
    pub state: Option<JobEnd>,
    pub exit_code: Option<i32>,
    pub bytes: u64,
}

impl Jobs {
    /// A new running job whose kill token is a child of `parent`.
    pub(crate) fn add(&self, new: NewJob<'_>, parent: &CancellationToken) -> Arc<Job> {
        let n = self.next.fetch_add(1, Ordering::SeqCst) + 1;
        let job = Arc::new(Job {
            id: format!("job-{n}"),
            command: new.command.to_string(),
            shown: new.shown,
            call_id: new.call_id.to_string(),
            routed: new.routed,
            started: SystemTime::now(),
            kill: parent.child_token(),
            killed_by_tool: AtomicBool::new(false),
            state: Mutex::new(JobState::default()),
            ended: tokio::sync::Notify::new(),
        });
        let mut map = self.map.lock();
        map.insert(n, Arc::clone(&job));
        let ended: Vec<u64> = map
            .iter()
            .filter(|(_, j)| j.end().is_some())
            .map(|(k, _)| *k)
            .collect();
        for k in ended.iter().take(ended.len().saturating_sub(ENDED_KEPT)) {
            map.remove(k);
        }
        job
    }

    /// The job of this id, if the session has it.
    pub fn get(&self, id: &str) -> Option<Arc<Job>> {
        let n: u64 = id.strip_prefix("job-")?.parse().ok()?;
        self.map.lock().get(&n).cloned()
    }

    /// Every job kept, oldest first.
    pub fn list(&self) -> Vec<JobView> {
        self.map.lock().values().map(|j| j.view()).collect()
    }

    /// The jobs still running.
    pub fn running(&self) -> usize {
        self.map
            .lock()
            .values()
            .filter(|j| j.end().is_none())
            .count()
    }

    /// The ids of the jobs kept, for a sentence naming them.
    pub fn ids(&self) -> Vec<String> {
        self.map.lock().values().map(|j| j.id.clone()).collect()
    }
}

impl Job {
    /// Redacted output, kept for the next read: the latest `keep` bytes.
    pub(crate) fn push(&self, redacted: &[u8], keep: usize) {
        let mut s = self.state.lock();
        s.unread.extend_from_slice(redacted);
        if s.unread.len() > keep {
            let cut = s.unread.len() - keep;
            s.unread.drain(..cut);
            s.dropped += cut as u64;
        }
    }

    /// Counts bytes the job printed (before redaction).
    pub(crate) fn count(&self, n: usize) {
        self.state.lock().bytes += n as u64;
    }

    /// The output since the last read, and the end if it has ended.
    pub fn read(&self) -> Read {
        let mut s = self.state.lock();
        let text = String::from_utf8_lossy(&std::mem::take(&mut s.unread)).into_owned();
        Read {
            text,
            dropped: std::mem::take(&mut s.dropped),
            end: s.end.clone(),
        }
    }

    /// How it ended, once it has.
    pub fn end(&self) -> Option<Ended> {
        self.state.lock().end.clone()
    }

    /// Bytes printed so far.
    pub fn bytes(&self) -> u64 {
        self.state.lock().bytes
    }

    /// Marks it ended (the first end wins) and wakes whoever waits.
    pub(crate) fn finish(&self, end: Ended) {
        let mut s = self.state.lock();
        if s.end.is_none() {
            s.end = Some(end);
        }
        drop(s);
        self.ended.notify_waiters();
    }

    /// Waits until it has ended.
    pub async fn wait(&self) {
        loop {
            let notified = self.ended.notified();
            if self.end().is_some() {
                return;
            }
            notified.await;
        }
    }

    pub fn view(&self) -> JobView {
        let s = self.state.lock();
        let (state, exit_code) = match &s.end {
            None => (None, None),
            Some(e) => (Some(e.how), e.exit_code),
        };
        JobView {
            id: self.id.clone(),
            command: self.shown.clone(),
            routed: self.routed,
            started: self.started,
            state,
            exit_code,
            bytes: s.bytes,
        }
    }
}

/// The record's name of an end.
pub fn end_name(how: JobEnd) -> &'static str {
    match how {
        JobEnd::Exited => "exited",
        JobEnd::Killed => "killed",
        JobEnd::SessionEnded => "session_ended",
        JobEnd::Failed => "failed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(command: &str) -> NewJob<'_> {
        NewJob {
            command,
            shown: command.to_string(),
            call_id: "c",
            routed: false,
        }
    }

    #[test]
    fn unread_output_keeps_the_latest_bytes_and_counts_the_rest() {
        let jobs = Jobs::default();
        let job = jobs.add(new("yes"), &CancellationToken::new());
        assert_eq!(job.id, "job-1");
        job.push(b"0123456789", 4);
        job.push(b"ab", 4);
        let r = job.read();
        assert_eq!((r.text.as_str(), r.dropped), ("89ab", 8));
        let r = job.read();
        assert_eq!((r.text.as_str(), r.dropped, r.end), ("", 0, None));
        assert!(jobs.get("job-1").is_some());
        assert!(jobs.get("job-2").is_none() && jobs.get("1").is_none());
    }

    #[test]
    fn the_first_end_wins_and_old_ended_jobs_go() {
        let jobs = Jobs::default();
        let parent = CancellationToken::new();
        let first = jobs.add(new("a"), &parent);
        let end = |how| Ended {
            how,
            exit_code: None,
            signal: None,
            reason: String::new(),
        };
        first.finish(end(JobEnd::Killed));
        first.finish(end(JobEnd::Exited));
        assert_eq!(first.end().map(|e| e.how), Some(JobEnd::Killed));
        assert_eq!(first.view().state, Some(JobEnd::Killed));
        for _ in 0..ENDED_KEPT + 1 {
            jobs.add(new("b"), &parent).finish(end(JobEnd::Exited));
        }
        let running = jobs.add(new("c"), &parent);
        assert!(jobs.get("job-1").is_none(), "the oldest ended job is gone");
        assert_eq!(jobs.running(), 1);
        assert!(jobs.get(&running.id).is_some());
        parent.cancel();
        assert!(running.kill.is_cancelled());
    }
}
