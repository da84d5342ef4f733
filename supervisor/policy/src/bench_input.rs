//! Inputs shared by the criterion benches (`benches/decide.rs`) and
//! `supervisorctl bench`, so both measure the same thing. Not policy.

/// A representative `[policy]` section (the workstation example's shape).
pub const REPRESENTATIVE_POLICY: &str = r#"
allow = [
  "run_bash(cargo test*)",
  "run_bash(cargo build*)",
  { rule = "run_bash(git status*)", match = ["git status", "git status --short"], not_match = ["git push", "git status; curl x"] },
  "run_bash(git diff*)",
  "run_bash(git log*)",
  { rule = "webfetch(domain:docs.rs)", match = ["https://docs.rs/url"], not_match = ["https://docs.rs.evil.com/"] },
  "webfetch(domain:*.rust-lang.org)",
]
ask = [
  { rule = "read_file(./secrets/**)", match = ["./secrets/a.txt"], not_match = ["src/main.rs"] },
  "write_file(*.lock)",
]
deny = [
  "run_bash(npm publish*)",
  { rule = "run_bash(cargo publish*)", match = ["cargo publish", "cd x && cargo publish --dry-run"], not_match = ["cargo build"] },
]
extra_denied_binaries = ["helm", "terraform"]
extra_confirm_patterns = ["\\bdrop\\s+table\\b"]
"#;

/// About 4 KiB of pipelines with quoted arguments and redirects.
pub fn script_4k() -> String {
    let mut s = String::new();
    let mut i = 0;
    while s.len() < 4096 {
        s.push_str(&format!(
            "grep -rn \"TODO({i})\" src/ tests/ | sort | uniq -c | sort -rn | head -20 > reports/todo_{i}.txt\n"
        ));
        i += 1;
    }
    s
}

/// About 4 KiB where every line also runs a command substitution (each
/// one is parsed again as a program of its own).
pub fn script_4k_substitutions() -> String {
    let mut s = String::new();
    let mut i = 0;
    while s.len() < 4096 {
        s.push_str(&format!(
            "grep -rn \"TODO({i})\" src/ | sort | uniq -c | sort -rn | head -20 > reports/todo_{i}.txt && echo \"$(wc -l < reports/todo_{i}.txt) lines\"\n"
        ));
        i += 1;
    }
    s
}
