//! A client's own search (Claude Code's `Grep`), judged by every file it
//! reads (docs/CLIENTS.md, "What a client's own tool reaches").
//!
//! Claude Code runs its own ripgrep for Grep: `--hidden --no-follow`, its
//! VCS directories left out (`--glob !.git` …), then the `glob` field as
//! more `--glob` arguments, split on whitespace and, outside braces, on
//! commas. Hidden files are searched; `.gitignore` counts only inside a git
//! repository; and a glob that names a file (`glob: ".env"`) overrides every
//! ignore file. So the search path alone says nothing about what it reads.
//!
//! tollgate walks the search as ripgrep will ([`SearchFacts`]) and looks at
//! every file it reaches. Workspace secret files (and the supervisor's own
//! files) are left out: the client's input gains one `!` glob per file
//! (last on the line, so it wins over every glob before it), the narrowed
//! search is walked again and must reach none of them, and the model is
//! told what was left out (a Read of one asks for it, like tollgate's own
//! grep). Where the walk cannot be bounded (too many entries, globs ripgrep
//! would refuse, too many files to leave out) the call is refused with the
//! reason.
//!
//! The walk does not apply the `type` filter: it only narrows what ripgrep
//! reads, so leaving it out never hides a file from the check.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use tollgate_toolcall::{self as tool, Tool};

use crate::display::shorten;
use crate::engine::Context;
use crate::facts::{FileKind, FsFacts, SearchFacts, SearchWalk, Walked};
use crate::paths::{self, Access, is_secret_file_name};

/// The directories Claude Code leaves out of every Grep, in its order.
pub const VCS_DIRS: [&str; 6] = [".git", ".svn", ".hg", ".bzr", ".jj", ".sl"];

/// Entries a search walk may visit before tollgate gives up on it.
pub const MAX_WALK_ENTRIES: usize = 200_000;

/// Files a search may have left out; past this it is refused.
pub const MAX_LEFT_OUT: usize = 200;

/// The longest `glob` tollgate hands back (the grep schema's limit).
const MAX_GLOB_BYTES: usize = 4096;

/// The rule of a search tollgate refuses because it cannot bound it.
pub const RULE_SEARCH: &str = "clients:search-reach";

/// A client's Grep as it will run.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientSearch {
    /// The search path: the `path` field, or the event's cwd.
    pub path: String,
    /// The client's tool input, narrowed when files are left out.
    pub input: Map<String, Value>,
}

/// What to do with a client's search.
#[derive(Debug, Clone, PartialEq)]
pub enum SearchPlan {
    /// It reads no file tollgate keeps from the model (or it searches one
    /// file, which the engine decides as that file): it runs as asked.
    AsAsked,
    /// It would read secret files: it runs without them.
    Narrowed {
        /// The client's input with one `!` glob per file left out.
        input: Value,
        /// The grep the engine decides, with the same globs.
        call: Tool,
        /// The files left out, workspace-relative.
        left_out: Vec<String>,
    },
    /// What it reads cannot be bounded: refused.
    Refused { rule: &'static str, reason: String },
}

/// The `--glob` arguments Claude Code makes of a Grep's `glob` field:
/// split on whitespace, then each piece on commas unless it holds both
/// `{` and `}`; empty pieces dropped.
pub fn client_globs(glob: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    for piece in glob.unwrap_or("").split_whitespace() {
        if piece.contains('{') && piece.contains('}') {
            out.push(piece.to_string());
        } else {
            out.extend(
                piece
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_string),
            );
        }
    }
    out
}

impl ClientSearch {
    fn glob(&self) -> Option<&str> {
        self.input.get("glob").and_then(Value::as_str)
    }

    /// What ripgrep gets as `--glob`, in order, for this glob field.
    fn walk(&self, root: &Path, glob: Option<&str>) -> SearchWalk {
        let mut globs: Vec<String> = VCS_DIRS.iter().map(|d| format!("!{d}")).collect();
        globs.extend(client_globs(glob));
        SearchWalk {
            root: root.to_path_buf(),
            globs,
            max_entries: MAX_WALK_ENTRIES,
        }
    }

