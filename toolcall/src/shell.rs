//! Shell quoting: the one function the workspace quotes a word for `sh`
//! with (the agent's hook command lines, `parallel`'s filled-in items the
//! policy judges, the e2e harness's scripts).

/// Single-quotes a word for the shell unless it is plain (letters, digits and
/// `/._-+:=,@`, none of which the shell treats specially); an empty word is
/// `''`. The shell reads the result back as exactly `s`, one word.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+:=,@".contains(&b));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::shell_quote;

    #[test]
    fn plain_words_stay_and_others_are_single_quoted() {
        assert_eq!(shell_quote("/usr/local/bin/agent"), "/usr/local/bin/agent");
        assert_eq!(shell_quote("/opt/my tools/agent"), "'/opt/my tools/agent'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("~"), "'~'");
        assert_eq!(shell_quote("*.rs"), "'*.rs'");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
    }
}
