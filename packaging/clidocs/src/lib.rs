//! Man pages and shell completions for tollgate's binaries, generated from
//! their clap definitions, so a new flag reaches `man` and tab completion
//! without anyone editing a page.
//!
//! Each binary answers a hidden first argument, `__generate-docs DIR`
//! ([`main_if_asked`]), and writes under DIR:
//! `man/manS/NAME.S` (one page per subcommand too: `NAME-SUB.S`),
//! `completions/bash/NAME`, `completions/zsh/_NAME`,
//! `completions/fish/NAME.fish` — the layout `packaging/build-deb.sh`
//! installs into the standard places. [`check`] is the test every binary
//! runs: each long flag of each (sub)command must be in its page and in
//! every completion script.

#![forbid(unsafe_code)]

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Command;
use clap_complete::Shell;

pub mod config_page;

/// The hidden first argument that asks a binary for its docs.
pub const GENERATE_ARG: &str = "__generate-docs";

/// The shells completions are generated for, with each one's file name.
const SHELLS: [(Shell, &str); 3] = [
    (Shell::Bash, "bash"),
    (Shell::Zsh, "zsh"),
    (Shell::Fish, "fish"),
];

/// Everything generated for one command, in memory.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub name: String,
    pub section: String,
    /// (file name, roff) per page: the command, then each subcommand.
    pub pages: Vec<(String, String)>,
    /// (shell, script).
    pub completions: Vec<(&'static str, String)>,
}

/// Renders the man pages and completion scripts of `cmd`.
pub fn render(cmd: Command, section: &str) -> io::Result<Rendered> {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let name = cmd.get_name().to_string();
    let mut pages = Vec::new();
    render_pages(&cmd, section, &mut pages)?;
    let mut completions = Vec::new();
    for (shell, label) in SHELLS {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut cmd.clone(), name.clone(), &mut buf);
        completions.push((label, String::from_utf8_lossy(&buf).into_owned()));
    }
    Ok(Rendered {
        name,
        section: section.to_string(),
        pages,
        completions,
    })
}

fn render_pages(cmd: &Command, section: &str, out: &mut Vec<(String, String)>) -> io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone())
        .section(section)
        .manual("tollgate")
        .source(format!("tollgate {}", cmd.get_version().unwrap_or("")));
    let mut roff = Vec::new();
    man.render(&mut roff)?;
    out.push((
        man.get_filename(),
        String::from_utf8_lossy(&roff).into_owned(),
    ));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        render_pages(sub, section, out)?;
    }
    Ok(())
}

/// Writes `cmd`'s pages and completions under `dir`; returns the files.
pub fn write_all(cmd: Command, section: &str, dir: &Path) -> io::Result<Vec<PathBuf>> {
    let r = render(cmd, section)?;
    let mut written = Vec::new();
    let man_dir = dir.join("man").join(format!("man{section}"));
    std::fs::create_dir_all(&man_dir)?;
    for (file, roff) in &r.pages {
        let p = man_dir.join(file);
        std::fs::write(&p, roff)?;
        written.push(p);
    }
    for (shell, script) in &r.completions {
        let shell_dir = dir.join("completions").join(shell);
        std::fs::create_dir_all(&shell_dir)?;
        let file = match *shell {
            "zsh" => format!("_{}", r.name),
            "fish" => format!("{}.fish", r.name),
            _ => r.name.clone(),
        };
        let p = shell_dir.join(file);
        std::fs::write(&p, script)?;
        written.push(p);
    }
    Ok(written)
}

/// When the binary was run as `NAME __generate-docs DIR`, writes the docs
/// and returns the exit code; otherwise `None` and the binary goes on.
pub fn main_if_asked(cmd: impl FnOnce() -> Command, section: &str) -> Option<ExitCode> {
    main_if_asked_with(cmd, section, &[])
}

/// A page that no command renders (`tollgate.toml(5)`): its section, file
/// name and roff.
pub type ExtraPage = (&'static str, &'static str, String);

/// [`main_if_asked`], writing `extra` pages too (under `man/manS/`).
pub fn main_if_asked_with(
    cmd: impl FnOnce() -> Command,
    section: &str,
    extra: &[ExtraPage],
) -> Option<ExitCode> {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(OsStr::new(GENERATE_ARG)) {
        return None;
    }
    let Some(dir) = args.next() else {
        eprintln!("{GENERATE_ARG}: give the output directory");
        return Some(ExitCode::from(2));
    };
    let cmd = cmd();
    let name = cmd.get_name().to_string();
    let written = write_all(cmd, section, Path::new(&dir)).and_then(|mut files| {
        for (sec, file, roff) in extra {
            let man_dir = Path::new(&dir).join("man").join(format!("man{sec}"));
            std::fs::create_dir_all(&man_dir)?;
            std::fs::write(man_dir.join(file), roff)?;
            files.push(man_dir.join(file));
        }
        Ok(files)
    });
    Some(match written {
        Ok(files) => {
            for f in files {
                println!("{}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "{name}: cannot write docs to {}: {e}",
                Path::new(&dir).display()
            );
            ExitCode::from(1)
        }
    })
}

/// Every visible long flag, with the page it belongs on.
pub fn long_flags(cmd: &Command, section: &str) -> Vec<(String, String)> {
    let mut cmd = cmd.clone().disable_help_subcommand(true);
    cmd.build();
    let mut out = Vec::new();
    collect_flags(&cmd, section, &mut out);
    out
}

fn collect_flags(cmd: &Command, section: &str, out: &mut Vec<(String, String)>) {
    let page = clap_mangen::Man::new(cmd.clone())
        .section(section)
        .get_filename();
    for arg in cmd.get_arguments().filter(|a| !a.is_hide_set()) {
        if let Some(long) = arg.get_long() {
            out.push((page.clone(), long.to_string()));
        }
    }
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        collect_flags(sub, section, out);
    }
}

