//! The redaction rules (`tollgate_audit::redact_rules::RULES`), table-driven
//! (docs/THREAT_MODEL.md, "The walls, by layer"): every rule has at least
//! one case, a text holding a
//! secret of its shape with what it must read after redaction (masked by
//! THAT rule, and only the part the rule says), and a near miss of the same
//! shape that must be left alone.
//!
//! Token bodies are generated (deterministically) from their alphabet and
//! length, so no secret-shaped literal sits in this file.

use std::collections::BTreeSet;

use tollgate_audit::Redactor;
use tollgate_audit::redact_rules::{Mask, RULES};

pub(crate) struct Case {
    pub(crate) rule: &'static str,
    pub(crate) text: String,
    pub(crate) want: String,
    pub(crate) near_miss: String,
}

fn case(rule: &'static str, text: String, want: String, near_miss: String) -> Case {
    Case {
        rule,
        text,
        want,
        near_miss,
    }
}

/// A token in a sentence, masked whole.
fn whole(rule: &'static str, token: String, near_miss: String) -> Case {
    case(
        rule,
        format!("value: {token} (from the log)"),
        format!("value: [REDACTED:{rule}] (from the log)"),
        format!("value: {near_miss} (from the log)"),
    )
}

/// Deterministic token bodies.
struct Gen(u64);

impl Gen {
    fn take(&mut self, alphabet: &str, n: usize) -> String {
        let chars: Vec<char> = alphabet.chars().collect();
        (0..n)
            .map(|_| {
                self.0 ^= self.0 << 13;
                self.0 ^= self.0 >> 7;
                self.0 ^= self.0 << 17;
                chars[(self.0 % chars.len() as u64) as usize]
            })
            .collect()
    }
    fn alnum(&mut self, n: usize) -> String {
        self.take(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
            n,
        )
    }
    fn lower(&mut self, n: usize) -> String {
        self.take("abcdefghijklmnopqrstuvwxyz0123456789", n)
    }
    fn upper(&mut self, n: usize) -> String {
        self.take("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", n)
    }
    fn hex(&mut self, n: usize) -> String {
        self.take("0123456789abcdef", n)
    }
    fn digits(&mut self, n: usize) -> String {
        self.take("0123456789", n)
    }
    fn b64url(&mut self, n: usize) -> String {
        self.take(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
            n,
        )
    }
    fn b64(&mut self, n: usize) -> String {
        self.take(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
            n,
        )
    }
    fn uuid(&mut self) -> String {
        format!(
            "{}-{}-{}-{}-{}",
            self.hex(8),
            self.hex(4),
            self.hex(4),
            self.hex(4),
            self.hex(12)
        )
    }
}

