use std::path::Path;

use super::*;

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(p).unwrap()
}

/// The drop-in loads as a config (so every example held) and its rules.
fn loaded(client: Client, text: &str) -> (Imported, tollgate_policy::PolicyConfig) {
    let imported = match client {
        Client::Claude => claude::import(text).unwrap(),
        Client::Codex => codex::import(text).unwrap(),
    };
    let toml_text = render(client, Path::new("x"), &imported);
    let config = tollgate_config::Config::parse(&toml_text, Path::new("drop-in.toml"))
        .unwrap_or_else(|e| panic!("{e}\n{toml_text}"));
    tollgate_policy::Engine::new(&config.policy).unwrap_or_else(|e| panic!("{e}\n{toml_text}"));
    (imported, config.policy)
}

fn rules(list: &[tollgate_policy::RuleSpec]) -> Vec<&str> {
    list.iter().map(|r| r.rule()).collect()
}

#[test]
fn claude_settings_become_rules_whose_examples_hold() {
    let (imported, p) = loaded(Client::Claude, &fixture("claude-settings.json"));
    let allow = rules(&p.allow);
    for want in [
        "run_bash(npm run test)",
        "run_bash(npm run test *)",
        "run_bash(npm run build)",
        "run_bash(git diff)",
        "run_bash(git diff *)",
        "read_file(src/**)",
        "grep(src/**)",
        "glob_files(./docs/*.md)",
        "edit_file(./src/**/*.ts)",
        "write_file(./src/**/*.ts)",
        "webfetch(domain:docs.rs)",
        "mcp(github.get_file_contents)",
        "mcp(filesystem.*)",
        "glob_files",
    ] {
        assert!(allow.contains(&want), "{want} not in {allow:?}");
    }
    assert_eq!(
        rules(&p.ask),
        [
            "run_bash(git push)",
            "run_bash(git push *)",
            "write_file(package.json)",
            "mcp(github.create_pull_request)"
        ]
    );
    let deny = rules(&p.deny);
    for want in [
        "run_bash(curl)",
        "run_bash(curl *)",
        "run_bash(rm -rf *)",
        "read_file(./.env)",
        "read_file(./secrets/**)",
        "webfetch(domain:pastebin.com)",
    ] {
        assert!(deny.contains(&want), "{want} not in {deny:?}");
    }
    let unmapped: Vec<&str> = imported.unmapped.iter().map(|u| u.from.as_str()).collect();
    assert_eq!(
        unmapped,
        [
            "WebSearch",
            "TodoWrite",
            "Read(~/.ssh/**)",
            "Edit(//etc/**)",
            "Bash(command:sudo *)",
            "permissions.defaultMode = \"acceptEdits\"",
            "permissions.additionalDirectories = [\"../shared-lib\"]",
        ]
    );
    assert!(imported.unmapped.iter().all(|u| !u.reason.is_empty()));
}

#[test]
fn codex_prefix_rules_become_rules_whose_examples_hold() {
    let (imported, p) = loaded(Client::Codex, &fixture("codex.rules"));
    assert_eq!(
        rules(&p.ask),
        [
            "run_bash(git push)",
            "run_bash(git push *)",
            "run_bash(git fetch)",
            "run_bash(git fetch *)"
        ]
    );
    assert_eq!(
        rules(&p.deny),
        ["run_bash(git reset --hard)", "run_bash(git reset --hard *)"]
    );
    let allow = rules(&p.allow);
    assert!(allow.contains(&"run_bash(cargo clippy *)"), "{allow:?}");
    assert!(allow.contains(&"run_bash(ls)"), "{allow:?}");
    // Codex's own examples travel with the rules they match.
    let spec = p
        .ask
        .iter()
        .find(|r| r.rule() == "run_bash(git fetch *)")
        .unwrap();
    let tollgate_policy::RuleSpec::WithExamples {
        matches, not_match, ..
    } = spec
    else {
        panic!("{spec:?}")
    };
    assert!(
        matches.contains(&"git fetch --all".to_string()),
        "{matches:?}"
    );
    assert!(
        not_match.contains(&"git status".to_string()),
        "{not_match:?}"
    );
    let unmapped: Vec<&str> = imported.unmapped.iter().map(|u| u.from.as_str()).collect();
    assert_eq!(
        unmapped,
        ["line 26: prefix_rule(…)", "line 31: host_executable(…)"]
    );
    assert!(imported.unmapped[0].reason.contains("space"));
}

#[test]
fn a_broken_rules_file_names_its_line() {
    let err = codex::import("prefix_rule(\n  pattern = [\"ls\"\n").unwrap_err();
    assert!(err.to_string().starts_with("line 3:"), "{err}");
    let err = claude::import("{\"env\": {}}").unwrap_err();
    assert!(err.to_string().contains("permissions"), "{err}");
}
