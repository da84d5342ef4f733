//! What each command does: wrappers are unwrapped, shells and `-c` strings
//! recursed into, and commands that write, delete, publish or signal are
//! judged by their arguments.

use std::path::{Path, PathBuf};

use super::launchers::{self, Known};
use super::lists::{self, DeniedKind, SHELLS};
use super::patterns::{self, Pattern};
use super::words::{Positional, Tree, Word};
use super::{Stdin, Walker};
use crate::paths::{self, credential_kind, is_secret_file_name, lexical_join, show};

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

/// The positional parameters a shell gets from the words after its script
/// (`$0` first, unless `zero` names it); `None` when there are none, or
/// when bash may split them (their number is then unknown).
fn positional(args: &[Word], zero: Option<&str>) -> Option<Positional> {
    if args.iter().any(Word::may_split) {
        return None;
    }
    let (zero, rest) = match zero {
        Some(z) => (Word::literal(z), args),
        None => (args.first()?.clone(), args.get(1..).unwrap_or_default()),
    };
    if rest.is_empty() {
        return None;
    }
    Some(Positional {
        zero,
        rest: rest.to_vec(),
    })
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

impl Walker<'_> {
    /// One command with its words evaluated: the heart of the shell policy.
    pub(super) fn invocation(&mut self, words: &[Word], stdin: &Stdin) {
        if self.stopped() || words.is_empty() {
            return;
        }
        if self.launched >= super::MAX_LAUNCHED {
            self.deny(
                "floor:hidden-command",
                format!(
                    "the command runs its command through more than {} programs that run programs (like `nice nice …`), so it cannot be checked. Write it more plainly.",
                    super::MAX_LAUNCHED
                ),
            );
            return;
        }
        self.launched += 1;
        self.command_words(words, stdin);
        self.launched -= 1;
    }

    fn command_words(&mut self, words: &[Word], stdin: &Stdin) {
        let Some(name) = self.command_name(&words[0]) else {
            return;
        };
        if self.concurrent > 0
            && self.functions.iter().any(|f| f == name)
            && self.dangerous(
                Pattern::ForkBomb,
                format!(
                    "the function `{}` starts copies of itself in a pipeline or in the background (a fork bomb). Write a bounded loop instead.",
                    show(name)
                ),
            )
        {
            return;
        }
        if !self.aliases.is_empty() {
            // Whether bash expands it depends on `expand_aliases`: both
            // readings are judged.
            self.expand_alias(name, words);
            if self.stopped() {
                return;
            }
        }
        if let Some(kind) = self.denied(name) {
            // Recorded too, so rule examples see every command of a line.
            self.record(words);
            let mut reason = lists::denied_reason(&show(name), kind);
            if lists::is_mkfs(name) {
                reason = format!("{reason} {}", patterns::lift_hint(Pattern::Mkfs));
            }
            self.deny("floor:denied-binary", reason);
            return;
        }
        if lists::is_mkfs(name) && self.sc.lifted.contains(Pattern::Mkfs) {
            self.report.lifted.insert(Pattern::Mkfs);
        }
        match launchers::lookup(name) {
            Some(Known::Launcher(l, t)) if let Some(at) = launchers::applies(l, words) => {
                self.launch(name, l, t, &words[at..], stdin);
                return;
            }
            Some(Known::Options(t)) => self.command_options(name, t, words),
            Some(Known::Launcher(..)) | None => {}
        }
        if self.by_name(name, words, stdin) {
            return;
        }
        if self.stopped() {
            return;
        }
        self.record(words);
        if !matches!(name, "echo" | "printf") {
            self.scan_args(&words[1..]);
        }
    }

    /// The command's base name, when it is written literally (refused when
    /// it is only known at run time); `None` for an empty one too.
    fn command_name<'w>(&mut self, cmd: &'w Word) -> Option<&'w str> {
        if cmd.tree != Tree::No {
            self.deny(
                "floor:hidden-command",
                "the command name is `{}`, a file name `find` passes, so what runs cannot be checked. Name the program literally.".to_string(),
            );
            return None;
        }
        if cmd.dynamic || cmd.glob {
            self.deny(
                "floor:hidden-command",
                format!(
                    "the command name `{}` is only known when the command runs (a variable, substitution or glob), so it cannot be checked. Write the command name literally.",
                    show(cmd.raw())
                ),
            );
            return None;
        }
        if cmd.text.is_empty() {
            return None;
        }
        Some(basename(&cmd.text))
    }

    /// What the named command does, by name (`git`, `rm`, `find`, ...);
    /// true when an inline shell program was analysed in its place.
    fn by_name(&mut self, name: &str, words: &[Word], stdin: &Stdin) -> bool {
        match name {
            "eval" => self.deny(
                "floor:hidden-command",
                "`eval` builds the command when it runs, so it cannot be checked. Write the command directly.".to_string(),
            ),
            // A program given inline was analysed command by command.
            n if SHELLS.contains(&n) && self.shell(name, words, stdin) => return true,
            n if SHELLS.contains(&n) => {}
            n if lists::is_interpreter(n) => self.interpreter(name, words, stdin),
            "source" | "." => self.source(words, stdin),
            "alias" => self.alias(words),
            "trap" => self.trap(words),
            "git" => self.git(words),
            "rm" => self.rm(words),
            "rmdir" | "unlink" | "shred" | "truncate" | "tee" | "touch" | "mkdir" | "chmod"
            | "chown" | "chgrp" | "chattr" | "setfacl" => {
                // The permission tools are denied by default; a host that
                // lifts one still keeps it to the workspace.
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
                self.dangerous(
                    Pattern::HistoryClear,
                    "`history -c` erases the shell history, which hides what was done. It is refused.".to_string(),
                );
            }
            "export" | "declare" | "typeset" | "readonly" | "local" => self.declare(words),
            // An unset variable is no longer what the sandbox set it to.
            "unset" => words[1..]
                .iter()
                .filter(|w| !w.text.starts_with('-'))
                .for_each(|w| self.set_known_var(&w.text, None)),
            "cd" | "pushd" => self.cd(words),
            "popd" => self.set_cwd(None),
            "dd" => self.dd(words),
            "sed" => self.sed(words),
            "tar" => self.tar(words),
            "rsync" => self.rsync(words),
            "set" => self.set(words),
            _ => {}
        }
        false
    }

    /// Notes a command that runs, for rules to match.
    pub(super) fn record(&mut self, words: &[Word]) {
        if !self.sc.collect {
            return;
        }
        let joined: Vec<&str> = words.iter().map(|w| w.text.as_str()).collect();
        self.report.commands.push(joined.join(" "));
    }

    fn denied(&self, name: &str) -> Option<DeniedKind> {
        lists::builtin_denied(name)
            .filter(|k| !(self.sc.network_wall && *k == DeniedKind::Network))
            .filter(|_| !self.sc.allowed.iter().any(|a| a == name))
            .filter(|_| !(lists::is_mkfs(name) && self.sc.lifted.contains(Pattern::Mkfs)))
            .or_else(|| {
                self.sc
                    .extra_denied
                    .contains(name)
                    .then_some(DeniedKind::Config)
            })
    }

    /// A string that a command will run as a shell script.
    pub(super) fn nested_script(&mut self, what: &str, script: Option<&Word>) {
        self.nested_script_with(what, script, None);
    }

    /// A script run with arguments (`sh -c 'rm "$1"' sh FILE`): its `$1`…
    /// are those arguments.
    fn nested_script_with(&mut self, what: &str, script: Option<&Word>, args: Option<Positional>) {
        match script {
            Some(s) if s.dynamic => self.deny(
                "floor:hidden-command",
                format!(
                    "the script given to `{what}` is only known when the command runs, so it cannot be checked. Write the commands directly."
                ),
            ),
            Some(s) => {
                let text = s.text.clone();
                self.subprogram_with(&text, args);
            }
            None => {}
        }
    }

    /// `set -- a b` (or `set a b`) gives the script other arguments: from
    /// here on they are unknown.
    fn set(&mut self, words: &[Word]) {
        let mut i = 1;
        while let Some(w) = words.get(i) {
            let t = w.text.as_str();
            if t == "--" || t == "-" || w.dynamic || !t.starts_with(['-', '+']) {
                self.positional = None;
                return;
            }
            i += if matches!(t, "-o" | "+o") { 2 } else { 1 };
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
            let args = positional(words.get(i + 1..).unwrap_or_default(), None);
            self.nested_script_with(&what, words.get(i), args);
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
        let args = positional(words.get(i..).unwrap_or_default(), Some(name));
        self.program_from_stdin_with(name, stdin, true, args);
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

    pub(super) fn program_from_stdin(&mut self, name: &str, stdin: &Stdin, is_shell: bool) {
        self.program_from_stdin_with(name, stdin, is_shell, None);
    }

    fn program_from_stdin_with(
        &mut self,
        name: &str,
        stdin: &Stdin,
        is_shell: bool,
        args: Option<Positional>,
    ) {
        match stdin {
            Stdin::Doc(text) if is_shell => {
                let text = text.clone();
                self.subprogram_with(&text, args);
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
            if let Some((name, value)) = w.text.split_once('=') {
                let script = Word {
                    text: value.to_string(),
                    ..w.clone()
                };
                self.nested_script("alias", Some(&script));
                if !w.dynamic {
                    // Later uses run the value with their own words after it.
                    self.aliases.push((name.to_string(), value.to_string()));
                }
            }
        }
    }

    /// A command named like an alias defined earlier: the alias's value
    /// with the command's arguments, as bash expands it (never inside its
    /// own expansion).
    fn expand_alias(&mut self, name: &str, words: &[Word]) {
        if self.expanding.iter().any(|n| n == name) {
            return;
        }
        let Some(value) = self
            .aliases
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
        else {
            return;
        };
        let mut text = value;
        let args = (words.len() > 1).then(|| {
            // The arguments as one more `"$@"`: each stays one word.
            text.push_str(" \"$@\"");
            Positional {
                zero: Word::literal(name),
                rest: words[1..].to_vec(),
            }
        });
        let outer = self.positional.clone();
        self.expanding.push(name.to_string());
        self.subprogram_with(&text, args);
        self.expanding.pop();
        self.positional = outer;
    }

    fn trap(&mut self, words: &[Word]) {
        let i = after_options(words, 1, &[]);
        if let Some(w) = words.get(i) {
            self.nested_script("trap", Some(w));
        }
    }

    fn declare(&mut self, words: &[Word]) {
        for w in &words[1..] {
            if let Some((var, value)) = w.text.split_once('=') {
                if lists::is_dangerous_var(var.trim_end_matches('+'))
                    && self.dangerous_var(var.trim_end_matches('+'))
                {
                    return;
                }
                let value = Word {
                    text: value.to_string(),
                    ..w.clone()
                };
                self.set_known_var(var, Some(&value));
            }
        }
    }

    fn cd(&mut self, words: &[Word]) {
        let i = after_options(words, 1, &[]);
        let cwd = match words.get(i) {
            None => self.home_str.as_ref().map(PathBuf::from),
            Some(w) if w.dynamic || w.glob || w.text == "-" => None,
            Some(w) => Some(lexical_join(self.base(), &w.text)),
        };
        self.set_cwd(cwd);
    }

    /// The absolute place a command argument names (no filesystem access).
    pub(super) fn place(&self, text: &str) -> PathBuf {
        lexical_join(self.base(), text)
    }

    /// A place outside the workspace a command may write: in the sandbox,
    /// its TMPDIR and private HOME (not the read-only toolchains); on the
    /// host, beneath /tmp as before.
    fn under_private_tmp(&self, p: &Path) -> bool {
        match self.sc.sandbox {
            Some(v) => v.writable(p),
            None => p.starts_with("/tmp") && p != Path::new("/tmp"),
        }
    }

    /// Credential and protected paths: refused for any access. `raw` is the
    /// argument as written, for the reason.
    fn sensitive(&mut self, p: &Path, raw: &str) -> bool {
        if let Some(hit) = self
            .sc
            .protected
            .iter()
            .find(|prot| paths::path_under(p, prot))
        {
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
        if self.sensitive_target(w, &p) {
            return;
        }
        let shown = || show(w.raw());
        let Ok(rel) = p.strip_prefix(self.sc.workspace) else {
            if self.under_private_tmp(&p) {
                return;
            }
            let computed = if w.tree != Tree::No {
                format!(" (every file `find {}` passes)", shown())
            } else if w.dynamic {
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
                    "{what} writes to {}{computed}, outside the workspace; commands may only write inside the workspace, the sandbox's private /tmp and its private home (not the toolchains shown read-only there).",
                    show(&p.to_string_lossy())
                ),
            );
            return;
        };
        if paths::is_git_internal(rel) && super::git::git_runs_it(rel) {
            self.deny(
                "floor:git-internals",
                format!(
                    "{what} writes to `{}`; git's config and hooks run commands when git runs (also on the host), so commands never write them. Use `git` subcommands instead.",
                    shown()
                ),
            );
            return;
        }
        if w.tree == Tree::Whole && self.holds_git_dir(&p) {
            self.deny(
                "floor:git-internals",
                format!(
                    "{what} writes every file `find {}` passes, and that includes `.git/config` and `.git/hooks`, which run commands when git runs (also on the host). Pick the files with `-name` or `-path`, or leave `.git` out.",
                    shown()
                ),
            );
            return;
        }
        if !w.glob
            && let Some(real) = paths::follow_inside(self.sc.workspace, rel, self.sc.fs)
            && real != p
            && !real.starts_with(self.sc.workspace)
            && !self.under_private_tmp(&real)
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

    /// The tree at `root` holds the workspace's `.git` directory, or lies in it.
    fn holds_git_dir(&self, root: &Path) -> bool {
        let git = self.sc.workspace.join(".git");
        (git.starts_with(root) || root.starts_with(&git))
            && self.sc.fs.symlink_metadata(&git).is_some()
    }

    /// A file a command reads through a redirect.
    pub(super) fn read_target(&mut self, w: &Word) {
        if w.text.is_empty() {
            return;
        }
        let literal = if w.glob { glob_dir(&w.text) } else { &w.text };
        let p = self.place(literal);
        if !self.sensitive_target(w, &p) {
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
    pub(super) fn scan_args(&mut self, args: &[Word]) {
        // After `cd /etc` (or `env -C /etc`), `cat shadow` names a path too.
        let elsewhere = self.elsewhere;
        for w in args {
            if self.stopped() {
                return;
            }
            let t = w.text.as_str();
            if w.tree != Tree::No {
                // Every file under a start point of `find`.
                if !w.dynamic && !t.is_empty() {
                    let root = self.place(if w.glob { glob_dir(t) } else { t });
                    if self.tree_sensitive(&root, w.raw()) {
                        return;
                    }
                }
                continue;
            }
            let value = if t.starts_with('-') || t.contains('=') {
                t.split_once('=').map(|(_, v)| v)
            } else {
                None
            };
            // `@FILE` (curl -d @FILE, gcc @FILE): a file read.
            let read = at_file(t).or_else(|| value.and_then(at_file));
            for cand in std::iter::once(t).chain(value).chain(read) {
                if cand.is_empty() {
                    continue;
                }
                if cand.contains('/')
                    || cand.starts_with('.')
                    || (elsewhere && !cand.starts_with('-'))
                {
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
        self.delete_all(&targets, recursive, "rm");
    }

    /// Deletes `targets`; a recursive delete inside the workspace needs a
    /// confirmation. `cmd` names the deleting command in reasons.
    pub(super) fn delete_all(&mut self, targets: &[&Word], recursive: bool, cmd: &str) {
        let mut confirm = Vec::new();
        for w in targets {
            if let Some(rel) = self.delete_target(w, recursive, cmd) {
                confirm.push(rel);
            }
            if self.stopped() {
                return;
            }
        }
        if !confirm.is_empty() {
            self.confirm(
                "confirm:rm-recursive",
                format!(
                    "`{cmd}` deletes {} inside the workspace with everything in it, which cannot be undone; it needs the user's confirmation.",
                    show(&confirm.join(", "))
                ),
                None,
            );
        }
    }

    /// A path a command deletes. Returns the workspace-relative path when a
    /// recursive delete of it needs a confirmation. A tree (find's `{}`)
    /// deletes everything beneath its root, or some files there when a name
    /// test picked them.
    fn delete_target(&mut self, w: &Word, recursive: bool, cmd: &str) -> Option<String> {
        let whole = recursive || w.tree == Tree::Whole;
        let how = if recursive {
            format!("{cmd} -r")
        } else {
            cmd.to_string()
        };
        let shown = show(w.raw());
        let target = if w.tree == Tree::No {
            format!("`{how} {shown}`")
        } else {
            format!("`{how}` on the files under `{shown}` (from `find`)")
        };
        if w.dynamic && whole {
            self.deny(
                "floor:dangerous-pattern",
                format!(
                    "{target}: the target is only known when the command runs; if the variable is empty or unset it deletes from `/`. Name the directory literally."
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
        if whole && !matches!(w.tree, Tree::Part { .. }) {
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
                let instead = if w.tree == Tree::No {
                    "Delete specific files or directories inside the workspace instead."
                } else {
                    "Start `find` in a directory inside the workspace, or pick files with `-name`."
                };
                if self.dangerous(
                    Pattern::RmBroad,
                    format!("{target} would delete {what}. {instead}"),
                ) {
                    return None;
                }
            }
        }
        if self.sensitive_target(w, &p) {
            return None;
        }
        let Ok(rel) = p.strip_prefix(self.sc.workspace) else {
            if self.under_private_tmp(&p) {
                return None;
            }
            self.deny(
                "floor:path-scope",
                format!(
                    "`{cmd}` deletes {}{}, outside the workspace; commands only change files inside the workspace.",
                    if w.tree == Tree::No { "" } else { "files under " },
                    show(&p.to_string_lossy())
                ),
            );
            return None;
        };
        let regenerable = match w.tree {
            Tree::Part { build_dirs } => build_dirs,
            Tree::No | Tree::Whole => rel
                .components()
                .any(|c| lists::is_build_dir(&c.as_os_str().to_string_lossy())),
        };
        if whole && (!regenerable || self.cwd.is_none()) {
            return Some(rel.to_string_lossy().into_owned());
        }
        None
    }

    /// Credential and protected paths a target is, lies in, or (for a
    /// tree) holds.
    fn sensitive_target(&mut self, w: &Word, p: &Path) -> bool {
        if w.tree == Tree::No {
            return self.sensitive(p, w.raw());
        }
        self.tree_sensitive(p, w.raw())
    }

    /// A tree holding a credential or protected path: refused for any access.
    pub(super) fn tree_sensitive(&mut self, root: &Path, raw: &str) -> bool {
        if self.sensitive(root, raw) {
            return true;
        }
        // `sensitive` judged the root itself; now what lies beneath it.
        if let Some(what) = paths::tree_holds_credential(root, Some(self.sc.home)) {
            self.deny(
                "floor:credential-path",
                format!(
                    "`find {}` passes every file under {} to the command, and that includes credential paths ({what}); credential paths are never available to commands. Start `find` in the workspace.",
                    show(raw),
                    show(&root.to_string_lossy())
                ),
            );
            return true;
        }
        let r = root.as_os_str().as_encoded_bytes();
        if let Some(hit) = self
            .sc
            .protected
            .iter()
            .find(|prot| paths::under(prot.as_os_str().as_encoded_bytes(), r))
        {
            self.deny(
                "floor:protected",
                format!(
                    "`find {}` passes every file under it to the command, and that includes the supervisor's own files ({}); commands can never touch them.",
                    show(raw),
                    show(&hit.to_string_lossy())
                ),
            );
            return true;
        }
        false
    }

    fn writes_all(&mut self, name: &str, words: &[Word]) {
        let takes_arg: &[&str] = match name {
            "touch" => &["-d", "-r", "-t", "--date", "--reference"],
            "mkdir" => &["-m", "--mode"],
            "shred" => &["-n", "-s", "--iterations", "--size"],
            "truncate" => &["-s", "-r", "--size", "--reference"],
            "chown" | "chgrp" => &["--from", "--reference"],
            "chattr" => &["-v", "-p"],
            "setfacl" => &[
                "-m",
                "-x",
                "-M",
                "-X",
                "--set",
                "--set-file",
                "--modify",
                "--remove",
                "--modify-file",
                "--remove-file",
            ],
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
        let copies = words[1..]
            .iter()
            .any(|w| w.text.starts_with("if=") || w.text.starts_with("of="));
        if copies
            && self.dangerous(
                Pattern::Dd,
                "`dd` copies raw blocks (`if=`, `of=`), the way disks are overwritten; it is refused. Use `cp`, `head -c` or `truncate` for files.".to_string(),
            )
        {
            return;
        }
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
}

/// `@FILE` (curl -d @FILE, gcc @FILE): the file read.
fn at_file(c: &str) -> Option<&str> {
    c.strip_prefix('@')
        .filter(|f| f.starts_with(['/', '~', '.']))
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
