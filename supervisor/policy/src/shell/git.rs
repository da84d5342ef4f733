//! git: the settings, options and subcommands that make git run a command
//! (`-c core.sshCommand=…`, `rebase --exec`, `clone --upload-pack`, `bisect
//! run`, `submodule foreach`), and the always-confirm shapes (`push
//! --force`, `reset --hard`, …).

use std::collections::HashMap;
use std::path::Path;
use std::sync::LazyLock;

use super::lists;
use super::options::{self, Role, Table};
use super::words::Word;
use super::{Stdin, Walker};
use crate::paths::show;

/// Options of git subcommands whose value is a command git runs (through
/// the shell, locally for a local remote), or a file it writes.
const SUB_OPTIONS: &[(&str, &str)] = &[
    (
        "rebase",
        "x,exec=@script onto= s,strategy= X,strategy-option= C= S,gpg-sign=?",
    ),
    (
        "clone",
        "u,upload-pack=@script template=@refuse o,origin= b,branch= c,config=@split \
               depth= j,jobs= reference= separate-git-dir= filter= server-option=",
    ),
    (
        "init",
        "template=@refuse separate-git-dir= b,initial-branch= object-format= shared=?",
    ),
    (
        "fetch",
        "upload-pack=@script depth= deepen= shallow-since= shallow-exclude= j,jobs= \
               o,server-option= refmap= negotiation-tip= filter= recurse-submodules=?",
    ),
    (
        "pull",
        "upload-pack=@script depth= deepen= shallow-since= shallow-exclude= j,jobs= \
              o,server-option= s,strategy= X,strategy-option= S,gpg-sign=?",
    ),
    ("ls-remote", "upload-pack=@script o,server-option= sort="),
    (
        "archive",
        "exec=@script remote= o,output=@writes format= prefix= add-file=",
    ),
    (
        "push",
        "receive-pack=@script exec=@script repo= o,push-option= force-with-lease=?",
    ),
    ("difftool", "x,extcmd=@script t,tool= T="),
    (
        "grep",
        "O,open-files-in-pager=?@script e= f= max-depth= C,context= A,after-context= \
              B,before-context= m,max-count= threads=",
    ),
    (
        "filter-branch",
        "env-filter=@script tree-filter=@script index-filter=@script \
                       parent-filter=@script msg-filter=@script commit-filter=@script \
                       tag-name-filter=@script d= subdirectory-filter= original= state-branch= \
                       setup=@script",
    ),
    (
        "send-email",
        "sendmail-cmd=@script to-cmd=@script cc-cmd=@script header-cmd=@script \
                    smtp-server=@program",
    ),
    (
        "instaweb",
        "d,httpd=@program b,browser=@program m,module-path= p,port=",
    ),
];

impl Walker<'_> {
    pub(super) fn git(&mut self, words: &[Word]) {
        let Some(i) = self.git_global_options(words) else {
            return;
        };
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
        self.git_sub_options(sub, rest);
        if self.stopped() {
            return;
        }
        self.git_subcommand(sub, rest);
    }

    /// git's own options before the subcommand (`-c`, `--config-env`,
    /// `--exec-path`, ...); returns the subcommand's index, `None` when the
    /// walk stopped.
    fn git_global_options(&mut self, words: &[Word]) -> Option<usize> {
        let mut i = 1;
        while let Some(w) = words.get(i) {
            let t = w.text.as_str();
            match t {
                "-c" => {
                    if let Some(kv) = words.get(i + 1) {
                        self.git_transient_config(kv);
                        if self.stopped() {
                            return None;
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
                _ if t.starts_with("--exec-path=") => {
                    self.deny(
                        "floor:dangerous-pattern",
                        format!(
                            "`{}` makes git run its subcommands from another directory, so it is refused. Run git without it.",
                            show(w.raw())
                        ),
                    );
                    return None;
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
                return None;
            }
        }
        Some(i)
    }

    /// What the subcommand does: its config or push analysed, the ones that
    /// lose work confirmed.
    fn git_subcommand(&mut self, sub: &Word, rest: &[Word]) {
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

    /// Options of a git subcommand that run a command; `bisect run` and
    /// `submodule foreach`, whose words are a command.
    fn git_sub_options(&mut self, sub: &Word, rest: &[Word]) {
        static TABLES: LazyLock<HashMap<&'static str, Table>> = LazyLock::new(|| {
            SUB_OPTIONS
                .iter()
                .map(|(sub, spec)| (*sub, options::compile(spec).0))
                .collect()
        });
        match sub.text.as_str() {
            "bisect" if rest.first().is_some_and(|w| w.text == "run") => {
                self.invocation(&rest[1..], &Stdin::Inherited);
                return;
            }
            "submodule" => {
                let at = rest.iter().position(|w| w.text == "foreach").map(|i| i + 1);
                if let Some(mut i) = at {
                    while rest.get(i).is_some_and(|w| w.text.starts_with('-')) {
                        i += 1;
                    }
                    self.shell_words("git submodule foreach", &rest[i.min(rest.len())..]);
                }
                return;
            }
            _ => {}
        }
        let Some(t) = TABLES.get(sub.text.as_str()) else {
            return;
        };
        let mut words = vec![sub.clone()];
        words.extend_from_slice(rest);
        let scan = options::scan(t, &words);
        for f in &scan.found {
            let Some(v) = &f.value else { continue };
            let what = format!("git {} {}", sub.text, f.name);
            match f.opt.role {
                Role::Script => self.nested_script(&what, Some(v)),
                Role::Program => self.invocation(std::slice::from_ref(v), &Stdin::Inherited),
                Role::Writes => self.write_target(v, &format!("`{}`", show(&what))),
                // `git clone -c key=value`: a setting like `git -c`.
                Role::Split => self.git_transient_config(v),
                Role::Refuse => self.deny(
                    "floor:git-internals",
                    format!(
                        "`{}` copies hooks from a template directory into the new repository, where git runs them (also on the host). Leave the option out.",
                        show(&what)
                    ),
                ),
                Role::None
                | Role::Inert
                | Role::Reads
                | Role::Chdir
                | Role::Replace
                | Role::Login
                | Role::Argv
                | Role::ShellWords
                | Role::Items
                | Role::Null
                | Role::Delimiter
                | Role::Lines
                | Role::Columns
                | Role::Quote
                | Role::SshOption
                | Role::GdbCommand
                | Role::Assign => {}
            }
            if self.stopped() {
                return;
            }
        }
    }
}

/// `.git/config`, `.git/hooks/*` and the like: files whose content git runs.
pub(super) fn git_runs_it(rel: &Path) -> bool {
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
