//! `tollgate.toml(5)`: the config file's page, rendered from
//! `tollgate_config::reference` (every key, its type, default and meaning)
//! as roff, the way clap_mangen renders the commands' pages.

use tollgate_config::reference::{SECTIONS, Section};

/// The page's file name.
pub const FILE: &str = "tollgate.toml.5";

/// Escapes text for roff: backslashes, hyphens (so `man` shows and
/// searches them as typed) and a leading `.` or `'`.
fn esc(s: &str) -> String {
    let body = s.replace('\\', "\\e").replace('-', "\\-");
    if body.starts_with('.') || body.starts_with('\'') {
        format!("\\&{body}")
    } else {
        body
    }
}

fn section(out: &mut String, s: &Section) {
    out.push_str(&format!(".SS [{}]\n{}\n", esc(s.name), esc(s.doc)));
    for k in s.keys {
        let default = match k.default {
            Some(d) => format!("default {}", esc(d)),
            None => "unset by default".to_string(),
        };
        out.push_str(&format!(
            ".TP\n\\fB{}\\fR (\\fI{}\\fR; {default})\n{}\n",
            esc(k.key),
            esc(k.kind),
            esc(k.doc)
        ));
    }
}

/// The page as roff; `version` goes in its footer.
pub fn render(version: &str) -> String {
    let mut out = format!(
        ".TH TOLLGATE.TOML 5 \"\" \"tollgate {}\" \"tollgate\"\n",
        esc(version)
    );
    out.push_str(".SH NAME\ntollgate.toml \\- the tollgate supervisor's configuration file\n");
    out.push_str(concat!(
        ".SH SYNOPSIS\n/etc/tollgate/supervisor.toml, /etc/tollgate/policy.d/*.toml\n",
        ".SH DESCRIPTION\nThe supervisor reads one TOML file (\\-\\-config FILE, $TOLLGATE_CONFIG, ",
        "else /etc/tollgate/supervisor.toml; absent, the built\\-in defaults) and the ",
        "[policy] drop\\-ins of policy.d/ beside it, merged in file\\-name order, lists as ",
        "unions. An unknown section or key, or a bad value, is an error naming the file and ",
        "line: a start exits 78 (EX_CONFIG), a reload is refused and the old config stays. ",
        "\\fBsupervisor \\-\\-check\\-config\\fR checks a file as a start would. A reload ",
        "(SIGHUP, systemctl reload tollgate, supervisorctl reload) puts a new [policy] in ",
        "force at once; every other section applies at the next start.\n",
        ".SH SECTIONS\n",
    ));
    for s in SECTIONS {
        section(&mut out, s);
    }
    out.push_str(concat!(
        ".SH FILES\n/etc/tollgate/supervisor.toml, /etc/tollgate/policy.d/\n",
        ".SH SEE ALSO\nsupervisor(8), supervisorctl(8), supervisorctl\\-reload(8), agent(1)\n",
    ));
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn every_key_of_every_section_is_on_the_page() {
        let page = render("0.1.0").replace("\\-", "-");
        assert!(page.starts_with(".TH TOLLGATE.TOML 5 "), "{page}");
        for s in SECTIONS {
            assert!(page.contains(&format!(".SS [{}]", s.name)), "[{}]", s.name);
            for k in s.keys {
                assert!(page.contains(&format!("\\fB{}\\fR", k.key)), "{}", k.key);
            }
        }
        assert!(page.contains("default \"/run/tollgate\""), "{page}");
        assert!(page.contains("unset by default"));
    }

    #[test]
    fn roff_control_characters_are_escaped() {
        assert_eq!(esc(".x"), "\\&.x");
        assert_eq!(esc("a-b\\c"), "a\\-b\\ec");
    }
}