    /// The grep the engine decides for this search, with `glob`.
    fn call(&self, glob: Option<String>) -> Tool {
        Tool::Grep(tool::Grep {
            pattern: self
                .input
                .get("pattern")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            path: Some(self.path.clone()),
            glob,
            ignore_case: (self.input.get("-i").and_then(Value::as_bool) == Some(true))
                .then_some(true),
        })
    }
}

/// Plans a client's search: walks it as the client will, and leaves out
/// what tollgate keeps from the model.
pub fn plan(
    search: &ClientSearch,
    ctx: &Context,
    fs: &dyn FsFacts,
    walker: &dyn SearchFacts,
) -> SearchPlan {
    // A path the floor refuses is the engine's to refuse, with its reason;
    // a single file is decided as that file; nothing there reads nothing.
    let Ok(root) = paths::resolve(&search.path, Access::Search, ctx, fs) else {
        return SearchPlan::AsAsked;
    };
    if root.facts.map(|f| f.kind) != Some(FileKind::Dir) {
        return SearchPlan::AsAsked;
    }
    let reached = match kept_from_model(&search.walk(&root.abs, search.glob()), ctx, walker) {
        Ok(r) => r,
        Err(reason) => return refused(reason),
    };
    if reached.is_empty() {
        return SearchPlan::AsAsked;
    }
    if reached.len() > MAX_LEFT_OUT {
        return refused(format!(
            "this search would read {} secret files (`{}`, …), more than tollgate leaves out of one search ({MAX_LEFT_OUT}); search a directory without them (`path`) or narrow it with `glob`",
            reached.len(),
            shorten(&rel_of(&reached[0], &ctx.workspace), 120)
        ));
    }
    let mut pieces: Vec<String> = search.glob().map(str::to_string).into_iter().collect();
    pieces.extend(
        reached
            .iter()
            .map(|f| exclusion(f.strip_prefix(&root.abs).unwrap_or(f))),
    );
    let glob = pieces.join(" ");
    if glob.len() > MAX_GLOB_BYTES {
        return refused(format!(
            "leaving out the {} secret files this search would read makes its glob longer than {MAX_GLOB_BYTES} bytes; search a directory without them (`path`) or narrow it with `glob`",
            reached.len()
        ));
    }
    // The narrowed search, walked again, must reach none of them.
    match kept_from_model(&search.walk(&root.abs, Some(&glob)), ctx, walker) {
        Ok(again) if again.is_empty() => {}
        Ok(again) => {
            return refused(format!(
                "tollgate cannot leave `{}` out of this search; search a directory without it (`path`)",
                shorten(&rel_of(&again[0], &ctx.workspace), 160)
            ));
        }
        Err(reason) => return refused(reason),
    }
    let mut input = search.input.clone();
    input.insert("glob".into(), Value::String(glob.clone()));
    SearchPlan::Narrowed {
        input: Value::Object(input),
        call: search.call(Some(glob)),
        left_out: reached.iter().map(|f| rel_of(f, &ctx.workspace)).collect(),
    }
}

/// The sentence for the model about what a narrowed search left out.
pub fn left_out_note(left_out: &[String]) -> String {
    let shown: Vec<String> = left_out
        .iter()
        .take(8)
        .map(|f| format!("`{}`", shorten(f, 120)))
        .collect();
    let more = if left_out.len() > shown.len() {
        format!(" and {} more", left_out.len() - shown.len())
    } else {
        String::new()
    };
    let (look, one) = if left_out.len() == 1 {
        ("it looks like a secret file", "Read it")
    } else {
        ("they look like secret files", "Read one")
    };
    format!(
        "tollgate left {} out of this search: {look} (keys, passwords, tokens). {one} to ask the user for it.",
        [shown.join(", "), more].concat()
    )
}

fn refused(reason: String) -> SearchPlan {
    SearchPlan::Refused {
        rule: RULE_SEARCH,
        reason: format!("{reason}. The search is refused."),
    }
}