/// Every rule's cases (also fed to the streaming redactor in `redaction_stream.rs`).
pub(crate) fn cases() -> Vec<Case> {
    let mut g = Gen(0x5EED_1234_ABCD_0001);
    let g = &mut g;
    vec![
        // Key material.
        case(
            "private-key",
            format!(
                "key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIE{}\n{}\n-----END RSA PRIVATE KEY-----\nok",
                g.b64(60),
                g.b64(64)
            ),
            "key:\n[REDACTED:private-key]\nok".to_string(),
            format!(
                "-----BEGIN PUBLIC KEY-----\nMIIB{}\n-----END PUBLIC KEY-----",
                g.b64(60)
            ),
        ),
        case(
            "private-key",
            format!(
                "-----BEGIN ENCRYPTED PRIVATE KEY-----\n{}\n[output truncated]",
                g.b64(64)
            ),
            "[REDACTED:private-key]".to_string(),
            "-----BEGIN CERTIFICATE REQUEST-----".to_string(),
        ),
        {
            let line1 = g.b64(64);
            let line2 = g.b64(20);
            case(
                "putty-private-key",
                format!(
                    "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nPrivate-Lines: 2\n{line1}\n{line2}\nPrivate-MAC: 0a1b"
                ),
                "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nPrivate-Lines: 2\n[REDACTED:putty-private-key]\nPrivate-MAC: 0a1b".to_string(),
                format!("Public-Lines: 2\n{line1}\n{line2}"),
            )
        },
        whole(
            "age-secret-key",
            format!("AGE-SECRET-KEY-1{}", g.upper(58)),
            format!("AGE-SECRET-KEY-1{}", g.upper(20)),
        ),
        // Cloud providers.
        whole(
            "aws-access-key",
            format!("ASIA{}", g.upper(16)),
            format!("ASIA{}", g.upper(15)),
        ),
        whole(
            "aws-access-key",
            format!("AKIA{}", g.upper(16)),
            format!("AKIA{}X", g.upper(16)),
        ),
        whole(
            "google-api-key",
            format!("AIza{}", g.b64url(35)),
            format!("AIza{}", g.b64url(20)),
        ),
        whole(
            "google-oauth",
            format!("GOCSPX-{}", g.b64url(28)),
            "GOCSPX-short".to_string(),
        ),
        whole(
            "google-oauth",
            format!("ya29.{}", g.b64url(120)),
            "ya29.c".to_string(),
        ),
        {
            let key = g.b64(86);
            case(
                "azure-storage-key",
                format!(
                    "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={key}==;EndpointSuffix=core.windows.net"
                ),
                "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=[REDACTED:azure-storage-key];EndpointSuffix=core.windows.net".to_string(),
                "AccountKey=<your key here>;".to_string(),
            )
        },
        case(
            "azure-storage-key",
            format!(
                "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={}=",
                g.b64(43)
            ),
            "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=[REDACTED:azure-storage-key]".to_string(),
            "SharedAccessKeyName=RootManageSharedAccessKey".to_string(),
        ),
        whole(
            "azure-ad-client-secret",
            format!("{}8Q~{}", g.alnum(3), g.alnum(34)),
            format!("{}8Q-{}", g.alnum(3), g.alnum(34)),
        ),
        case(
            "url-signature",
            format!(
                "https://acct.blob.core.windows.net/c/b.txt?sv=2022-11-02&sp=r&sig={}%3D",
                g.b64(43)
            ),
            "https://acct.blob.core.windows.net/c/b.txt?sv=2022-11-02&sp=r&sig=[REDACTED:url-signature]"
                .to_string(),
            "https://example.com/?sig=abc&page=2".to_string(),
        ),
        case(
            "url-signature",
            format!(
                "https://b.s3.amazonaws.com/k?X-Amz-Date=20261130T185800Z&X-Amz-Signature={}",
                g.hex(64)
            ),
            "https://b.s3.amazonaws.com/k?X-Amz-Date=20261130T185800Z&X-Amz-Signature=[REDACTED:url-signature]"
                .to_string(),
            "see the X-Amz-Signature header".to_string(),
        ),
        whole(
            "alibaba-access-key",
            format!("LTAI{}", g.alnum(20)),
            format!("LTAI{}", g.alnum(12)),
        ),
        whole(
            "digitalocean-token",
            format!("dop_v1_{}", g.hex(64)),
            format!("dop_v1_{}", g.hex(40)),
        ),
        whole(
            "heroku-api-key",
            format!("HRKU-AA{}", g.b64url(58)),
            format!("HRKU-AB{}", g.b64url(58)),
        ),
        whole(
            "databricks-token",
            format!("dapi{}", g.hex(32)),
            format!("dapi{}", g.hex(31)),
        ),
        whole(
            "cloudflare-origin-ca-key",
            format!("v1.0-{}-{}", g.hex(24), g.hex(146)),
            format!("v1.0-{}-{}", g.hex(24), g.hex(40)),
        ),
        whole(
            "dynatrace-token",
            format!("dt0c01.{}.{}", g.upper(24), g.alnum(64)),
            format!("dt0c01.{}", g.upper(24)),
        ),
        whole(
            "terraform-cloud-token",
            format!("{}.atlasv1.{}", g.alnum(14), g.b64url(65)),
            format!("{}.atlasv2.{}", g.alnum(14), g.b64url(65)),
        ),
        whole(
            "vault-token",
            format!("hvs.{}", g.b64url(90)),
            "hvs.short".to_string(),
        ),
        whole(
            "pulumi-token",
            format!("pul-{}", g.hex(40)),
            format!("pul-{}", g.hex(39)),
        ),
        whole(
            "openshift-token",
            format!("sha256~{}", g.b64url(43)),
            format!("sha256:{}", g.hex(64)),
        ),
        whole(
            "flyio-token",
            format!("fo1_{}", g.b64url(43)),
            "fo1_short".to_string(),
        ),
        // Source hosting, CI, registries.
        whole(
            "github-token",
            format!("ghu_{}", g.alnum(36)),
            "ghp_short".to_string(),
        ),
        whole(
            "github-token",
            format!("github_pat_{}_{}", g.alnum(22), g.alnum(59)),
            "github_pat_".to_string(),
        ),
        whole(
            "gitlab-token",
            format!("glpat-{}", g.alnum(20)),
            "glpat-short".to_string(),
        ),
        whole(
            "gitlab-token",
            format!("gloas-{}", g.alnum(64)),
            format!("gloas{}", g.alnum(64)),
        ),
        whole(
            "atlassian-api-token",
            format!("ATATT3{}", g.b64url(186)),
            "ATATT3short".to_string(),
        ),
        whole(
            "npm-token",
            format!("npm_{}", g.alnum(36)),
            format!("npm_{}", g.alnum(35)),
        ),
        whole(
            "pypi-token",
            format!("pypi-AgEIcHlwaS5vcmc{}", g.b64url(60)),
            "pypi-AgEshort".to_string(),
        ),
        whole(
            "rubygems-token",
            format!("rubygems_{}", g.hex(48)),
            format!("rubygems_{}", g.hex(47)),
        ),
        whole(
            "clojars-token",
            format!("CLOJARS_{}", g.lower(60)),
            format!("CLOJARS_{}", g.lower(30)),
        ),
        whole(
            "docker-hub-token",
            format!("dckr_pat_{}", g.b64url(27)),
            "dckr_pat_short".to_string(),
        ),
        whole(
            "artifactory-token",
            format!("AKCp{}", g.alnum(69)),
            format!("AKCp{}", g.alnum(30)),
        ),
        whole(
            "postman-api-key",
            format!("PMAK-{}-{}", g.hex(24), g.hex(34)),
            format!("PMAK-{}-{}", g.hex(24), g.hex(10)),
        ),
        whole(
            "buildkite-token",
            format!("bkua_{}", g.hex(40)),
            format!("bkua_{}", g.hex(39)),
        ),
        whole(
            "doppler-token",
            format!("dp.pt.{}", g.alnum(43)),
            "dp.pt.short".to_string(),
        ),
        whole(
            "sourcegraph-token",
            format!("sgp_{}_{}", g.hex(16), g.hex(40)),
            format!("sgp_{}", g.hex(39)),
        ),
        whole(
            "hosting-platform-token",
            format!("sbp_{}", g.hex(40)),
            format!("sbp_{}", g.hex(20)),
        ),
        whole(
            "hosting-platform-token",
            format!("pscale_tkn_{}", g.b64url(43)),
            "pscale_tkn_short".to_string(),
        ),
        // Payments.
        whole(
            "stripe-key",
            format!("sk_live_{}", g.alnum(24)),
            format!("sk_live_{}", g.alnum(5)),
        ),
        whole(
            "stripe-key",
            format!("rk_live_{}", g.alnum(24)),
            format!("rk_liv_{}", g.alnum(24)),
        ),
        whole(
            "stripe-key",
            format!("pk_live_{}", g.alnum(24)),
            format!("pk_live{}", g.alnum(24)),
        ),
        whole(
            "square-token",
            format!("sq0atp-{}", g.b64url(22)),
            "sq0atp-short".to_string(),
        ),
        whole(
            "shopify-token",
            format!("shpat_{}", g.hex(32)),
            format!("shpat_{}", g.hex(31)),
        ),
        whole(
            "payment-api-key",
            format!("shippo_live_{}", g.hex(40)),
            format!("shippo_live_{}", g.hex(8)),
        ),
        // Messaging and e-mail.
        whole(
            "slack-token",
            format!("xoxp-{}-{}-{}", g.digits(11), g.digits(12), g.alnum(32)),
            "xoxb-short".to_string(),
        ),
        whole(
            "slack-token",
            format!("xapp-1-{}-{}-{}", g.upper(11), g.digits(13), g.hex(64)),
            "xapp-".to_string(),
        ),
        {
            let path = format!("T{}/B{}/{}", g.upper(8), g.upper(10), g.alnum(24));
            case(
                "slack-webhook",
                format!("curl -X POST https://hooks.slack.com/services/{path} -d @msg.json"),
                "curl -X POST https://hooks.slack.com/services/[REDACTED:slack-webhook] -d @msg.json"
                    .to_string(),
                "see https://hooks.slack.com/services/ for help".to_string(),
            )
        },
        whole(
            "discord-bot-token",
            format!("M{}.{}.{}", g.b64url(25), g.b64url(6), g.b64url(38)),
            format!("M{}.{}.{}", g.b64url(25), g.b64url(5), g.b64url(38)),
        ),
        {
            let id = g.digits(18);
            case(
                "discord-webhook",
                format!(
                    "https://discord.com/api/webhooks/{id}/{}",
                    g.b64url(68)
                ),
                format!("https://discord.com/api/webhooks/{id}/[REDACTED:discord-webhook]"),
                format!("https://discord.com/api/webhooks/{id}"),
            )
        },
        whole(
            "telegram-bot-token",
            format!("{}:AA{}", g.digits(10), g.b64url(33)),
            format!("{}:AB{}", g.digits(10), g.b64url(33)),
        ),
        {
            let hook = format!(
                "{}@{}/IncomingWebhook/{}/{}",
                g.uuid(),
                g.uuid(),
                g.hex(32),
                g.uuid()
            );
            case(
                "teams-webhook",
                format!("https://acme.webhook.office.com/webhookb2/{hook}"),
                "https://acme.webhook.office.com/webhookb2/[REDACTED:teams-webhook]".to_string(),
                "https://acme.webhook.office.com/webhookb2/short".to_string(),
            )
        },
        whole(
            "twilio-api-key",
            format!("SK{}", g.hex(32)),
            format!("SK{}", g.hex(31)),
        ),
        whole(
            "sendgrid-api-key",
            format!("SG.{}.{}", g.b64url(22), g.b64url(43)),
            format!("SG.{}.{}", g.b64url(22), g.b64url(20)),
        ),
        whole(
            "mailgun-api-key",
            format!("key-{}", g.hex(32)),
            format!("key-{}", g.hex(31)),
        ),
        whole(
            "mailchimp-api-key",
            format!("{}-us6", g.hex(32)),
            format!("{}-eu6", g.hex(32)),
        ),
        whole(
            "sendinblue-api-key",
            format!("xkeysib-{}-{}", g.hex(64), g.alnum(16)),
            format!("xkeysib-{}", g.hex(10)),
        ),
        // Monitoring.
        whole(
            "sentry-token",
            format!("sntryu_{}", g.hex(64)),
            format!("sntryu_{}", g.hex(63)),
        ),
        whole(
            "grafana-token",
            format!("glsa_{}_{}", g.alnum(32), g.hex(8)),
            "glsa_short".to_string(),
        ),
        whole(
            "new-relic-key",
            format!("NRAK-{}", g.upper(27)),
            format!("NRAK-{}", g.upper(10)),
        ),
        // AI and SaaS.
        whole(
            "api-key",
            format!("sk-proj-{}", g.b64url(48)),
            "sk-spinner-double-bounce-container".to_string(),
        ),
        whole(
            "api-key",
            format!("sk-ant-api03-{}AA", g.b64url(93)),
            "sk-learn-is-a-typo-of-scikit-learn".to_string(),
        ),
        whole(
            "api-key",
            // DeepSeek's shape: 32 lower-case hex digits.
            format!("sk-{}", g.hex(32)),
            format!("sk-{}", g.hex(12)),
        ),
        whole(
            "ai-provider-key",
            format!("hf_{}", g.alnum(34)),
            "hf_hub_download".to_string(),
        ),
        whole(
            "ai-provider-key",
            format!("gsk_{}", g.alnum(52)),
            format!("gsk_{}", g.alnum(51)),
        ),
        whole(
            "saas-api-key",
            format!("lin_api_{}", g.alnum(40)),
            "lin_api_short".to_string(),
        ),
        whole(
            "facebook-access-token",
            format!("EAAC{}", g.alnum(100)),
            format!("EAAC{}", g.alnum(20)),
        ),
        // Generic shapes.
        whole(
            "jwt",
            format!(
                "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJ{}.{}",
                g.b64url(60),
                g.b64url(43)
            ),
            "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9".to_string(),
        ),
        {
            let pw = g.alnum(16);
            case(
                "url-password",
                format!("git clone https://deploy:{pw}@git.example.com/team/x.git"),
                "git clone https://deploy:[REDACTED:url-password]@git.example.com/team/x.git"
                    .to_string(),
                "git clone https://deploy@git.example.com/team/x.git and http://example.com:8080/a@b"
                    .to_string(),
            )
        },
        case(
            "url-password",
            "DATABASE_URL_RO postgres://app:p@ss:w0rd@db.internal:5432/app".to_string(),
            "DATABASE_URL_RO postgres://app:[REDACTED:url-password]@db.internal:5432/app"
                .to_string(),
            "ssh://git@github.com:22/org/repo.git".to_string(),
        ),
        {
            let token = format!("AbCdEf012345.{}", g.b64url(43));
            case(
                "tollgate-token",
                format!("my token is {token}."),
                "my token is [REDACTED:tollgate-token].".to_string(),
                "my token is AbCdEf012345.short.".to_string(),
            )
        },
        case(
            "authorization",
            format!("curl -H 'Authorization: Basic {}='", g.b64(23)),
            "curl -H 'Authorization: Basic [REDACTED:authorization]'".to_string(),
            "def authorization(request): ...".to_string(),
        ),
        case(
            "bearer",
            format!("use Bearer {}", g.alnum(24)),
            "use Bearer [REDACTED:bearer]".to_string(),
            "the bearer of bad news".to_string(),
        ),
        case(
            "secret-assignment",
            format!("STRIPE_WEBHOOK_SIGNING_SECRET={}", g.lower(20)),
            "STRIPE_WEBHOOK_SIGNING_SECRET=[REDACTED:secret-assignment]".to_string(),
            "let token = parse_token(input);".to_string(),
        ),
    ]
}

