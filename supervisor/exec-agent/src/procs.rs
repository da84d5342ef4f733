//! Finding and killing every process of a command, wherever it went.
//!
//! `setsid` and a double fork take a process out of its command's process
//! group and away from its parent, but not out of the tree below the
//! command's shepherd, which is a child subreaper: an orphan below it is
//! reparented to it. A shepherd that is gone (killed) leaves its orphans to
//! the agent, pid 1; those are the agent's children that are not shepherds,
//! and they are killed too. So the tree below a shepherd, plus the agent's
//! non-shepherd children, is everything a command can have started.

use std::collections::{HashMap, HashSet};

use crate::sys;

/// One line of /proc: a live (not zombie) process and its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
}

/// `pid` and `ppid` from the text of /proc/<pid>/stat, unless it is a zombie
/// (or dead).
pub fn parse_stat(stat: &str) -> Option<Proc> {
    // The name is in parentheses and may hold anything: split after the last ')'.
    let (head, rest) = stat.rsplit_once(')')?;
    let pid = head.split_once(' ')?.0.trim().parse().ok()?;
    let mut f = rest.split_ascii_whitespace();
    let state = f.next()?;
    let ppid = f.next()?.parse().ok()?;
    if state == "Z" || state == "X" || state == "x" {
        return None;
    }
    Some(Proc { pid, ppid })
}

/// Every live process this process can see.
pub fn scan() -> Vec<Proc> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut v = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(n) = name.to_str() else { continue };
        if !n.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{n}/stat"))
            && let Some(p) = parse_stat(&s)
        {
            v.push(p);
        }
    }
    v
}

/// The processes below `root` (not `root` itself).
pub fn descendants(procs: &[Proc], root: i32) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for p in procs {
        children.entry(p.ppid).or_default().push(p.pid);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        if let Some(c) = children.get(&p) {
            for &c in c {
                if c != root && !out.contains(&c) {
                    out.push(c);
                    stack.push(c);
                }
            }
        }
    }
    out
}

/// What to kill now: `root` and everything below it, plus orphans (children of
/// `me` that are not in `keep`, the live shepherds of other commands).
pub fn victims(
    procs: &[Proc],
    me: Option<i32>,
    root: Option<i32>,
    keep: &HashSet<i32>,
) -> Vec<i32> {
    let mut v = Vec::new();
    if let Some(r) = root {
        if procs.iter().any(|p| p.pid == r) {
            v.push(r);
        }
        v.extend(descendants(procs, r));
    }
    for p in procs {
        if Some(p.ppid) == me && Some(p.pid) != me && !keep.contains(&p.pid) && !v.contains(&p.pid)
        {
            v.push(p.pid);
            v.extend(descendants(procs, p.pid));
        }
    }
    v
}

/// SIGKILLs `root`'s tree and, with `orphans_of` (the agent's own pid), every
/// orphan. `keep`: live shepherds of other commands (never `root`).
pub fn kill_tree(root: Option<i32>, orphans_of: Option<i32>, keep: &HashSet<i32>) {
    kill_rounds(|procs| victims(procs, orphans_of, root, keep));
}

/// SIGKILLs every process below `root`, not `root` itself (the shepherd
/// cleaning up after its command).
pub fn kill_below(root: i32) {
    kill_rounds(|procs| descendants(procs, root));
}

/// Kills what `pick` finds in /proc, again and again until a look finds
/// nothing not already killed (a process that forked between a look and its
/// kill shows up at the next look).
fn kill_rounds(pick: impl Fn(&[Proc]) -> Vec<i32>) {
    let mut killed: HashSet<i32> = HashSet::new();
    // Each round kills at least one new process, and a process with a SIGKILL
    // pending cannot fork: the rounds end. The bound is a backstop.
    for _ in 0..10_000 {
        let fresh: Vec<i32> = pick(&scan())
            .into_iter()
            .filter(|p| !killed.contains(p))
            .collect();
        if fresh.is_empty() {
            return;
        }
        for p in fresh {
            sys::kill(p, libc::SIGKILL);
            killed.insert(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(pid: i32, ppid: i32) -> Proc {
        Proc { pid, ppid }
    }

    #[test]
    fn stat_lines_are_read_after_the_last_paren() {
        assert_eq!(
            parse_stat("42 (a) b) c) S 7 42 42 0 -1"),
            Some(Proc { pid: 42, ppid: 7 })
        );
        assert_eq!(parse_stat("9 (sh) R 1 9 9"), Some(p(9, 1)));
        assert_eq!(parse_stat("9 (sh) Z 1 9 9"), None);
        assert_eq!(parse_stat("garbage"), None);
        assert_eq!(parse_stat("9 (sh) S notanumber"), None);
    }

    #[test]
    fn a_tree_and_the_orphans_but_not_other_commands() {
        // 1 = agent; 10, 20 = shepherds; 11 below 10, 12 below 11;
        // 30 an orphan (parent gone, reparented to 1) with child 31;
        // 21 below the other shepherd 20.
        let procs = vec![
            p(1, 0),
            p(10, 1),
            p(11, 10),
            p(12, 11),
            p(20, 1),
            p(21, 20),
            p(30, 1),
            p(31, 30),
        ];
        let keep: HashSet<i32> = [20].into_iter().collect();
        let mut v = victims(&procs, Some(1), Some(10), &keep);
        v.sort();
        assert_eq!(v, vec![10, 11, 12, 30, 31]);
        // Orphans alone.
        let mut v = victims(&procs, Some(1), None, &[10, 20].into_iter().collect());
        v.sort();
        assert_eq!(v, vec![30, 31]);
        // A root that is already gone still takes what was below it.
        let procs = vec![p(1, 0), p(11, 1), p(12, 11)];
        let mut v = victims(&procs, Some(1), Some(10), &HashSet::new());
        v.sort();
        assert_eq!(v, vec![11, 12]);
    }

    #[test]
    fn kill_tree_kills_every_process_below_the_root() {
        let mut child = std::process::Command::new("/bin/sh")
            .args([
                "-c",
                "sleep 1234.5 & (sleep 1234.6 | cat) & echo ready; wait",
            ])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn sh");
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read");
        assert_eq!(line, "ready\n");
        let root = i32::try_from(child.id()).expect("pid");
        let mut before = descendants(&scan(), root);
        for _ in 0..100 {
            if before.len() >= 4 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            before = descendants(&scan(), root);
        }
        assert!(before.len() >= 4, "{before:?}");
        kill_tree(Some(root), None, &HashSet::new());
        let _ = child.wait();
        for pid in before {
            let mut alive = true;
            for _ in 0..200 {
                alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .ok()
                    .and_then(|s| parse_stat(&s))
                    .is_some();
                if !alive {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            assert!(!alive, "pid {pid} survived");
        }
    }
}