/// The files a walk reads that the model must not see through it: secret
/// files, and anything of the supervisor's own.
fn kept_from_model(
    walk: &SearchWalk,
    ctx: &Context,
    walker: &dyn SearchFacts,
) -> Result<Vec<PathBuf>, String> {
    match walker.search_walk(walk) {
        Walked::Files(files) => Ok(files
            .into_iter()
            .filter(|f| {
                f.file_name()
                    .is_some_and(|n| is_secret_file_name(&n.to_string_lossy()))
                    || ctx.protected.iter().any(|p| f.starts_with(p))
            })
            .collect()),
        Walked::TooMany => Err(format!(
            "this search walks more than {MAX_WALK_ENTRIES} entries, so tollgate cannot tell which files it reads; search a smaller directory (`path`)"
        )),
        Walked::Failed(why) => Err(format!(
            "tollgate cannot walk this search as ripgrep would: {why}"
        )),
    }
}

fn rel_of(f: &Path, workspace: &Path) -> String {
    f.strip_prefix(workspace)
        .unwrap_or(f)
        .to_string_lossy()
        .into_owned()
}

/// A `!` glob that leaves `rel` (relative to the search root) out wherever
/// ripgrep is rooted: `!**/` and the path, every character that Claude Code
/// would split on or a glob would read as syntax replaced by `?` (one
/// character; a name that is not UTF-8 gets `*` for the bytes that are
/// not). It may also leave out a file of the same name elsewhere: a secret
/// name is secret wherever it is.
fn exclusion(rel: &Path) -> String {
    let mut g = String::from("!**/");
    let text = rel.as_os_str().as_encoded_bytes();
    for chunk in text.utf8_chunks() {
        for c in chunk.valid().chars() {
            let plain = c.is_ascii_alphanumeric() || "._-+@=%~^#:/".contains(c);
            g.push(if plain { c } else { '?' });
        }
        if !chunk.invalid().is_empty() {
            g.push('*');
        }
    }
    g
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeSet;

    use serde_json::json;

    use super::*;
    use crate::facts::FileFacts;
    use crate::mode::Mode;

    #[test]
    fn globs_split_as_claude_code_splits_them() {
        assert_eq!(client_globs(None), Vec::<String>::new());
        assert_eq!(
            client_globs(Some("*.rs,*.toml  {a,b}/*.md ,x")),
            vec!["*.rs", "*.toml", "{a,b}/*.md", "x"]
        );
    }

    #[test]
    fn an_exclusion_survives_the_split_and_glob_syntax() {
        assert_eq!(exclusion(Path::new(".env")), "!**/.env");
        assert_eq!(
            exclusion(Path::new("sub dir/a,b{c}[d]*.pem")),
            "!**/sub?dir/a?b?c??d??.pem"
        );
        assert_eq!(exclusion(Path::new("é.key")), "!**/?.key");
        use std::os::unix::ffi::OsStrExt;
        let odd = Path::new(std::ffi::OsStr::from_bytes(b"x\xff.env"));
        assert_eq!(exclusion(odd), "!**/x*.env");
        let piece = exclusion(Path::new("a b,c.env"));
        assert_eq!(client_globs(Some(&piece)), vec![piece.clone()]);
    }

    /// The workspace as ripgrep would walk it: files, and which globs
    /// leave which out (a tiny model of `--glob`: the last `!**/P` or
    /// `!P` matching the path's end wins over a plain name glob).
    struct Fake {
        files: Vec<&'static str>,
        walks: RefCell<Vec<Vec<String>>>,
    }

    impl FsFacts for Fake {
        fn symlink_metadata(&self, p: &Path) -> Option<FileFacts> {
            let dir = FileFacts {
                kind: FileKind::Dir,
                size: 0,
                nlink: 1,
            };
            let file = FileFacts {
                kind: FileKind::File,
                size: 1,
                nlink: 1,
            };
            if p == Path::new("/") {
                return Some(dir);
            }
            let rel = p.strip_prefix("/w").ok()?.to_string_lossy().into_owned();
            if rel.is_empty() || self.files.iter().any(|f| f.starts_with(&format!("{rel}/"))) {
                Some(dir)
            } else if self.files.contains(&rel.as_str()) {
                Some(file)
            } else {
                None
            }
        }
        fn read_link(&self, _: &Path) -> Option<PathBuf> {
            None
        }
    }

    impl SearchFacts for Fake {
        fn search_walk(&self, w: &SearchWalk) -> Walked {
            self.walks.borrow_mut().push(w.globs.clone());
            let root = w
                .root
                .strip_prefix("/w")
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let files = self
                .files
                .iter()
                .filter(|f| root.is_empty() || f.starts_with(&format!("{root}/")))
                .filter(|f| {
                    // With any plain glob, only what one matches is read.
                    let mut keep = w.globs.iter().all(|g| g.starts_with('!'));
                    for g in &w.globs {
                        let (neg, body) = match g.strip_prefix('!') {
                            Some(b) => (true, b.trim_start_matches("**/")),
                            None => (false, g.as_str()),
                        };
                        let hit = f.ends_with(body)
                            && (f.len() == body.len() || f[..f.len() - body.len()].ends_with('/'));
                        if hit {
                            keep = !neg;
                        }
                    }
                    keep
                })
                .map(|f| Path::new("/w").join(f))
                .collect();
            Walked::Files(files)
        }
    }

    fn ctx() -> Context {
        Context {
            workspace: "/w".into(),
            mode: Mode::Default,
            tools: None,
            home: Some("/home/u".into()),
            protected: vec!["/w/.tollgate-audit".into()],
            read_files: BTreeSet::new(),
            repo: Vec::new(),
            sandbox: None,
        }
    }

    fn search(path: &str, input: Value) -> ClientSearch {
        ClientSearch {
            path: path.to_string(),
            input: input.as_object().cloned().unwrap(),
        }
    }

    fn fake(files: &[&'static str]) -> Fake {
        Fake {
            files: files.to_vec(),
            walks: RefCell::new(Vec::new()),
        }
    }

    /// The finding: a Grep with `glob: ".env"` (or any Grep where ripgrep
    /// does not skip it) read the secret file the client then showed.
    #[test]
    fn a_grep_that_would_read_a_secret_file_is_narrowed_to_leave_it_out() {
        let fs = fake(&[".env", "src/a.rs", "config/.env.local", "src/main.rs"]);
        let s = search(
            "/w",
            json!({"pattern": "KEY", "glob": ".env", "output_mode": "content"}),
        );
        let SearchPlan::Narrowed {
            input,
            call,
            left_out,
        } = plan(&s, &ctx(), &fs, &fs)
        else {
            panic!("not narrowed")
        };
        assert_eq!(left_out, vec![".env"]);
        assert_eq!(
            input,
            json!({"pattern": "KEY", "glob": ".env !**/.env", "output_mode": "content"})
        );
        assert_eq!(
            call,
            Tool::Grep(tool::Grep {
                pattern: "KEY".into(),
                path: Some("/w".into()),
                glob: Some(".env !**/.env".into()),
                ignore_case: None,
            })
        );
        // Walked as Claude Code runs it, then again narrowed.
        let walks = fs.walks.borrow();
        assert_eq!(walks.len(), 2);
        assert_eq!(
            walks[0],
            vec!["!.git", "!.svn", "!.hg", "!.bzr", "!.jj", "!.sl", ".env"]
        );
        assert_eq!(walks[1].last().map(String::as_str), Some("!**/.env"));
    }

    #[test]
    fn a_plain_grep_outside_a_git_repository_leaves_every_secret_out() {
        let fs = fake(&[
            ".env",
            "src/a.rs",
            "config/.env.local",
            "keys/id_ed25519",
            ".tollgate-audit/a.jsonl",
        ]);
        let SearchPlan::Narrowed {
            input, left_out, ..
        } = plan(&search("/w", json!({"pattern": "x"})), &ctx(), &fs, &fs)
        else {
            panic!("not narrowed")
        };
        assert_eq!(
            left_out,
            vec![
                ".env",
                "config/.env.local",
                "keys/id_ed25519",
                ".tollgate-audit/a.jsonl"
            ]
        );
        assert_eq!(
            input["glob"],
            "!**/.env !**/config/.env.local !**/keys/id_ed25519 !**/.tollgate-audit/a.jsonl"
        );
        // Searching a subdirectory: the globs are relative to it.
        let SearchPlan::Narrowed {
            input, left_out, ..
        } = plan(
            &search("/w/config", json!({"pattern": "x"})),
            &ctx(),
            &fs,
            &fs,
        )
        else {
            panic!("not narrowed")
        };
        assert_eq!(
            (left_out, input["glob"].clone()),
            (
                vec!["config/.env.local".to_string()],
                json!("!**/.env.local")
            )
        );
    }

    #[test]
    fn a_search_that_reads_no_secret_or_one_file_runs_as_asked() {
        let fs = fake(&["src/a.rs", ".env"]);
        assert_eq!(
            plan(&search("/w/src", json!({"pattern": "x"})), &ctx(), &fs, &fs),
            SearchPlan::AsAsked
        );
        // One file: the engine decides it as that file (a secret asks).
        assert_eq!(
            plan(
                &search("/w/.env", json!({"pattern": "x"})),
                &ctx(),
                &fs,
                &fs
            ),
            SearchPlan::AsAsked
        );
        // Outside the workspace: the engine refuses it, with its reason.
        assert_eq!(
            plan(&search("/etc", json!({"pattern": "x"})), &ctx(), &fs, &fs),
            SearchPlan::AsAsked
        );
        assert!(fs.walks.borrow().len() == 1, "only the directory is walked");
    }

    #[test]
    fn a_search_tollgate_cannot_bound_is_refused_with_the_reason() {
        struct Says(Walked);
        impl SearchFacts for Says {
            fn search_walk(&self, _: &SearchWalk) -> Walked {
                self.0.clone()
            }
        }
        let fs = fake(&["a"]);
        for (walked, want) in [
            (Walked::TooMany, "walks more than 200000 entries"),
            (
                Walked::Failed("bad glob".into()),
                "cannot walk this search as ripgrep would: bad glob",
            ),
        ] {
            let SearchPlan::Refused { rule, reason } = plan(
                &search("/w", json!({"pattern": "x"})),
                &ctx(),
                &fs,
                &Says(walked),
            ) else {
                panic!("not refused")
            };
            assert_eq!(rule, RULE_SEARCH);
            assert!(
                reason.contains(want) && reason.ends_with("The search is refused."),
                "{reason}"
            );
        }
        // Still reached after narrowing (a walker that ignores the globs).
        let stubborn = Says(Walked::Files(vec![PathBuf::from("/w/.env")]));
        let SearchPlan::Refused { reason, .. } = plan(
            &search("/w", json!({"pattern": "x"})),
            &ctx(),
            &fs,
            &stubborn,
        ) else {
            panic!("not refused")
        };
        assert!(reason.contains("cannot leave `.env` out"), "{reason}");
        // Too many secrets to leave out.
        let many: Vec<PathBuf> = (0..=MAX_LEFT_OUT)
            .map(|i| PathBuf::from(format!("/w/k{i}.pem")))
            .collect();
        let SearchPlan::Refused { reason, .. } = plan(
            &search("/w", json!({"pattern": "x"})),
            &ctx(),
            &fs,
            &Says(Walked::Files(many)),
        ) else {
            panic!("not refused")
        };
        assert!(reason.contains("201 secret files"), "{reason}");
    }

    #[test]
    fn the_model_is_told_what_was_left_out() {
        assert_eq!(
            left_out_note(&[".env".into()]),
            "tollgate left `.env` out of this search: it looks like a secret file (keys, passwords, tokens). Read it to ask the user for it."
        );
        let many: Vec<String> = (0..10).map(|i| format!("k{i}.pem")).collect();
        assert!(left_out_note(&many).contains("`k7.pem` and 2 more out of this search"));
    }
}