#[test]
fn rules_are_well_formed() {
    let mut ids = BTreeSet::new();
    for r in RULES {
        assert!(ids.insert(r.id), "two rules named {}", r.id);
        assert!(
            !r.description.is_empty()
                && r.id
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "{}",
            r.id
        );
        let re = regex::Regex::new(r.pattern)
            .unwrap_or_else(|e| panic!("rule {} does not compile: {e}", r.id));
        let has_s = re.capture_names().flatten().any(|n| n == "s");
        assert_eq!(
            has_s,
            r.mask == Mask::Group,
            "rule {}: a group named `s` exactly when it masks a group",
            r.id
        );
    }
    assert!(!ids.contains(tollgate_audit::redact_rules::SECRET_ENV));
}

#[test]
fn every_rule_has_a_case() {
    let covered: BTreeSet<&str> = cases().iter().map(|c| c.rule).collect();
    let missing: Vec<&str> = RULES
        .iter()
        .map(|r| r.id)
        .filter(|id| !covered.contains(id))
        .collect();
    assert!(missing.is_empty(), "rules without a case: {missing:?}");
    let unknown: Vec<&str> = covered
        .iter()
        .copied()
        .filter(|c| !RULES.iter().any(|r| r.id == *c))
        .collect();
    assert!(unknown.is_empty(), "cases for no rule: {unknown:?}");
}

