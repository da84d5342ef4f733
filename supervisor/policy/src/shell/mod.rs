//! Shell analysis for run_bash (docs/THREAT_MODEL.md, "The walls, by
//! layer", 3).
//!
//! The command is parsed by a real bash parser (brush-parser) and walked for
//! every simple command: across `; && || | &` and newlines, inside `$( )`,
//! backquotes, subshells, process substitutions, loops, functions, `sh -c`
//! strings, heredocs fed to shells, and through wrappers (`env`, `nice`,
//! `timeout`, `xargs`, `find -exec`, ...). Each command word is reduced to its
//! basename after quote removal and checked against the denylist; redirect
//! targets and the targets of writing commands are path-scoped; dangerous
//! patterns and always-confirm shapes are recognised by structure, never by
//! substrings, so `echo "curl is a tool"` stays a harmless echo.
//!
//! What cannot be parsed, or hides the command (`eval`, `… | sh`, `$VAR` or a
//! substitution as the command word), is never allowed. The denylist is a
//! first line; the sandbox is the wall.

mod commands;
mod find;
mod git;
mod launch;
mod launchers;
pub(crate) mod lists;
mod nesting;
mod options;
pub(crate) mod patterns;
mod sed;
pub(crate) mod words;

pub use words::parsing_untrusted_input;

use std::path::{Path, PathBuf};

use brush_parser::ast;

use crate::display::shorten;
use crate::facts::{FsFacts, Memo};
use words::{Env, Positional, Word};

/// Nesting of `sh -c`, substitutions and the like before the gate gives up.
pub(crate) const MAX_DEPTH: usize = 8;

/// Programs that run programs inside each other (`nice nice …`, `find …
/// -exec find …`) before the gate gives up: each is a level of recursion.
const MAX_LAUNCHED: usize = 64;

/// Extra walks one command line may cost: each start point of `find`, input
/// item of xargs or parallel, reading of a computed launcher word, or shift
/// of a script's arguments is judged on its own, and these multiply.
const MAX_FANOUT: usize = 512;

/// What the analysis may consult.
pub(crate) struct ShellCtx<'a> {
    pub workspace: &'a Path,
    /// The session owner's home (or root's when unknown).
    pub home: &'a Path,
    pub protected: &'a [PathBuf],
    /// `extra_denied_binaries` from the config.
    pub extra_denied: &'a lists::NameSet,
    /// `allow_binaries` from the config: lifted from the built-in denylist
    /// (a handful at most, looked up only for a denied name).
    pub allowed: &'a [String],
    pub fs: &'a dyn FsFacts,
    /// Fill `commands` and `outer` (only rules read them).
    pub collect: bool,
    /// The dangerous patterns this host lifted (`[policy] lift_patterns`).
    pub lifted: patterns::PatternSet,
    /// The sandbox the command runs in: HOME and TMPDIR as it sets them,
    /// what is writable there. `None`: it runs on the host (a client's
    /// shell with `[clients] route_shell = false`), judged as before.
    pub sandbox: Option<&'a crate::sandbox_env::SandboxView>,
    /// `[network]` is configured: network clients are not refused by name
    /// (the network wall decides where they connect).
    pub network_wall: bool,
}

/// One thing the analysis found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    pub rule: String,
    pub reason: String,
    /// For confirmations: what the person must type, when not the command.
    pub target: Option<String>,
}

/// The result of analysing one command line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Report {
    /// The first hard-floor refusal, if any.
    pub deny: Option<Finding>,
    /// Always-confirm (destructive) shapes.
    pub confirm: Vec<Finding>,
    /// A workspace secret file the command touches (workspace-relative).
    pub secret: Option<String>,
    /// Every command that runs, wrappers stripped, as `word word …`.
    pub commands: Vec<String>,
    /// Every simple command as written (words joined), wrappers included.
    pub outer: Vec<String>,
    /// Lifted dangerous patterns the command matched (shown with the
    /// host's reason beside the consequence).
    pub lifted: patterns::PatternSet,
}