/// Checks the generated docs against the command: every visible long flag
/// of every (sub)command is in that command's man page and in each shell's
/// completion script. Returns what is missing.
pub fn check(cmd: Command, section: &str) -> Result<(), Vec<String>> {
    let flags = long_flags(&cmd, section);
    let r = render(cmd, section).map_err(|e| vec![format!("rendering failed: {e}")])?;
    let mut missing = Vec::new();
    if flags.is_empty() {
        missing.push(format!("{}: no long flags found at all", r.name));
    }
    for (page, flag) in &flags {
        let roff = r
            .pages
            .iter()
            .find(|(f, _)| f == page)
            .map(|(_, roff)| roff.replace("\\-", "-"));
        match roff {
            Some(text) if text.contains(&format!("--{flag}")) => {}
            Some(_) => missing.push(format!("{page}: --{flag} is not on the page")),
            None => missing.push(format!("{page}: no such page generated")),
        }
        for (shell, script) in &r.completions {
            let needle = match *shell {
                "fish" => format!("-l {flag}"),
                _ => format!("--{flag}"),
            };
            if !script.contains(&needle) {
                missing.push(format!(
                    "{shell} completion of {}: --{flag} is missing",
                    r.name
                ));
            }
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use clap::{Arg, ArgAction};

    fn sample() -> Command {
        Command::new("samplectl")
            .version("1.0")
            .about("a sample")
            .arg(Arg::new("socket").long("socket").help("the socket"))
            .subcommand(Command::new("audit").subcommand(
                Command::new("verify").arg(Arg::new("head").long("head").help("anchor")),
            ))
    }

    #[test]
    fn a_new_flag_reaches_the_page_and_every_completion_without_editing_anything() {
        let before = render(sample(), "8").unwrap();
        let all = |r: &Rendered| {
            let mut s: String = r.pages.iter().map(|(_, p)| p.replace("\\-", "-")).collect();
            s.extend(r.completions.iter().map(|(_, c)| c.clone()));
            s
        };
        assert!(!all(&before).contains("brand-new-flag"));
        let with_flag = sample().subcommand(
            Command::new("kill").arg(
                Arg::new("brand-new-flag")
                    .long("brand-new-flag")
                    .action(ArgAction::SetTrue)
                    .help("added later"),
            ),
        );
        let after = render(with_flag.clone(), "8").unwrap();
        let kill = after
            .pages
            .iter()
            .find(|(f, _)| f == "samplectl-kill.8")
            .expect("a page for the new subcommand");
        assert!(
            kill.1.replace("\\-", "-").contains("--brand-new-flag"),
            "{}",
            kill.1
        );
        for (shell, script) in &after.completions {
            assert!(script.contains("brand-new-flag"), "{shell}: {script}");
        }
        assert_eq!(check(with_flag, "8"), Ok(()));
    }

    #[test]
    fn check_names_a_flag_the_docs_do_not_have() {
        // A hidden flag is neither documented nor checked; a visible one is.
        let cmd = sample().arg(Arg::new("secret").long("secret").hide(true));
        assert_eq!(check(cmd.clone(), "8"), Ok(()));
        let flags = long_flags(&cmd, "8");
        assert!(flags.contains(&("samplectl.8".to_string(), "socket".to_string())));
        assert!(flags.contains(&("samplectl-audit-verify.8".to_string(), "head".to_string())));
        assert!(!flags.iter().any(|(_, f)| f == "secret"));
    }

    #[test]
    fn files_land_in_the_standard_layout() {
        let dir = tempfile::tempdir().unwrap();
        let files = write_all(sample(), "8", dir.path()).unwrap();
        for rel in [
            "man/man8/samplectl.8",
            "man/man8/samplectl-audit.8",
            "man/man8/samplectl-audit-verify.8",
            "completions/bash/samplectl",
            "completions/zsh/_samplectl",
            "completions/fish/samplectl.fish",
        ] {
            assert!(files.contains(&dir.path().join(rel)), "{rel} in {files:?}");
            assert!(
                std::fs::metadata(dir.path().join(rel)).unwrap().len() > 0,
                "{rel}"
            );
        }
    }
}