#[test]
fn each_case_is_masked_by_its_rule_and_its_near_miss_is_left_alone() {
    let red = Redactor::new(vec!["a-host-secret-value".to_string()]);
    let mut failures = Vec::new();
    for c in cases() {
        let label = format!("[REDACTED:{}]", c.rule);
        assert!(c.want.contains(&label), "case of {}: {:?}", c.rule, c.want);
        let got = red.redact(&c.text);
        if got != c.want {
            failures.push(format!(
                "{}:\n  text: {:?}\n  want: {:?}\n  got:  {:?}",
                c.rule, c.text, c.want, got
            ));
        }
        if !red.contains_secret(&c.text) {
            failures.push(format!("{}: contains_secret is false", c.rule));
        }
        let near = red.redact(&c.near_miss);
        if near != c.near_miss || red.contains_secret(&c.near_miss) {
            failures.push(format!(
                "{} near miss:\n  text: {:?}\n  got:  {:?}",
                c.rule, c.near_miss, near
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn host_secret_values_still_win_and_rules_apply_around_them() {
    let red = Redactor::new(vec!["hunter2-but-longer".to_string()]);
    let mut g = Gen(7);
    let npm = format!("npm_{}", g.alnum(36));
    assert_eq!(
        red.redact(&format!("a hunter2-but-longer b {npm} c")),
        "a [REDACTED:secret-env] b [REDACTED:npm-token] c"
    );
}

#[test]
fn a_jwt_is_masked_whole_wherever_it_stands() {
    let red = Redactor::default();
    let mut g = Gen(11);
    let jwt = format!("eyJhbGciOiJSUzI1NiJ9.eyJ{}.{}", g.b64url(80), g.b64url(342));
    for (text, want) in [
        (format!("jwt={jwt}"), "jwt=[REDACTED:jwt]".to_string()),
        (
            format!("{{\"id_token\":\"{jwt}\"}}"),
            "{\"id_token\":\"[REDACTED:secret-assignment]\"}".to_string(),
        ),
        (
            format!("Cookie: session={jwt}; Path=/"),
            "Cookie: session=[REDACTED:jwt]; Path=/".to_string(),
        ),
    ] {
        let got = red.redact(&text);
        assert_eq!(got, want);
        assert!(
            !got.contains(&jwt[jwt.len() - 20..]),
            "signature left: {got}"
        );
    }
}
