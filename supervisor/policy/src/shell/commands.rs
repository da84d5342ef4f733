//! What each command does: wrappers are unwrapped, shells and `-c` strings
//! recursed into, and commands that write, delete, publish or signal are
//! judged by their arguments.

use std::path::{Path, PathBuf};

use super::lists::{self, DeniedKind, SHELLS};
use super::words::Word;
use super::{Stdin, Walker};
use crate::paths::{self, credential_kind, is_secret_file_name, lexical_join, show};

/// What a wrapper runs.
enum Wrapped {
    /// The wrapped command starts at this word.
    At(usize),
    /// The wrapper only looks something up, or runs nothing.
    Nothing,
    /// Already analysed (a `-c` / `-S` string).
    Handled,
}

fn basename(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// Skips options. Those in `takes_arg` consume the next word; `--opt=v`
/// and `-oV` forms are single words anyway. Stops after `--`.
fn after_options(words: &[Word], mut i: usize, takes_arg: &[&str]) -> usize {
    while let Some(w) = words.get(i) {
        let t = w.text.as_str();
        if t == "--" {
            return i + 1;
        }
        if !t.starts_with('-') || t == "-" {
            break;
        }
        i += if takes_arg.contains(&t) { 2 } else { 1 };
    }
    i
}

/// The non-option words (after `after_options`-style skipping, but options
/// may also follow positionals, as GNU tools allow).
fn positionals<'w>(
    words: &'w [Word],
    takes_arg: &[&str],
) -> (Vec<&'w Word>, Vec<(&'w str, &'w Word)>) {
    let mut pos = Vec::new();
    let mut opts = Vec::new();
    let mut i = 1;
    let mut only_pos = false;
    while let Some(w) = words.get(i) {
        let t = w.text.as_str();
        if only_pos || !t.starts_with('-') || t == "-" {
            pos.push(w);
            i += 1;
            continue;
        }
        if t == "--" {
            only_pos = true;
            i += 1;
            continue;
        }
        if takes_arg.contains(&t) {
            if let Some(v) = words.get(i + 1) {
                opts.push((t, v));
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    (pos, opts)
}

fn is_var_name(s: &str) -> bool {
    let mut b = s.bytes();
    b.next()
        .is_some_and(|c| c == b'_' || c.is_ascii_alphabetic())
        && b.all(|c| c == b'_' || c.is_ascii_alphanumeric())
}

impl Walker<'_> {
    /// One command with its words evaluated: the heart of the shell policy.
    pub(super) fn invocation(&mut self, words: &[Word], stdin: &Stdin) {
        if self.stopped() || words.is_empty() {
            return;
        }
        let cmd = &words[0];
        if cmd.dynamic || cmd.glob {
            self.deny(
                "floor:hidden-command",
                format!(
                    "the command name `{}` is only known when the command runs (a variable, substitution or glob), so it cannot be checked. Write the command name literally.",
                    show(cmd.raw())
                ),
            );
            return;
        }
        if cmd.text.is_empty() {
            return;
        }
        let name = basename(&cmd.text);
        if self.concurrent > 0 && self.functions.iter().any(|f| f == name) {
            self.deny(
                "floor:dangerous-pattern",
                format!(
                    "the function `{}` starts copies of itself in a pipeline or in the background (a fork bomb). Write a bounded loop instead.",
                    show(name)
                ),
            );
            return;
        }
        if let Some(kind) = self.denied(name) {
            // Recorded too, so rule examples see every command of a line.
            self.record(words);
            self.deny(
                "floor:denied-binary",
                lists::denied_reason(&show(name), kind),
            );
            return;
        }
        match self.wrapped(name, words) {
            Some(Wrapped::At(i)) => {
                if i < words.len() {
                    self.invocation(&words[i..], stdin);
                }
                return;
            }
            Some(Wrapped::Handled) => return,
            Some(Wrapped::Nothing) | None => {}
        }
        match name {
            "eval" => self.deny(
                "floor:hidden-command",
                "`eval` builds the command when it runs, so it cannot be checked. Write the command directly.".to_string(),
            ),
            // A program given inline was analysed command by command.
            n if SHELLS.contains(&n) && self.shell(name, words, stdin) => return,
            n if SHELLS.contains(&n) => {}
            n if lists::is_interpreter(n) => self.interpreter(name, words, stdin),
            "source" | "." => self.source(words, stdin),
            "alias" => self.alias(words),
            "trap" => self.trap(words),
            "git" => self.git(words),
            "rm" => self.rm(words),
            "rmdir" | "unlink" | "shred" | "truncate" | "tee" | "touch" | "mkdir" => {
                self.writes_all(name, words);
            }
            "mv" => self.mv(words),
            "cp" | "install" | "ln" => self.copy_like(name, words),
            "find" => self.find(words),
            "kill" => self.kill(words),
            "history"
                if words[1..]
                    .iter()
                    .any(|w| w.text.starts_with('-') && w.text.contains('c')) =>
            {
                self.deny(
                    "floor:dangerous-pattern",
                    "`history -c` erases the shell history, which hides what was done. It is refused.".to_string(),
                );
            }
            "export" | "declare" | "typeset" | "readonly" | "local" => self.declare(words),
            "cd" | "pushd" => self.cd(words),
            "popd" => self.set_cwd(None),
            "dd" => self.dd(words),
            "sed" => self.sed(words),
            "tar" => self.tar(words),
            "rsync" => self.rsync(words),
            "watch" => {
                self.watch(words);
                return;
            }
            _ => {}
        }
        if self.stopped() {
            return;
        }
        self.record(words);
        if !matches!(name, "echo" | "printf") {
            self.scan_args(&words[1..]);
        }
    }

    /// Notes a command that runs, for rules to match.
    fn record(&mut self, words: &[Word]) {
        if !self.sc.collect {
            return;
        }
        let joined: Vec<&str> = words.iter().map(|w| w.text.as_str()).collect();
        self.report.commands.push(joined.join(" "));
    }

    fn denied(&self, name: &str) -> Option<DeniedKind> {
        lists::builtin_denied(name).or_else(|| {
            self.sc
                .extra_denied
                .contains(name)
                .then_some(DeniedKind::Config)
        })
    }

    /// Where the command run by a wrapper starts.
    fn wrapped(&mut self, name: &str, words: &[Word]) -> Option<Wrapped> {
        let w = match name {
            "env" => return Some(self.env(words)),
            "command" => {
                let lookup = words[1..]
                    .iter()
                    .take_while(|w| w.text.starts_with('-') && w.text != "--")
                    .any(|w| w.text.contains('v') || w.text.contains('V'));
                if lookup {
                    Wrapped::Nothing
                } else {
                    Wrapped::At(after_options(words, 1, &[]))
                }
            }
            "builtin" | "nohup" | "setsid" | "unbuffer" => {
                Wrapped::At(after_options(words, 1, &[]))
            }
            "exec" => Wrapped::At(after_options(words, 1, &["-a"])),
            "nice" => Wrapped::At(after_options(words, 1, &["-n", "--adjustment"])),
            "time" => Wrapped::At(after_options(
                words,
                1,
                &["-f", "--format", "-o", "--output"],
            )),
            "stdbuf" => Wrapped::At(after_options(words, 1, &["-i", "-o", "-e"])),
            "ionice" => Wrapped::At(after_options(
                words,
                1,
                &[
                    "-c",
                    "-n",
                    "-p",
                    "-P",
                    "-u",
                    "--class",
                    "--classdata",
                    "--pid",
                    "--pgid",
                    "--uid",
                ],
            )),
            "taskset" => Wrapped::At(after_options(words, 1, &[]) + 1),
            "timeout" => {
                let i = after_options(words, 1, &["-s", "--signal", "-k", "--kill-after"]);
                Wrapped::At(i + 1)
            }
            "flock" => {
                let mut i = 1;
                while let Some(w) = words.get(i) {
                    let t = w.text.as_str();
                    if t == "-c" || t == "--command" {
                        self.nested_script("flock -c", words.get(i + 1));
                        return Some(Wrapped::Handled);
                    }
                    if t == "--" || !t.starts_with('-') {
                        break;
                    }
                    i += if matches!(
                        t,
                        "-w" | "--wait" | "--timeout" | "-E" | "--conflict-exit-code"
                    ) {
                        2
                    } else {
                        1
                    };
                }
                // The lock file, then the command.
                Wrapped::At(i + 1)
            }
            "xargs" => {
                let i = after_options(
                    words,
                    1,
                    &[
                        "-a",
                        "--arg-file",
                        "-d",
                        "--delimiter",
                        "-E",
                        "-I",
                        "-L",
                        "-n",
                        "--max-args",
                        "-P",
                        "--max-procs",
                        "-s",
                        "--max-chars",
                        "--process-slot-var",
                    ],
                );
                if i < words.len() {
                    Wrapped::At(i)
                } else {
                    Wrapped::Nothing
                }
            }
            "busybox" | "toybox" => match words.get(1) {
                Some(a) if !a.text.starts_with('-') => Wrapped::At(1),
                _ => Wrapped::Nothing,
            },
            n if lists::is_dynamic_loader(n) => Wrapped::At(after_options(
                words,
                1,
                &[
                    "--library-path",
                    "--preload",
                    "--argv0",
                    "--audit",
                    "--inhibit-rpath",
                ],
            )),
            _ => return None,
        };
        Some(w)
    }

    fn env(&mut self, words: &[Word]) -> Wrapped {
        let mut i = 1;
        while let Some(w) = words.get(i) {
            let t = w.text.as_str();
            if t == "--" {
                i += 1;
                break;
            }
            if t == "-S" || t == "--split-string" {
                self.nested_script("env -S", words.get(i + 1));
                return Wrapped::Handled;
            }
            if let Some(s) = t
                .strip_prefix("--split-string=")
                .or_else(|| t.strip_prefix("-S"))
            {
                let script = Word {
                    text: s.to_string(),
                    ..w.clone()
                };
                self.nested_script("env -S", Some(&script));
                return Wrapped::Handled;
            }
            if t.starts_with('-') {
                i += if matches!(t, "-u" | "--unset" | "-C" | "--chdir") {
                    2
                } else {
                    1
                };
                continue;
            }
            if let Some((var, _)) = t.split_once('=')
                && is_var_name(var)
            {
                if lists::is_dangerous_var(var) {
                    self.dangerous_var(var);
                    return Wrapped::Handled;
                }
                i += 1;
                continue;
            }
            break;
        }
        if i < words.len() {
            Wrapped::At(i)
        } else {
            Wrapped::Nothing
        }
    }

    /// A string that a command will run as a shell script.
    fn nested_script(&mut self, what: &str, script: Option<&Word>) {
        match script {
            Some(s) if s.dynamic => self.deny(
                "floor:hidden-command",
                format!(
                    "the script given to `{what}` is only known when the command runs, so it cannot be checked. Write the commands directly."
                ),
            ),
            Some(s) => {
                let text = s.text.clone();
                self.subprogram(&text);
            }
            None => {}
        }
    }

    /// Returns true when the shell runs a program given inline (`-c`,
    /// heredoc, here-string), which was then analysed.
    fn shell(&mut self, name: &str, words: &[Word], stdin: &Stdin) -> bool {
        let mut i = 1;
        let mut c_flag = false;
        let mut s_flag = false;
        while let Some(w) = words.get(i) {
            let t = w.text.as_str();
            if w.dynamic && t.starts_with(['-', '+']) {
                self.deny(
                    "floor:hidden-command",
                    format!("the options of `{name}` are only known when the command runs, so it cannot be checked."),
                );
                return true;
            }
            if t == "--" || t == "-" {
                i += 1;
                break;
            }
            if t.starts_with("--") {
                i += if matches!(t, "--rcfile" | "--init-file") {
                    2
                } else {
                    1
                };
                continue;
            }
            if t.len() > 1 && t.starts_with(['-', '+']) {
                let flags = &t[1..];
                if t.starts_with('-') && flags.contains('c') {
                    c_flag = true;
                }
                if flags.contains('s') {
                    s_flag = true;
                }
                i += if flags.contains(['o', 'O']) { 2 } else { 1 };
                continue;
            }
            break;
        }
        if c_flag {
            let what = format!("{name} -c");
            self.nested_script(&what, words.get(i));
            return true;
        }
        if let Some(script) = words.get(i)
            && !s_flag
        {
            if script.dynamic {
                self.deny(
                    "floor:hidden-command",
                    format!(
                        "`{name} {}` runs a script that is only known when it runs (a substitution or variable), so it cannot be checked. Run the commands directly.",
                        show(script.raw())
                    ),
                );
                return true;
            }
            // A script file: its content is the sandbox's business.
            return false;
        }
        self.program_from_stdin(name, stdin, true);
        matches!(stdin, Stdin::Doc(_))
    }

    fn interpreter(&mut self, name: &str, words: &[Word], stdin: &Stdin) {
        let has_program = words[1..].iter().any(|w| {
            !w.text.starts_with('-')
                || matches!(
                    w.text.as_str(),
                    "-c" | "-e" | "-E" | "-m" | "-r" | "-p" | "--eval" | "--print"
                )
        });
        if !has_program {
            self.program_from_stdin(name, stdin, false);
        }
    }

    fn program_from_stdin(&mut self, name: &str, stdin: &Stdin, is_shell: bool) {
        match stdin {
            Stdin::Doc(text) if is_shell => {
                let text = text.clone();
                self.subprogram(&text);
            }
            Stdin::Pipe => self.deny(
                "floor:hidden-command",
                format!(
                    "piping into `{}` runs whatever the pipe produces as a program, which cannot be checked. Run the commands directly.",
                    show(name)
                ),
            ),
            Stdin::Doc(_) | Stdin::File | Stdin::Inherited => {}
        }
    }

    /// `source FILE`: a file's content is the sandbox's business, but a
    /// computed or piped one hides the commands.
    fn source(&mut self, words: &[Word], stdin: &Stdin) {
        let i = after_options(words, 1, &[]);
        match words.get(i) {
            Some(w) if w.dynamic => self.deny(
                "floor:hidden-command",
                format!(
                    "`source {}` runs commands that are only known when it runs, so they cannot be checked. Run the commands directly.",
                    show(w.raw())
                ),
            ),
            Some(w) if matches!(w.text.as_str(), "/dev/stdin" | "/dev/fd/0" | "/proc/self/fd/0") => {
                self.program_from_stdin("source", stdin, true);
            }
            Some(_) | None => {}
        }
    }

    fn alias(&mut self, words: &[Word]) {
        for w in &words[1..] {
            if let Some((_, value)) = w.text.split_once('=') {
                let script = Word {
                    text: value.to_string(),
                    ..w.clone()
                };
                self.nested_script("alias", Some(&script));
            }
        }
    }

    fn trap(&mut self, words: &[Word]) {
        let i = after_options(words, 1, &[]);
        if let Some(w) = words.get(i) {
            self.nested_script("trap", Some(w));
        }
    }

    fn declare(&mut self, words: &[Word]) {
        for w in &words[1..] {
            if let Some((var, _)) = w.text.split_once('=')
                && lists::is_dangerous_var(var.trim_end_matches('+'))
            {
                self.dangerous_var(var.trim_end_matches('+'));
                return;
            }
        }
    }

    fn cd(&mut self, words: &[Word]) {
        let i = after_options(words, 1, &[]);
        let cwd = match words.get(i) {
            None => Some(self.sc.home.to_path_buf()),
            Some(w) if w.dynamic || w.glob || w.text == "-" => None,
            Some(w) => Some(lexical_join(self.base(), &w.text)),
        };
        self.set_cwd(cwd);
    }

    /// The absolute place a command argument names (no filesystem access).
    fn place(&self, text: &str) -> PathBuf {
        lexical_join(self.base(), text)
    }

    fn under_private_tmp(p: &Path) -> bool {
        p.starts_with("/tmp") && p != Path::new("/tmp")
    }

    /// Credential and protected paths: refused for any access. `raw` is the
    /// argument as written, for the reason.
    fn sensitive(&mut self, p: &Path, raw: &str) -> bool {
        if let Some(hit) = self.sc.protected.iter().find(|prot| p.starts_with(prot)) {
            self.deny(
                "floor:protected",
                format!(
                    "`{}` is one of the supervisor's own files ({}); commands can never touch it.",
                    show(raw),
                    show(&hit.to_string_lossy())
                ),
            );
            return true;
        }
        if let Some(what) = credential_kind(p, Some(self.sc.home)) {
            self.deny(
                "floor:credential-path",
                format!(
                    "`{}` is {what}; credential paths are never available to commands. Ask the user if the task really needs it.",
                    show(raw)
                ),
            );
            return true;
        }
        false
    }

    /// A file a command writes (redirect, tee, cp destination, ...).
    pub(super) fn write_target(&mut self, w: &Word, what: &str) {
        let t = w.text.as_str();
        if t.is_empty() {
            // Entirely computed at run time: the sandbox confines it.
            return;
        }
        if matches!(t, "/dev/null" | "/dev/stdout" | "/dev/stderr" | "-")
            || matches!(t, "/dev/fd/1" | "/dev/fd/2")
        {
            return;
        }
        let literal = if w.glob { glob_dir(t) } else { t };
        let p = self.place(literal);
        if self.sensitive(&p, w.raw()) {
            return;
        }
        let shown = || show(w.raw());
        let Ok(rel) = p.strip_prefix(self.sc.workspace) else {
            if Self::under_private_tmp(&p) {
                return;
            }
            let computed = if w.dynamic {
                format!(
                    " (`{}` is only partly known before it runs; with its variables empty it is that path)",
                    shown()
                )
            } else {
                String::new()
            };
            self.deny(
                "floor:path-scope",
                format!(
                    "{what} writes to {}{computed}, outside the workspace; commands may only write inside the workspace and the sandbox's private /tmp.",
                    show(&p.to_string_lossy())
                ),
            );
            return;
        };
        if paths::is_git_internal(rel) && git_runs_it(rel) {
            self.deny(
                "floor:git-internals",
                format!(
                    "{what} writes to `{}`; git's config and hooks run commands when git runs (also on the host), so commands never write them. Use `git` subcommands instead.",
                    shown()
                ),
            );
            return;
        }
        if !w.glob
            && let Some(real) = paths::follow_inside(self.sc.workspace, rel, self.sc.fs)
            && real != p
            && !real.starts_with(self.sc.workspace)
            && !Self::under_private_tmp(&real)
        {
            self.deny(
                "floor:path-scope",
                format!(
                    "{what} writes to `{}`, a symlink to {}, outside the workspace.",
                    shown(),
                    show(&real.to_string_lossy())
                ),
            );
            return;
        }
        self.note_secret(&p, t);
    }

    /// A file a command reads through a redirect.
    pub(super) fn read_target(&mut self, w: &Word) {
        if w.text.is_empty() {
            return;
        }
        let literal = if w.glob { glob_dir(&w.text) } else { &w.text };
        let p = self.place(literal);
        if !self.sensitive(&p, w.raw()) {
            self.note_secret(&p, &w.text);
        }
    }

    fn note_secret(&mut self, p: &Path, text: &str) {
        if self.report.secret.is_some() {
            return;
        }
        if !is_secret_file_name(basename(text)) {
            return;
        }
        if let Ok(rel) = p.strip_prefix(self.sc.workspace) {
            self.report.secret = Some(rel.to_string_lossy().into_owned());
        }
    }

    /// Arguments of any command: credential paths are refused, workspace
    /// secret files need an approval.
    fn scan_args(&mut self, args: &[Word]) {
        for w in args {
            if self.stopped() {
                return;
            }
            let t = w.text.as_str();
            let value = if t.starts_with('-') || t.contains('=') {
                t.split_once('=').map(|(_, v)| v)
            } else {
                None
            };
            for cand in std::iter::once(t).chain(value) {
                if cand.is_empty() {
                    continue;
                }
                if cand.contains('/') || cand.starts_with('.') {
                    if w.glob {
                        let pattern = if cand.starts_with('/') {
                            cand.to_string()
                        } else {
                            format!("{}/{cand}", self.base().to_string_lossy())
                        };
                        if paths::glob_reaches_credential(&pattern, Some(self.sc.home)) {
                            self.deny(
                                "floor:credential-path",
                                format!(
                                    "`{}` may match credential paths; credential paths are never available to commands.",
                                    show(w.raw())
                                ),
                            );
                            return;
                        }
                        continue;
                    }
                    // A relative path without `..`, from the workspace,
                    // stays inside it: no credential path can be there.
                    let inside = !cand.starts_with('/')
                        && self.cwd.as_deref() == Some(self.sc.workspace)
                        && !cand.split('/').any(|c| c == "..");
                    if inside && !self.protected_inside {
                        if is_secret_file_name(basename(cand)) {
                            let p = self.place(cand);
                            self.note_secret(&p, cand);
                        }
                        continue;
                    }
                    let p = self.place(cand);
                    if self.sensitive(&p, w.raw()) {
                        return;
                    }
                    self.note_secret(&p, cand);
                } else if is_secret_file_name(cand) {
                    let p = self.place(cand);
                    self.note_secret(&p, cand);
                }
            }
        }
    }

    fn rm(&mut self, words: &[Word]) {
        let mut recursive = false;
        let mut targets = Vec::new();
        let mut only_pos = false;
        for w in &words[1..] {
            let t = w.text.as_str();
            if !only_pos && t == "--" {
                only_pos = true;
            } else if !only_pos && t.starts_with("--") {
                recursive |= t == "--recursive";
            } else if !only_pos && t.starts_with('-') && t.len() > 1 {
                recursive |= t.contains(['r', 'R']);
            } else {
                targets.push(w);
            }
        }
        let mut confirm = Vec::new();
        for w in targets {
            if let Some(rel) = self.delete_target(w, recursive, "rm") {
                confirm.push(rel);
            }
            if self.stopped() {
                return;
            }
        }
        if recursive && !confirm.is_empty() {
            self.confirm(
                "confirm:rm-recursive",
                format!(
                    "`rm -r` deletes {} inside the workspace, which cannot be undone; it needs the user's confirmation.",
                    show(&confirm.join(", "))
                ),
                None,
            );
        }
    }

    /// A path a command deletes. Returns the workspace-relative path when a
    /// recursive delete of it needs a confirmation.
    fn delete_target(&mut self, w: &Word, recursive: bool, cmd: &str) -> Option<String> {
        if w.dynamic && recursive {
            self.deny(
                "floor:dangerous-pattern",
                format!(
                    "`{cmd} -r {}`: the target is only known when the command runs; if the variable is empty or unset it deletes from `/`. Name the directory literally.",
                    show(w.raw())
                ),
            );
            return None;
        }
        let t = w.text.as_str();
        if t.is_empty() {
            return None;
        }
        let literal = if w.glob { glob_dir(t) } else { t };
        let p = self.place(literal);
        let shown = show(w.raw());
        if recursive {
            let broad = if p == Path::new("/") {
                Some("the whole filesystem")
            } else if p == self.sc.workspace {
                Some("the whole workspace")
            } else if self.sc.workspace.starts_with(&p) {
                Some("the workspace and everything around it")
            } else if self.sc.home.starts_with(&p) {
                Some("the home directory")
            } else {
                None
            };
            if let Some(what) = broad {
                self.deny(
                    "floor:dangerous-pattern",
                    format!(
                        "`{cmd} -r {shown}` would delete {what}. Delete specific files or directories inside the workspace instead."
                    ),
                );
                return None;
            }
        }
        if self.sensitive(&p, w.raw()) {
            return None;
        }
        let Ok(rel) = p.strip_prefix(self.sc.workspace) else {
            if Self::under_private_tmp(&p) {
                return None;
            }
            self.deny(
                "floor:path-scope",
                format!(
                    "`{cmd}` deletes {}, outside the workspace; commands only change files inside the workspace.",
                    show(&p.to_string_lossy())
                ),
            );
            return None;
        };
        let regenerable = rel
            .components()
            .any(|c| lists::is_build_dir(&c.as_os_str().to_string_lossy()));
        if recursive && (!regenerable || self.cwd.is_none()) {
            return Some(rel.to_string_lossy().into_owned());
        }
        None
    }

    fn writes_all(&mut self, name: &str, words: &[Word]) {
        let takes_arg: &[&str] = match name {
            "touch" => &["-d", "-r", "-t", "--date", "--reference"],
            "mkdir" => &["-m", "--mode"],
            "shred" => &["-n", "-s", "--iterations", "--size"],
            "truncate" => &["-s", "-r", "--size", "--reference"],
            _ => &[],
        };
        let (pos, _) = positionals(words, takes_arg);
        for w in pos {
            self.write_target(w, &format!("`{name}`"));
            if self.stopped() {
                return;
            }
        }
    }

    fn mv(&mut self, words: &[Word]) {
        let (pos, opts) = positionals(words, &["-t", "--target-directory", "-S", "--suffix"]);
        for (o, v) in opts {
            if o == "-t" || o == "--target-directory" {
                self.write_target(v, "`mv`");
            }
        }
        for w in pos {
            // Sources disappear and the destination is written.
            self.write_target(w, "`mv`");
            if self.stopped() {
                return;
            }
        }
    }

    fn copy_like(&mut self, name: &str, words: &[Word]) {
        let takes_arg: &[&str] = match name {
            "install" => &[
                "-t",
                "-m",
                "-o",
                "-g",
                "-S",
                "--target-directory",
                "--mode",
                "--owner",
                "--group",
                "--suffix",
            ],
            _ => &["-t", "--target-directory", "-S", "--suffix"],
        };
        let (pos, opts) = positionals(words, takes_arg);
        let mut has_target_dir = false;
        for (o, v) in opts {
            if o == "-t" || o == "--target-directory" {
                has_target_dir = true;
                self.write_target(v, &format!("`{name}`"));
            }
        }
        let (sources, dest) = match (has_target_dir, pos.split_last()) {
            (false, Some((last, rest))) if !rest.is_empty() => (rest.to_vec(), Some(*last)),
            _ => (pos.clone(), None),
        };
        for s in sources {
            let b = basename(&s.text);
            if s.text.contains('/') && self.denied(b).is_some() {
                self.deny(
                    "floor:denied-binary",
                    format!(
                        "`{name}` would make a copy or alias of `{}`, which is on the denied-binaries list.",
                        show(b)
                    ),
                );
                return;
            }
        }
        if let Some(d) = dest {
            self.write_target(d, &format!("`{name}`"));
        }
    }

    fn find(&mut self, words: &[Word]) {
        let mut i = 1;
        while let Some(w) = words.get(i) {
            match w.text.as_str() {
                "-H" | "-L" | "-P" => i += 1,
                "-D" => i += 2,
                t if t.starts_with("-O") => i += 1,
                _ => break,
            }
        }
        let mut starts = Vec::new();
        while let Some(w) = words.get(i) {
            let t = w.text.as_str();
            if t.starts_with('-') || t == "(" || t == "!" {
                break;
            }
            starts.push(w);
            i += 1;
        }
        let expr = &words[i.min(words.len())..];
        let mut j = 0;
        let mut deletes = false;
        while j < expr.len() {
            match expr[j].text.as_str() {
                "-exec" | "-execdir" | "-ok" | "-okdir" => {
                    let start = j + 1;
                    let mut end = start;
                    while end < expr.len() && !matches!(expr[end].text.as_str(), ";" | "+") {
                        end += 1;
                    }
                    self.invocation(&expr[start..end], &Stdin::Inherited);
                    if self.stopped() {
                        return;
                    }
                    j = end + 1;
                }
                "-delete" => {
                    deletes = true;
                    j += 1;
                }
                "-fprint" | "-fprint0" | "-fprintf" | "-fls" => {
                    if let Some(t) = expr.get(j + 1) {
                        self.write_target(t, "`find`");
                    }
                    j += 2;
                }
                _ => j += 1,
            }
        }
        if deletes {
            let dot = Word::literal(".");
            let starts = if starts.is_empty() {
                vec![&dot]
            } else {
                starts
            };
            for s in starts {
                let p = self.place(if s.glob { glob_dir(&s.text) } else { &s.text });
                if s.dynamic || !(p.starts_with(self.sc.workspace) || Self::under_private_tmp(&p)) {
                    self.deny(
                        "floor:dangerous-pattern",
                        format!(
                            "`find {} -delete` deletes outside the workspace (or somewhere only known at run time). Limit it to a directory inside the workspace.",
                            show(s.raw())
                        ),
                    );
                    return;
                }
            }
        }
    }

    fn kill(&mut self, words: &[Word]) {
        let mut i = 1;
        if let Some(w) = words.get(1) {
            let t = w.text.as_str();
            if t == "-l" || t == "-L" {
                return;
            }
            if t == "-s" || t == "-n" {
                i = 3;
            } else if t.starts_with('-') && t != "--" {
                i = 2;
            }
        }
        for w in words.iter().skip(i) {
            if matches!(w.text.as_str(), "-1" | "1") {
                self.deny(
                    "floor:dangerous-pattern",
                    format!(
                        "`kill {}` signals every process it can reach (or init). Signal the specific process you started.",
                        show(&w.text)
                    ),
                );
                return;
            }
        }
    }

    fn dd(&mut self, words: &[Word]) {
        for w in &words[1..] {
            if let Some(v) = w.text.strip_prefix("if=") {
                let raw_device = v.starts_with("/dev/")
                    && !matches!(
                        v,
                        "/dev/zero" | "/dev/urandom" | "/dev/random" | "/dev/null" | "/dev/stdin"
                    );
                if raw_device {
                    self.deny(
                        "floor:dangerous-pattern",
                        format!(
                            "`dd if={}` reads a raw device. Use ordinary files.",
                            show(v)
                        ),
                    );
                    return;
                }
            } else if let Some(v) = w.text.strip_prefix("of=") {
                let target = Word {
                    text: v.to_string(),
                    raw: v.to_string(),
                    ..w.clone()
                };
                self.write_target(&target, "`dd`");
                if self.stopped() {
                    return;
                }
            }
        }
    }

    fn sed(&mut self, words: &[Word]) {
        let in_place = words[1..].iter().any(|w| {
            let t = w.text.as_str();
            t.starts_with("--in-place")
                || (t.starts_with('-') && !t.starts_with("--") && t.contains('i'))
        });
        if !in_place {
            return;
        }
        let takes_arg = ["-e", "--expression", "-f", "--file", "-l", "--line-length"];
        let (pos, opts) = positionals(words, &takes_arg);
        let script_given = !opts.is_empty()
            || words[1..]
                .iter()
                .any(|w| w.text.starts_with("--expression=") || w.text.starts_with("--file="));
        let files = if script_given {
            &pos[..]
        } else {
            pos.get(1..).unwrap_or(&[])
        };
        for w in files {
            self.write_target(w, "`sed -i`");
            if self.stopped() {
                return;
            }
        }
    }

    fn tar(&mut self, words: &[Word]) {
        let mut i = 1;
        while i < words.len() {
            let w = &words[i];
            let t = w.text.as_str();
            let inline = t
                .strip_prefix("--checkpoint-action=exec=")
                .or_else(|| t.strip_prefix("--to-command="))
                .or_else(|| t.strip_prefix("--use-compress-program="))
                .or_else(|| t.strip_prefix("--info-script="))
                .or_else(|| t.strip_prefix("--new-volume-script="))
                .or_else(|| t.strip_prefix("--rsh-command="));
            if let Some(script) = inline {
                let s = Word {
                    text: script.to_string(),
                    ..w.clone()
                };
                self.nested_script("tar", Some(&s));
            } else if matches!(
                t,
                "-I" | "-F" | "--to-command" | "--use-compress-program" | "--info-script"
            ) {
                self.nested_script("tar", words.get(i + 1));
                i += 1;
            }
            if self.stopped() {
                return;
            }
            i += 1;
        }
    }

    fn rsync(&mut self, words: &[Word]) {
        for (i, w) in words.iter().enumerate() {
            if let Some(script) = w.text.strip_prefix("--rsh=") {
                let s = Word {
                    text: script.to_string(),
                    ..w.clone()
                };
                self.nested_script("rsync --rsh", Some(&s));
            } else if w.text == "-e" || w.text == "--rsh" {
                self.nested_script("rsync -e", words.get(i + 1));
            }
        }
    }

    fn watch(&mut self, words: &[Word]) {
        let mut exec = false;
        let mut i = 1;
        while let Some(w) = words.get(i) {
            let t = w.text.as_str();
            if t == "--" {
                i += 1;
                break;
            }
            if !t.starts_with('-') {
                break;
            }
            exec |= t == "-x" || t == "--exec";
            i += if matches!(t, "-n" | "--interval" | "-q" | "--equexit") {
                2
            } else {
                1
            };
        }
        let rest = &words[i.min(words.len())..];
        if exec {
            self.invocation(rest, &Stdin::Inherited);
            return;
        }
        if rest.iter().any(|w| w.dynamic) {
            self.deny(
                "floor:hidden-command",
                "the command given to `watch` is only known when it runs, so it cannot be checked."
                    .to_string(),
            );
            return;
        }
        let script: Vec<&str> = rest.iter().map(|w| w.text.as_str()).collect();
        let text = script.join(" ");
        self.subprogram(&text);
    }

    fn git(&mut self, words: &[Word]) {
        let mut i = 1;
        while let Some(w) = words.get(i) {
            let t = w.text.as_str();
            match t {
                "-c" => {
                    if let Some(kv) = words.get(i + 1) {
                        self.git_transient_config(kv);
                        if self.stopped() {
                            return;
                        }
                    }
                    i += 2;
                }
                "-C" | "--git-dir" | "--work-tree" | "--namespace" | "--super-prefix"
                | "--config-env" => {
                    if t == "--config-env" {
                        self.git_config_env(words.get(i + 1));
                    }
                    i += 2;
                }
                _ if t.starts_with("--config-env=") => {
                    let rest = Word {
                        text: t["--config-env=".len()..].to_string(),
                        ..w.clone()
                    };
                    self.git_config_env(Some(&rest));
                    i += 1;
                }
                _ if t.starts_with('-') => i += 1,
                _ => break,
            }
            if self.stopped() {
                return;
            }
        }
        if let Some(ext) = words.iter().find(|w| w.text.starts_with("ext::")) {
            self.deny(
                "floor:hidden-command",
                format!(
                    "`{}` uses git's ext:: transport, which runs a command. Use an ordinary remote.",
                    show(ext.raw())
                ),
            );
            return;
        }
        let Some(sub) = words.get(i) else { return };
        let rest = &words[i + 1..];
        let has = |f: &str| rest.iter().any(|w| w.text == f);
        let short_has = |c: char| {
            rest.iter()
                .any(|w| w.text.starts_with('-') && !w.text.starts_with("--") && w.text.contains(c))
        };
        match sub.text.as_str() {
            "config" => self.git_config(rest),
            "push" => self.git_push(rest),
            "reset" if has("--hard") => self.confirm(
                "confirm:git-reset-hard",
                "`git reset --hard` throws away uncommitted changes and moves the branch; it needs the user's confirmation.".to_string(),
                None,
            ),
            "clean" if (has("--force") || short_has('f')) && !(has("--dry-run") || short_has('n')) => self.confirm(
                "confirm:git-clean",
                "`git clean -f` deletes untracked files for good; it needs the user's confirmation.".to_string(),
                None,
            ),
            "checkout" if has("-f") || has("--force") || has("--") || has(".") => self.confirm(
                "confirm:git-discard",
                "this `git checkout` overwrites uncommitted changes in the working tree; it needs the user's confirmation.".to_string(),
                None,
            ),
            "restore" if !(has("--staged") || has("-S")) || has("--worktree") || has("-W") => self.confirm(
                "confirm:git-discard",
                "`git restore` overwrites uncommitted changes in the working tree; it needs the user's confirmation.".to_string(),
                None,
            ),
            "branch" if has("-D") || ((has("-d") || has("--delete")) && (has("-f") || has("--force"))) => self.confirm(
                "confirm:git-branch-delete",
                "force-deleting a branch can lose commits that are on no other branch; it needs the user's confirmation.".to_string(),
                None,
            ),
            "stash" if rest.first().is_some_and(|w| matches!(w.text.as_str(), "drop" | "clear")) => self.confirm(
                "confirm:git-stash-drop",
                "dropping stashes loses the changes in them; it needs the user's confirmation.".to_string(),
                None,
            ),
            "filter-branch" | "filter-repo" => self.confirm(
                "confirm:git-history-rewrite",
                "rewriting history changes every commit hash of the branch; it needs the user's confirmation.".to_string(),
                None,
            ),
            "reflog" if rest.first().is_some_and(|w| matches!(w.text.as_str(), "expire" | "delete")) => self.confirm(
                "confirm:git-reflog",
                "expiring the reflog removes the last way to recover lost commits; it needs the user's confirmation.".to_string(),
                None,
            ),
            "update-ref" if has("-d") => self.confirm(
                "confirm:git-update-ref",
                "deleting a ref directly can lose commits; it needs the user's confirmation.".to_string(),
                None,
            ),
            _ => {}
        }
    }

    /// `git -c key=value`: lives for one command, inside the sandbox. A key
    /// whose value is a command is analysed as one.
    fn git_transient_config(&mut self, kv: &Word) {
        let Some((key, value)) = kv.text.split_once('=') else {
            return;
        };
        if !lists::git_key_runs_command(key) {
            return;
        }
        let value = value.trim_start_matches('!');
        let script = Word {
            text: value.to_string(),
            ..kv.clone()
        };
        let what = format!("git -c {}", show(key));
        self.nested_script(&what, Some(&script));
    }

    fn git_config_env(&mut self, kv: Option<&Word>) {
        let Some(kv) = kv else { return };
        let key = kv.text.split_once('=').map_or(kv.text.as_str(), |(k, _)| k);
        if lists::git_key_runs_command(key) {
            self.deny(
                "floor:hidden-command",
                format!(
                    "`git --config-env {}` takes a command from an environment variable, so it cannot be checked.",
                    show(key)
                ),
            );
        }
    }

    /// `git config KEY VALUE` persists: a command-running key would run on
    /// the host the next time anyone uses git there.
    fn git_config(&mut self, rest: &[Word]) {
        let takes_arg = [
            "-f",
            "--file",
            "--blob",
            "--type",
            "--default",
            "--comment",
            "--value",
        ];
        let mut pos: Vec<&Word> = Vec::new();
        let mut reading = false;
        let mut i = 0;
        while let Some(w) = rest.get(i) {
            let t = w.text.as_str();
            if t.starts_with('-') {
                reading |= t.starts_with("--get")
                    || matches!(
                        t,
                        "-l" | "--list"
                            | "--unset"
                            | "--unset-all"
                            | "--remove-section"
                            | "--rename-section"
                            | "-e"
                            | "--edit"
                    );
                i += if takes_arg.contains(&t) { 2 } else { 1 };
                continue;
            }
            pos.push(w);
            i += 1;
        }
        let key = match pos.first().map(|w| w.text.as_str()) {
            Some("set") => pos.get(1),
            Some("get" | "list" | "unset" | "rename-section" | "remove-section" | "edit") => None,
            _ if reading || pos.len() < 2 => None,
            _ => pos.first(),
        };
        let Some(key) = key else { return };
        if key.dynamic {
            self.deny(
                "floor:hidden-command",
                "`git config` with a key only known at run time cannot be checked.".to_string(),
            );
            return;
        }
        if lists::git_key_runs_command(&key.text) {
            self.deny(
                "floor:dangerous-pattern",
                format!(
                    "`git config {}` stores a command that git runs later, including when someone runs git on the host. It is refused; pass settings with `git -c` for a single command if needed.",
                    show(&key.text)
                ),
            );
        }
    }

    fn git_push(&mut self, rest: &[Word]) {
        let mut force = false;
        let mut pos: Vec<&str> = Vec::new();
        let mut i = 0;
        let mut only_pos = false;
        while let Some(w) = rest.get(i) {
            let t = w.text.as_str();
            i += 1;
            if only_pos || !t.starts_with('-') {
                pos.push(t);
                continue;
            }
            match t {
                "--" => only_pos = true,
                "--force" | "--force-if-includes" | "--mirror" | "--delete" | "--prune" => {
                    force = true
                }
                _ if t.starts_with("--force-with-lease") => force = true,
                "-o" | "--push-option" | "--repo" | "--receive-pack" | "--exec" => i += 1,
                _ if t.starts_with("--") => {}
                _ => force |= t.contains(['f', 'd']),
            }
        }
        let refspecs = pos.get(1..).unwrap_or(&[]);
        if refspecs
            .iter()
            .any(|r| r.starts_with('+') || r.starts_with(':'))
        {
            force = true;
        }
        let branch = refspecs.last().map(|r| {
            let r = r.trim_start_matches('+');
            r.rsplit(':').next().unwrap_or(r).to_string()
        });
        if force {
            self.confirm(
                "confirm:git-push-force",
                "a forced push (or a push that deletes refs) rewrites the remote's history for everyone; it needs the user's typed confirmation.".to_string(),
                branch.filter(|b| !b.is_empty()),
            );
        } else {
            self.confirm(
                "confirm:git-push",
                "`git push` publishes commits to a remote, which cannot be taken back quietly; it needs the user's confirmation.".to_string(),
                None,
            );
        }
    }
}

/// The literal part of a glob, up to its first pattern character.
fn glob_prefix(t: &str) -> &str {
    let end = t.find(['*', '?', '[', '{']).unwrap_or(t.len());
    &t[..end]
}

/// The directory a glob lists: `/*` → `/`, `build/*.o` → `build/`, `*` → `.`.
fn glob_dir(t: &str) -> &str {
    let prefix = glob_prefix(t);
    match prefix.rfind('/') {
        Some(0) => "/",
        Some(i) => &prefix[..i],
        None => ".",
    }
}

/// `.git/config`, `.git/hooks/*` and the like: files whose content git runs.
fn git_runs_it(rel: &Path) -> bool {
    let mut seen_git = false;
    for c in rel.components() {
        let n = c.as_os_str().to_string_lossy();
        if seen_git && (n.eq_ignore_ascii_case("hooks") || n.eq_ignore_ascii_case("config")) {
            return true;
        }
        if n.eq_ignore_ascii_case(".git") {
            seen_git = true;
        }
    }
    false
}