/// Analyses a run_bash command line.
pub(crate) fn analyze(cmd: &str, sc: &ShellCtx) -> Report {
    // Many redirects into one directory ask about it once.
    let memo = Memo::new(sc.fs);
    let sc = ShellCtx { fs: &memo, ..*sc };
    let mut w = Walker::new(&sc);
    w.program_text(cmd);
    w.report
}

/// Where a command's standard input comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stdin {
    /// Whatever the whole command line got (the sandbox gives /dev/null).
    Inherited,
    /// The previous command of a pipeline, or a process substitution.
    Pipe,
    /// A file redirect.
    File,
    /// A here-document or here-string with this text.
    Doc(String),
}

struct Walker<'a> {
    sc: &'a ShellCtx<'a>,
    report: Report,
    depth: usize,
    /// The working directory, when known (`cd` to a computed place makes it unknown).
    cwd: Option<PathBuf>,
    cwd_str: String,
    /// The working directory is known and not the workspace (`cd /etc`):
    /// a bare name like `shadow` is a path there.
    elsewhere: bool,
    /// `$HOME` and `~` as the command sees them: the sandbox's HOME, until
    /// the command sets it (`None`: set to something not known here).
    home_str: Option<String>,
    /// `$TMPDIR`, likewise (`None` on the host, where it is not known).
    tmp_str: Option<String>,
    /// The package caches' variables as the sandbox sets them, or as the
    /// command set them (`None`: to something not known here); a name not
    /// here is not known (on the host, or caches off: unset inside).
    cache_vars: Vec<(String, Option<String>)>,
    /// Functions whose bodies are being walked (fork-bomb detection).
    functions: Vec<String>,
    /// Inside a pipeline of several commands or a background job.
    concurrent: usize,
    /// Inside `while true` / `until false`.
    endless: usize,
    /// Some protected path lies inside the workspace.
    protected_inside: bool,
    /// Word buffers kept from one simple command for the next.
    spare_words: Vec<Word>,
    /// `$1`… of the `sh -c` script being walked, when it was given literal
    /// arguments; otherwise they are unknown values.
    positional: Option<Positional>,
    /// What is left of [`MAX_FANOUT`].
    fanout: usize,
    /// Commands being judged inside each other (launchers and what they run).
    launched: usize,
    /// Aliases defined so far: (name, value).
    aliases: Vec<(String, String)>,
    /// Aliases being expanded (bash never expands one inside itself).
    expanding: Vec<String>,
}

/// `words[n]`, added when the vector is that short.
fn slot(words: &mut Vec<Word>, n: usize) -> &mut Word {
    if words.len() == n {
        words.push(Word::default());
    }
    &mut words[n]
}

impl<'a> Walker<'a> {
    fn new(sc: &'a ShellCtx<'a>) -> Walker<'a> {
        Walker {
            sc,
            report: Report::default(),
            depth: 0,
            cwd: Some(sc.workspace.to_path_buf()),
            cwd_str: sc.workspace.to_string_lossy().into_owned(),
            elsewhere: false,
            home_str: Some(
                sc.sandbox
                    .map_or(sc.home, |v| v.home.as_path())
                    .to_string_lossy()
                    .into_owned(),
            ),
            tmp_str: sc.sandbox.map(|v| v.tmpdir.to_string_lossy().into_owned()),
            cache_vars: sc
                .sandbox
                .map(|v| v.cache_env())
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, Some(v)))
                .collect(),
            functions: Vec::new(),
            concurrent: 0,
            endless: 0,
            protected_inside: sc.protected.iter().any(|p| p.starts_with(sc.workspace)),
            spare_words: Vec::new(),
            positional: None,
            fanout: MAX_FANOUT,
            launched: 0,
            aliases: Vec::new(),
            expanding: Vec::new(),
        }
    }

    /// Takes `n` extra walks from the budget; false (and the command
    /// refused) when it is spent.
    fn spend(&mut self, n: usize) -> bool {
        if n <= self.fanout {
            self.fanout -= n;
            return true;
        }
        self.deny(
            "floor:hidden-command",
            format!(
                "the command runs other commands in more combinations (start points, input items, arguments) than the {MAX_FANOUT} the gate checks, so it cannot be checked. Write it more plainly."
            ),
        );
        false
    }

    fn stopped(&self) -> bool {
        self.report.deny.is_some()
    }

    fn deny(&mut self, rule: &str, reason: String) {
        if self.report.deny.is_none() {
            self.report.deny = Some(Finding {
                rule: rule.to_string(),
                reason,
                target: None,
            });
        }
    }

    /// A dangerous pattern matched: refused, unless this host lifted it
    /// (then noted, and the analysis goes on). True when refused.
    fn dangerous(&mut self, p: patterns::Pattern, reason: String) -> bool {
        if self.sc.lifted.contains(p) {
            self.report.lifted.insert(p);
            return false;
        }
        self.deny(
            "floor:dangerous-pattern",
            format!("{reason} {}", patterns::lift_hint(p)),
        );
        true
    }

    fn confirm(&mut self, rule: &str, reason: String, target: Option<String>) {
        if !self.report.confirm.iter().any(|f| f.rule == rule) {
            self.report.confirm.push(Finding {
                rule: rule.to_string(),
                reason,
                target,
            });
        }
    }

    fn set_cwd(&mut self, cwd: Option<PathBuf>) {
        self.cwd_str = cwd
            .as_deref()
            .unwrap_or(self.sc.workspace)
            .to_string_lossy()
            .into_owned();
        self.elsewhere = cwd
            .as_deref()
            .is_some_and(|c| c.as_os_str() != self.sc.workspace.as_os_str());
        self.cwd = cwd;
    }

    /// The directory relative paths start from.
    fn base(&self) -> &Path {
        self.cwd.as_deref().unwrap_or(self.sc.workspace)
    }

    /// Parses and walks a program (the command line, a substitution, a
    /// heredoc fed to a shell).
    fn program_text(&mut self, text: &str) {
        if let Some(program) = self.parse_program(text) {
            self.walk_program(&program);
        }
    }

    /// Parses a program; `None` (and the command refused) when it cannot be
    /// parsed or nests too deeply.
    fn parse_program(&mut self, text: &str) -> Option<ast::Program> {
        if self.stopped() {
            return None;
        }
        if self.depth >= MAX_DEPTH {
            self.deny(
                "floor:hidden-command",
                format!(
                    "the command nests shells and substitutions more than {MAX_DEPTH} levels deep, so it cannot be checked. Write it more plainly."
                ),
            );
            return None;
        }
        let nested = nesting::depth(text);
        if nested > nesting::MAX_NESTING {
            self.deny(
                "floor:hidden-command",
                format!(
                    "the command nests about {nested} levels deep (brackets, braces, substitutions, `if`, loops, `case`, `!`), more than the {} the gate checks, so it cannot be checked. Write it more plainly.",
                    nesting::MAX_NESTING
                ),
            );
            return None;
        }
        let opts = words::options();
        let parsed =
            words::guarded(|| brush_parser::Parser::new(text.as_bytes(), &opts).parse_program());
        match parsed {
            None => {
                self.deny(
                    "floor:unparseable",
                    "the bash parser failed on this command, so it cannot be checked. Rewrite it in plain bash syntax.".to_string(),
                );
                None
            }
            Some(Err(e)) => {
                self.deny(
                    "floor:unparseable",
                    format!(
                        "the command could not be parsed as bash ({}), so it cannot be checked. Rewrite it in plain bash syntax.",
                        shorten(&e.to_string(), 160)
                    ),
                );
                None
            }
            Some(Ok(program)) => Some(program),
        }
    }

    fn walk_program(&mut self, program: &ast::Program) {
        self.depth += 1;
        for cc in &program.complete_commands {
            self.list(cc);
        }
        self.depth -= 1;
    }

    /// A program that runs in a subshell: its `cd` does not leak out.
    fn subprogram(&mut self, text: &str) {
        let saved = self.cwd.clone();
        self.program_text(text);
        self.restore_cwd(saved);
    }

    /// A program run by a new shell with these arguments (`sh -c SCRIPT
    /// ARG0 ARGS…`). When the script shifts them, each argument may end up
    /// as `$1`, so the program is walked once per shift of the arguments.
    fn subprogram_with(&mut self, text: &str, args: Option<Positional>) {
        let saved = self.cwd.clone();
        let outer = self.positional.take();
        if let Some(program) = self.parse_program(text) {
            match args {
                None => self.walk_program(&program),
                Some(args) => {
                    // Without `shift` the arguments stay where they are.
                    let n = if text.contains("shift") {
                        args.rest.len()
                    } else {
                        1
                    };
                    if self.spend(n.saturating_sub(1)) {
                        for k in 0..n.max(1) {
                            self.positional = Some(Positional {
                                zero: args.zero.clone(),
                                rest: args.rest.get(k..).unwrap_or_default().to_vec(),
                            });
                            self.walk_program(&program);
                            self.restore_cwd(saved.clone());
                            if self.stopped() {
                                break;
                            }
                        }
                    }
                }
            }
        }
        self.positional = outer;
        self.restore_cwd(saved);
    }

    /// Back to the directory a subshell started in.
    fn restore_cwd(&mut self, saved: Option<PathBuf>) {
        if self.cwd != saved {
            self.set_cwd(saved);
        }
    }

    fn list(&mut self, list: &ast::CompoundList) {
        for item in &list.0 {
            if self.stopped() {
                return;
            }
            let background = matches!(item.1, ast::SeparatorOperator::Async);
            if background
                && self.endless > 0
                && self.dangerous(
                    patterns::Pattern::ForkBomb,
                    "the command starts background jobs in an endless loop, which exhausts the sandbox's process limit. Run a bounded number of jobs.".to_string(),
                )
            {
                return;
            }
            if background {
                self.concurrent += 1;
            }
            self.and_or(&item.0);
            if background {
                self.concurrent -= 1;
            }
        }
    }

    fn and_or(&mut self, l: &ast::AndOrList) {
        self.pipeline(&l.first);
        for next in &l.additional {
            match next {
                ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p),
            }
        }
    }

    fn pipeline(&mut self, p: &ast::Pipeline) {
        let several = p.seq.len() > 1;
        if several {
            self.concurrent += 1;
        }
        for (i, c) in p.seq.iter().enumerate() {
            if self.stopped() {
                break;
            }
            self.command(c, i > 0);
        }
        if several {
            self.concurrent -= 1;
        }
    }

    fn command(&mut self, c: &ast::Command, piped_in: bool) {
        match c {
            ast::Command::Simple(s) => self.simple(s, piped_in),
            ast::Command::Compound(cc, redirects) => {
                self.compound(cc);
                self.redirect_list(redirects.as_ref());
            }
            ast::Command::Function(f) => self.function(f),
            ast::Command::ExtendedTest(t, redirects) => {
                self.ext_test(&t.expr);
                self.redirect_list(redirects.as_ref());
            }
        }
    }

    fn redirect_list(&mut self, redirects: Option<&ast::RedirectList>) {
        for r in redirects.map(|r| r.0.as_slice()).unwrap_or_default() {
            self.redirect(r, Stdin::Inherited);
        }
    }

    fn compound(&mut self, cc: &ast::CompoundCommand) {
        match cc {
            ast::CompoundCommand::Arithmetic(a) => self.arith(&a.expr.value),
            ast::CompoundCommand::ArithmeticForClause(a) => {
                for e in [&a.initializer, &a.condition, &a.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arith(&e.value);
                }
                self.list(&a.body.list);
            }
            ast::CompoundCommand::BraceGroup(b) => self.list(&b.list),
            ast::CompoundCommand::Subshell(s) => self.subshell(&s.list),
            ast::CompoundCommand::ForClause(f) => {
                for v in f.values.iter().flatten() {
                    let _ = self.word(&v.value);
                }
                self.list(&f.body.list);
            }
            ast::CompoundCommand::CaseClause(c) => {
                let _ = self.word(&c.value.value);
                for item in &c.cases {
                    for p in &item.patterns {
                        let _ = self.word(&p.value);
                    }
                    if let Some(cmd) = &item.cmd {
                        self.list(cmd);
                    }
                }
            }
            ast::CompoundCommand::IfClause(i) => {
                self.list(&i.condition);
                self.list(&i.then);
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.list(c);
                    }
                    self.list(&e.body);
                }
            }
            ast::CompoundCommand::WhileClause(w) => self.loop_clause(w, &["true", ":"]),
            ast::CompoundCommand::UntilClause(w) => self.loop_clause(w, &["false"]),
            ast::CompoundCommand::Coprocess(c) => {
                self.concurrent += 1;
                self.command(&c.body, false);
                self.concurrent -= 1;
            }
        }
    }

    fn loop_clause(&mut self, w: &ast::WhileOrUntilClauseCommand, forever: &[&str]) {
        let endless = is_constant_condition(&w.0, forever);
        self.list(&w.0);
        if endless {
            self.endless += 1;
        }
        self.list(&w.1.list);
        if endless {
            self.endless -= 1;
        }
    }

    fn subshell(&mut self, list: &ast::CompoundList) {
        let saved = self.cwd.clone();
        self.list(list);
        self.restore_cwd(saved);
    }

    fn function(&mut self, f: &ast::FunctionDefinition) {
        self.functions.push(f.fname.value.clone());
        // What counts is concurrency inside the body.
        let saved = std::mem::take(&mut self.concurrent);
        // A function's `$1`… are its own arguments, unknown here.
        let outer = self.positional.take();
        self.compound(&f.body.0);
        self.redirect_list(f.body.1.as_ref());
        self.positional = outer;
        self.concurrent = saved;
        self.functions.pop();
    }

    fn ext_test(&mut self, e: &ast::ExtendedTestExpr) {
        match e {
            ast::ExtendedTestExpr::And(a, b) | ast::ExtendedTestExpr::Or(a, b) => {
                self.ext_test(a);
                self.ext_test(b);
            }
            ast::ExtendedTestExpr::Not(a) | ast::ExtendedTestExpr::Parenthesized(a) => {
                self.ext_test(a);
            }
            ast::ExtendedTestExpr::UnaryTest(_, w) => {
                let _ = self.word(&w.value);
            }
            ast::ExtendedTestExpr::BinaryTest(_, a, b) => {
                let _ = self.word(&a.value);
                let _ = self.word(&b.value);
            }
        }
    }

    fn arith(&mut self, text: &str) {
        if text.contains('$') || text.contains('`') {
            let _ = self.word(text);
        }
    }

    /// What expansions resolve to here.
    fn env(&self) -> Env<'_> {
        Env {
            home: self.home_str.as_deref(),
            tmpdir: self.tmp_str.as_deref(),
            pwd: self.cwd.is_some().then_some(self.cwd_str.as_str()),
            vars: &self.cache_vars,
            cwd: &self.cwd_str,
            positional: self.positional.as_ref(),
        }
    }

    /// The command sets `HOME`, `TMPDIR` or a package cache's variable for
    /// the rest of its line (a plain assignment, `export`, `declare`):
    /// later expansions take the value when it is literal, and are unknown
    /// otherwise.
    pub(super) fn set_known_var(&mut self, name: &str, value: Option<&Word>) {
        let v = value
            .filter(|w| !w.dynamic && !w.glob)
            .map(|w| w.text.clone());
        match name {
            "HOME" => self.home_str = v,
            "TMPDIR" => self.tmp_str = v,
            _ => {
                if let Some(slot) = self.cache_vars.iter_mut().find(|(k, _)| k == name) {
                    slot.1 = v;
                } else if crate::sandbox_env::CACHE_VARS
                    .iter()
                    .any(|(k, _)| *k == name)
                {
                    self.cache_vars.push((name.to_string(), v));
                }
            }
        }
    }

    /// Evaluates a word; its command substitutions are walked as programs.
    fn word(&mut self, raw: &str) -> Option<Word> {
        let mut w = Word::default();
        self.word_into(raw, &mut w).then_some(w)
    }

    /// [`Self::word`] into `out`; false (and the walk denied) when the word
    /// cannot be parsed.
    fn word_into(&mut self, raw: &str, out: &mut Word) -> bool {
        let mut subs = Vec::new();
        let env = self.env();
        match words::eval_into(raw, &env, &mut subs, out) {
            Ok(()) => {
                for s in subs {
                    self.subprogram(&s);
                }
                true
            }
            Err(e) => {
                self.deny(
                    "floor:unparseable",
                    format!(
                        "the word `{}` could not be parsed ({}), so the command cannot be checked. Rewrite it in plain bash syntax.",
                        shorten(raw, 80),
                        shorten(&e.0, 120)
                    ),
                );
                false
            }
        }
    }

    fn simple(&mut self, s: &ast::SimpleCommand, piped_in: bool) {
        // The previous command's words, reused: a script has hundreds of
        // commands, and their words' strings need not be allocated anew.
        let mut words = std::mem::take(&mut self.spare_words);
        let mut n = 0;
        let prefix = s.prefix.iter().flat_map(|p| p.0.iter());
        let suffix = s.suffix.iter().flat_map(|p| p.0.iter());
        for item in prefix.clone() {
            match item {
                ast::CommandPrefixOrSuffixItem::IoRedirect(_) => {}
                ast::CommandPrefixOrSuffixItem::Word(w) => {
                    if !self.push_word(&w.value, &mut words, &mut n) {
                        return;
                    }
                }
                ast::CommandPrefixOrSuffixItem::AssignmentWord(a, _) => {
                    // Alone it sets the shell's variable; before a command,
                    // only that command's environment.
                    self.assignment(a, s.word_or_name.is_none());
                }
                ast::CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => {
                    self.subshell(&sub.list);
                }
            }
        }
        if let Some(w) = &s.word_or_name
            && !self.push_word(&w.value, &mut words, &mut n)
        {
            return;
        }
        for item in suffix.clone() {
            match item {
                ast::CommandPrefixOrSuffixItem::IoRedirect(_) => {}
                ast::CommandPrefixOrSuffixItem::Word(w)
                | ast::CommandPrefixOrSuffixItem::AssignmentWord(_, w) => {
                    if !self.push_word(&w.value, &mut words, &mut n) {
                        return;
                    }
                }
                ast::CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => {
                    self.subshell(&sub.list);
                    *slot(&mut words, n) = Word {
                        text: "/dev/fd/63".to_string(),
                        dynamic: true,
                        raw: "<(…)".to_string(),
                        ..Word::default()
                    };
                    n += 1;
                }
            }
        }
        if self.stopped() {
            return;
        }
        let here = &words[..n];
        if self.sc.collect && !here.is_empty() {
            let joined: Vec<&str> = here.iter().map(|w| w.text.as_str()).collect();
            self.report.outer.push(joined.join(" "));
        }
        let mut stdin = if piped_in {
            Stdin::Pipe
        } else {
            Stdin::Inherited
        };
        // Then the redirects, in the order written: the prefix's, then the
        // suffix's.
        for item in prefix.chain(suffix) {
            if let ast::CommandPrefixOrSuffixItem::IoRedirect(r) = item {
                stdin = self.redirect(r, stdin);
            }
        }
        if self.stopped() {
            return;
        }
        self.invocation(here, &stdin);
        self.spare_words = words;
    }

    /// Evaluates one word of a simple command into `words[*n]`; `"$@"` of
    /// a script given literal arguments becomes one word per argument.
    #[inline]
    fn push_word(&mut self, raw: &str, words: &mut Vec<Word>, n: &mut usize) -> bool {
        if self.positional.is_some() && self.push_all_args(raw, words, n) {
            return true;
        }
        if !self.word_into(raw, slot(words, *n)) {
            return false;
        }
        *n += 1;
        true
    }

    /// `"$@"` (and `$*`) as a whole word, when the arguments are known.
    #[cold]
    fn push_all_args(&self, raw: &str, words: &mut Vec<Word>, n: &mut usize) -> bool {
        let Some(p) = &self.positional else {
            return false;
        };
        if !matches!(raw, "\"$@\"" | "$@" | "\"${@}\"" | "${@}" | "$*" | "${*}") {
            return false;
        }
        for a in &p.rest {
            *slot(words, *n) = a.clone();
            *n += 1;
        }
        true
    }

    fn assignment(&mut self, a: &ast::Assignment, standalone: bool) {
        let name = match &a.name {
            ast::AssignmentName::VariableName(n) | ast::AssignmentName::ArrayElementName(n, _) => n,
        };
        if lists::is_dangerous_var(name) && self.dangerous_var(name) {
            return;
        }
        match &a.value {
            ast::AssignmentValue::Scalar(w) => {
                let value = self.word(&w.value);
                if standalone {
                    self.set_known_var(name, value.as_ref());
                }
            }
            ast::AssignmentValue::Array(items) => {
                for (k, v) in items {
                    if let Some(k) = k {
                        let _ = self.word(&k.value);
                    }
                    let _ = self.word(&v.value);
                }
            }
        }
    }

    /// Setting a variable that changes which programs run. `PATH` is the
    /// `path-change` pattern (a host may lift it) where the command runs on
    /// the host; in the sandbox a command may set it for itself: what it
    /// finds there is only what the sandbox shows, as with any script it
    /// runs (docs/THREAT_MODEL.md, "The sandbox's environment"). The
    /// loader's and the shell's start-up variables, and git's
    /// command-running ones, are never set. True when refused.
    fn dangerous_var(&mut self, name: &str) -> bool {
        if name == "PATH" && self.sc.sandbox.is_some() {
            return false;
        }
        let reason = format!(
            "setting `{name}` changes which programs later commands run, so it is refused. Run the commands without changing {name} (call a program by its path if needed)."
        );
        if name == "PATH" {
            return self.dangerous(patterns::Pattern::PathChange, reason);
        }
        self.deny("floor:dangerous-pattern", reason);
        true
    }

    /// A file a redirect writes: the `system-write` pattern when it is in
    /// `/etc` or a block device, then like any write target.
    fn redirect_target(&mut self, w: &Word) {
        if !w.text.is_empty() && !w.dynamic {
            let p = self.place(&w.text);
            if (p.starts_with("/etc") || patterns::is_block_device(&p))
                && self.dangerous(
                    patterns::Pattern::SystemWrite,
                    format!(
                        "the redirect writes to {}, the host's configuration or a disk.",
                        shorten(&p.to_string_lossy(), 160)
                    ),
                )
            {
                return;
            }
        }
        self.write_target(w, "the redirect");
    }

    /// Checks one redirect; returns where stdin now comes from.
    fn redirect(&mut self, r: &ast::IoRedirect, stdin: Stdin) -> Stdin {
        match r {
            ast::IoRedirect::File(fd, kind, target) => {
                let to_stdin = fd.is_none_or(|f| f == 0);
                self.file_redirect(kind, target, to_stdin).unwrap_or(stdin)
            }
            ast::IoRedirect::HereDocument(fd, doc) => self.here_document(*fd, doc, stdin),
            ast::IoRedirect::HereString(fd, w) => {
                let Some(word) = self.word(&w.value) else {
                    return stdin;
                };
                if fd.is_none_or(|f| f == 0) {
                    return if word.dynamic {
                        Stdin::Pipe
                    } else {
                        Stdin::Doc(word.text)
                    };
                }
                stdin
            }
            ast::IoRedirect::OutputAndError(w, _) => {
                if let Some(word) = self.word(&w.value) {
                    self.redirect_target(&word);
                }
                stdin
            }
        }
    }

    /// `<file`, `>file`, `>&word`, `<(cmd)`: the file read or written is
    /// checked. Returns the new stdin when this redirect replaces it.
    fn file_redirect(
        &mut self,
        kind: &ast::IoFileRedirectKind,
        target: &ast::IoFileRedirectTarget,
        to_stdin: bool,
    ) -> Option<Stdin> {
        match target {
            ast::IoFileRedirectTarget::Filename(w) => {
                let word = self.word(&w.value)?;
                self.filename_redirect(kind, &word, to_stdin)
            }
            ast::IoFileRedirectTarget::Duplicate(w) => {
                // `>&word`: a descriptor, `-`, or (after expansion) a file.
                let word = self.word(&w.value)?;
                let t = word.text.as_str();
                let is_fd = t == "-" || t.trim_end_matches('-').bytes().all(|b| b.is_ascii_digit());
                if !is_fd && !word.dynamic {
                    match kind {
                        ast::IoFileRedirectKind::Read | ast::IoFileRedirectKind::DuplicateInput => {
                            self.read_target(&word)
                        }
                        ast::IoFileRedirectKind::Write
                        | ast::IoFileRedirectKind::Append
                        | ast::IoFileRedirectKind::Clobber
                        | ast::IoFileRedirectKind::ReadAndWrite
                        | ast::IoFileRedirectKind::DuplicateOutput => {
                            self.redirect_target(&word);
                        }
                    }
                }
                None
            }
            ast::IoFileRedirectTarget::Fd(_) => None,
            ast::IoFileRedirectTarget::ProcessSubstitution(_, sub) => {
                self.subshell(&sub.list);
                (to_stdin && matches!(kind, ast::IoFileRedirectKind::Read)).then_some(Stdin::Pipe)
            }
        }
    }

    /// A redirect to a named file: read, written, or (`<&file`, `>&file`)
    /// duplicated.
    fn filename_redirect(
        &mut self,
        kind: &ast::IoFileRedirectKind,
        word: &Word,
        to_stdin: bool,
    ) -> Option<Stdin> {
        match kind {
            ast::IoFileRedirectKind::Read => {
                self.read_target(word);
                if to_stdin {
                    return Some(Stdin::File);
                }
            }
            ast::IoFileRedirectKind::Write
            | ast::IoFileRedirectKind::Append
            | ast::IoFileRedirectKind::Clobber
            | ast::IoFileRedirectKind::ReadAndWrite => {
                self.redirect_target(word);
            }
            ast::IoFileRedirectKind::DuplicateInput | ast::IoFileRedirectKind::DuplicateOutput => {
                let t = word.text.as_str();
                let is_fd = t == "-" || (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()));
                if !is_fd && !word.dynamic {
                    if matches!(kind, ast::IoFileRedirectKind::DuplicateOutput) {
                        self.redirect_target(word);
                    } else {
                        self.read_target(word);
                    }
                }
            }
        }
        None
    }

    /// A here-document: what it substitutes runs; it becomes stdin.
    fn here_document(
        &mut self,
        fd: Option<ast::IoFd>,
        doc: &ast::IoHereDocument,
        stdin: Stdin,
    ) -> Stdin {
        if doc.requires_expansion {
            let mut subs = Vec::new();
            let env = self.env();
            if let Err(e) = words::heredoc_subs(&doc.doc.value, &env, &mut subs) {
                self.deny(
                    "floor:unparseable",
                    format!(
                        "the here-document could not be parsed ({}), so the command cannot be checked.",
                        shorten(&e.0, 120)
                    ),
                );
                return stdin;
            }
            for s in subs {
                self.subprogram(&s);
            }
        }
        if fd.is_none_or(|f| f == 0) {
            return Stdin::Doc(doc.doc.value.clone());
        }
        stdin
    }
}

/// `while true`, `while :`, `until false`: a condition that never changes.
fn is_constant_condition(cond: &ast::CompoundList, values: &[&str]) -> bool {
    let [item] = cond.0.as_slice() else {
        return false;
    };
    if !item.0.additional.is_empty() {
        return false;
    }
    let [ast::Command::Simple(s)] = item.0.first.seq.as_slice() else {
        return false;
    };
    s.prefix.is_none()
        && s.suffix.is_none()
        && s.word_or_name.as_ref().is_some_and(|w| {
            let name = w.value.rsplit('/').next().unwrap_or("");
            values.contains(&name)
        })
}

#[cfg(test)]
mod tests;
