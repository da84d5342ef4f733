//! The redaction rules, as data: one row per secret shape.
//!
//! Each rule has an id (the `<id>` of `[REDACTED:<id>]`), a description, a
//! regular expression, what it masks, and, for the few shapes that also
//! occur in ordinary text, a check on the match. The table covers the token
//! shapes of the widely used secret scanners' default rule sets (gitleaks,
//! trufflehog, GitHub secret scanning) that can be told by their own shape:
//! a vendor prefix, a fixed length, a fixed alphabet. Rules that need a
//! keyword nearby (`twitter … = <32 hex>`) are covered by the generic
//! `secret-assignment` rule when the name says secret, key, token or
//! password, and not otherwise (docs/THREAT_MODEL.md says so).
//!
//! Order matters only between rules that can match at the same position:
//! the earlier wins. A match that starts earlier always wins.
//!
//! Patterns use ASCII classes and `(?-u:\b)` so the whole table compiles to
//! one lazy DFA that scans a tool output once. A shape without a literal
//! prefix costs that scan on every byte (`secret-assignment`,
//! `tollgate-token` and `url-password` are worth it; MaxMind's
//! `…_mmk` keys, 30 % of the scan on their own, were not, and are left out). Every rule has a positive and
//! a near-miss negative case in `tests/audit/redaction_rules.rs`.

/// What part of a match is replaced by `[REDACTED:<id>]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mask {
    /// The whole match.
    Whole,
    /// The capture group named `s`; the rest of the match (a header name,
    /// `AccountKey=`, a URL's scheme, user and host) stays readable.
    Group,
}

/// An extra test on a match, for shapes that also occur in ordinary text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Every match is a secret.
    None,
    /// `sk-…`: a vendor prefix (`sk-ant-`, `sk-proj-`, `sk-svcacct-`,
    /// `sk-admin-`), or a random-looking body (a digit and an upper-case
    /// letter, or 32+ hex digits), so `sk-spinner-double-bounce` in CSS is
    /// left alone.
    RandomLooking,
    /// `name = value`: the value is not a number, and is quoted, or assigned
    /// to an UPPER_CASE name (env files), or mixes letters and digits; so
    /// `token = parse_token(input)` is left alone.
    SecretAssignment,
}

/// One secret shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Stable id: the kind shown in `[REDACTED:<id>]`.
    pub id: &'static str,
    pub description: &'static str,
    /// A regular expression (regex crate syntax). With [`Mask::Group`] it
    /// has a group named `s`; [`Check::SecretAssignment`] also reads the
    /// groups `name` and `quote`.
    pub pattern: &'static str,
    pub mask: Mask,
    pub check: Check,
}

const fn whole(id: &'static str, description: &'static str, pattern: &'static str) -> Rule {
    Rule {
        id,
        description,
        pattern,
        mask: Mask::Whole,
        check: Check::None,
    }
}

const fn group(id: &'static str, description: &'static str, pattern: &'static str) -> Rule {
    Rule {
        id,
        description,
        pattern,
        mask: Mask::Group,
        check: Check::None,
    }
}

/// The id of the host secret values (the literal values of the host's
/// secret-named environment variables); not a row of [`RULES`].
pub const SECRET_ENV: &str = "secret-env";

/// Every built-in rule, in order of preference.
pub static RULES: &[Rule] = &[
    // Key material.
    whole(
        "private-key",
        "PEM or PGP private-key block (RSA, EC, DSA, OpenSSH, PKCS#8, encrypted), to its END line or, when the text was cut, to the end of the text",
        r"-----BEGIN[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----(?:[\s\S]*?-----END[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?-----|[\s\S]*)",
    ),
    group(
        "putty-private-key",
        "the Private-Lines of a PuTTY .ppk key file",
        r"Private-Lines: [0-9]{1,3}\r?\n(?P<s>[A-Za-z0-9+/=]{1,80}(?:\r?\n[A-Za-z0-9+/=]{1,80})*)(?:\r?\n|$)",
    ),
    whole(
        "age-secret-key",
        "age encryption secret key (AGE-SECRET-KEY-1…)",
        r"AGE-SECRET-KEY-1[0-9A-Z]{58}",
    ),
    // Cloud providers.
    whole(
        "aws-access-key",
        "AWS access key id (AKIA…, ASIA…, ABIA…, ACCA…, A3T…) + 16 upper-case alphanumerics",
        r"(?-u:\b)(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}(?-u:\b)",
    ),
    whole(
        "google-api-key",
        "Google / GCP / Firebase API key (AIza + 35)",
        r"(?-u:\b)AIza[0-9A-Za-z_\-]{35}",
    ),
    whole(
        "google-oauth",
        "Google OAuth client secret (GOCSPX-…) or access token (ya29.…)",
        r"(?-u:\b)(?:GOCSPX-[0-9A-Za-z_\-]{28}|ya29\.[0-9A-Za-z_\-]{30,})",
    ),
    group(
        "azure-storage-key",
        "Azure storage account key or Service Bus / Event Hubs shared access key in a connection string (AccountKey=…, SharedAccessKey=…)",
        r"(?i-u:AccountKey|SharedAccessKey)[ \t]*=[ \t]*(?P<s>[A-Za-z0-9+/]{40,100}={0,2})",
    ),
    whole(
        "azure-ad-client-secret",
        "Microsoft Entra ID (Azure AD) client secret (…8Q~…)",
        r"(?-u:\b)[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.\-]{31,34}",
    ),
    group(
        "url-signature",
        "the signature of a signed URL: Azure SAS (sig=), S3 and GCS presigned (X-Amz-Signature=, X-Goog-Signature=)",
        r"[?&](?:sig|(?i-u:X-Amz-Signature|X-Goog-Signature))=(?P<s>[A-Za-z0-9%+/_\-]{32,}(?:=|%3[Dd]){0,2})",
    ),
    whole(
        "alibaba-access-key",
        "Alibaba Cloud AccessKey id (LTAI…)",
        r"(?-u:\b)LTAI[A-Za-z0-9]{20}(?-u:\b)",
    ),
    whole(
        "digitalocean-token",
        "DigitalOcean personal access, OAuth or refresh token (dop_v1_, doo_v1_, dor_v1_)",
        r"(?-u:\b)do[opr]_v1_[a-f0-9]{64}",
    ),
    whole(
        "heroku-api-key",
        "Heroku API key (HRKU-AA…)",
        r"(?-u:\b)HRKU-AA[0-9A-Za-z_\-]{58}",
    ),
    whole(
        "databricks-token",
        "Databricks personal access token (dapi + 32 hex)",
        r"(?-u:\b)dapi[a-f0-9]{32}(?:-[0-9])?(?-u:\b)",
    ),
    whole(
        "cloudflare-origin-ca-key",
        "Cloudflare Origin CA key (v1.0-…)",
        r"(?-u:\b)v1\.0-[a-f0-9]{24}-[a-f0-9]{146}",
    ),
    whole(
        "dynatrace-token",
        "Dynatrace API token (dt0c01.…)",
        r"(?-u:\b)dt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}",
    ),
    whole(
        "terraform-cloud-token",
        "HashiCorp Terraform Cloud / Enterprise API token (….atlasv1.…)",
        r"(?-u:\b)[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{60,70}",
    ),
    whole(
        "vault-token",
        "HashiCorp Vault service, batch or recovery token (hvs., hvb., hvr.)",
        r"(?-u:\b)hv[sbr]\.[A-Za-z0-9_\-]{24,}",
    ),
    whole(
        "pulumi-token",
        "Pulumi access token (pul-…)",
        r"(?-u:\b)pul-[a-f0-9]{40}(?-u:\b)",
    ),
    whole(
        "openshift-token",
        "OpenShift user token (sha256~…)",
        r"(?-u:\b)sha256~[A-Za-z0-9_\-]{43}",
    ),
    whole(
        "flyio-token",
        "Fly.io access token (fo1_…, fm1a_…, fm1r_…, fm2_…)",
        r"(?-u:\b)(?:fo1_[A-Za-z0-9_\-]{43}|fm(?:1[ar]|2)_[A-Za-z0-9+/]{64,}={0,3})",
    ),
    // Source hosting, CI and package registries.
    whole(
        "github-token",
        "GitHub token: personal (ghp_), OAuth (gho_), user-to-server (ghu_), server-to-server (ghs_), refresh (ghr_), fine-grained (github_pat_)",
        r"(?-u:\b)(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})",
    ),
    whole(
        "gitlab-token",
        "GitLab token: personal (glpat-), OAuth app secret (gloas-), deploy (gldt-), runner (glrt-), CI job (glcbt-), pipeline trigger (glptt-), feed (glft-), mail (glimt-), agent (glagent-), SCIM (glsoat-), feature flags (glffct-), runner registration (GR1348941…)",
        r"(?-u:\b)(?:gl(?:pat|oas|dt|rt|rtr|cbt|ptt|ft|imt|agent|soat|ffct|sst|wt)-[0-9A-Za-z_.\-]{20,}|GR1348941[0-9A-Za-z_\-]{20,})",
    ),
    whole(
        "atlassian-api-token",
        "Atlassian (Jira, Confluence, Bitbucket) API token (ATATT3…, ATCTT3…, ATBB…)",
        r"(?-u:\b)(?:AT[AC]TT3[A-Za-z0-9_\-=]{60,}|ATBB[A-Za-z0-9]{32,})",
    ),
    whole(
        "npm-token",
        "npm access token (npm_ + 36)",
        r"(?-u:\b)npm_[A-Za-z0-9]{36}(?-u:\b)",
    ),
    whole(
        "pypi-token",
        "PyPI / TestPyPI upload token (pypi-AgE…)",
        r"(?-u:\b)pypi-AgE[A-Za-z0-9_\-]{50,}",
    ),
    whole(
        "rubygems-token",
        "RubyGems API key (rubygems_ + 48 hex)",
        r"(?-u:\b)rubygems_[a-f0-9]{48}(?-u:\b)",
    ),
    whole(
        "clojars-token",
        "Clojars deploy token (CLOJARS_…)",
        r"(?-u:\b)CLOJARS_[a-z0-9]{60}(?-u:\b)",
    ),
    whole(
        "docker-hub-token",
        "Docker Hub personal or organisation access token (dckr_pat_, dckr_oat_)",
        r"(?-u:\b)dckr_(?:pat|oat)_[A-Za-z0-9_\-]{27,}",
    ),
    whole(
        "artifactory-token",
        "JFrog Artifactory API key (AKCp…) or reference token (cmVmd…)",
        r"(?-u:\b)(?:AKCp[A-Za-z0-9]{69}|cmVmd[A-Za-z0-9]{59})(?-u:\b)",
    ),
    whole(
        "postman-api-key",
        "Postman API key (PMAK-…)",
        r"(?-u:\b)PMAK-[a-f0-9]{24}-[a-f0-9]{34}(?-u:\b)",
    ),
    whole(
        "buildkite-token",
        "Buildkite user access token (bkua_…)",
        r"(?-u:\b)bkua_[a-f0-9]{40}(?-u:\b)",
    ),
    whole(
        "doppler-token",
        "Doppler token (dp.pt., dp.st., dp.sa., dp.ct., dp.scim., dp.audit.)",
        r"(?-u:\b)dp\.(?:pt|st|sa|ct|scim|audit)\.[A-Za-z0-9]{40,}",
    ),
    whole(
        "sourcegraph-token",
        "Sourcegraph access token (sgp_…)",
        r"(?-u:\b)sgp_(?:[a-fA-F0-9]{16}_|local_)?[a-fA-F0-9]{40}(?-u:\b)",
    ),
    whole(
        "hosting-platform-token",
        "hosting and database platforms: Supabase (sbp_), Netlify (nfp_), PlanetScale (pscale_tkn_, pscale_oauth_, pscale_pw_), Prefect (pnu_), Scalingo (tk-us-)",
        r"(?-u:\b)(?:sbp_[a-f0-9]{40}|nfp_[A-Za-z0-9]{36}|pscale_(?:tkn|oauth|pw)_[A-Za-z0-9_=.\-]{32,64}|pnu_[A-Za-z0-9]{36}|tk-us-[A-Za-z0-9_\-]{48})",
    ),
    // Payments and commerce.
    whole(
        "stripe-key",
        "Stripe secret, restricted or publishable key (sk_, rk_, pk_ + live_/test_/prod_) or webhook signing secret (whsec_)",
        r"(?-u:\b)(?:(?:sk|rk|pk)_(?:live|test|prod)_[0-9A-Za-z]{10,247}|whsec_[A-Za-z0-9+/=]{32,})",
    ),
    whole(
        "square-token",
        "Square access token or OAuth secret (sq0atp-, sq0csp-, EAAA…)",
        r"(?-u:\b)(?:sq0atp-[0-9A-Za-z_\-]{22}|sq0csp-[0-9A-Za-z_\-]{43}|EAAA[0-9A-Za-z_\-]{60})",
    ),
    whole(
        "shopify-token",
        "Shopify access, custom app, private app token or shared secret (shpat_, shpca_, shppa_, shpss_)",
        r"(?-u:\b)shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}(?-u:\b)",
    ),
    whole(
        "payment-api-key",
        "payments and shipping: Flutterwave (FLWSECK_, FLWPUBK_), Shippo (shippo_live_, shippo_test_), Duffel (duffel_live_, duffel_test_), EasyPost (EZAK, EZTK)",
        r"(?-u:\b)(?:FLW(?:SECK|PUBK)_TEST-[a-hA-H0-9]{12,32}(?:-X)?|shippo_(?:live|test)_[a-fA-F0-9]{40}|duffel_(?:test|live)_[A-Za-z0-9_\-=]{43}|EZ[AT]K[A-Za-z0-9]{54})",
    ),
    // Messaging and e-mail.
    whole(
        "slack-token",
        "Slack bot, user, app-level, workspace, legacy and configuration tokens (xoxb-, xoxp-, xoxa-, xoxr-, xoxs-, xoxo-, xoxe-, xoxe.xoxp-, xapp-)",
        r"(?-u:\b)(?:xox[abposre]-|xoxe\.xox[bp]-|xapp-)[A-Za-z0-9\-]{10,}",
    ),
    group(
        "slack-webhook",
        "Slack incoming webhook or workflow trigger URL (hooks.slack.com/services/…)",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<s>[A-Za-z0-9+/_\-]{20,})",
    ),
    whole(
        "discord-bot-token",
        "Discord bot token (base64 user id . timestamp . HMAC)",
        r"(?-u:\b)[MNO][A-Za-z0-9_\-]{23,27}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,40}",
    ),
    group(
        "discord-webhook",
        "Discord webhook URL (discord.com/api/webhooks/<id>/<token>)",
        r"discord(?:app)?\.com/api/webhooks/[0-9]{17,20}/(?P<s>[A-Za-z0-9_\-]{60,68})",
    ),
    whole(
        "telegram-bot-token",
        "Telegram bot token (<bot id>:AA…)",
        r"(?-u:\b)[0-9]{8,10}:AA[0-9A-Za-z_\-]{33}",
    ),
    group(
        "teams-webhook",
        "Microsoft Teams incoming webhook URL (…webhook.office.com/webhookb2/…)",
        r"webhook\.office\.com/webhookb2/(?P<s>[A-Za-z0-9@/\-]{60,})",
    ),
    whole(
        "twilio-api-key",
        "Twilio API key SID (SK + 32 hex)",
        r"(?-u:\b)SK[0-9a-fA-F]{32}(?-u:\b)",
    ),
    whole(
        "sendgrid-api-key",
        "SendGrid API key (SG.<22>.<43>)",
        r"(?-u:\b)SG\.[0-9A-Za-z_\-]{22}\.[0-9A-Za-z_\-]{43}",
    ),
    whole(
        "mailgun-api-key",
        "Mailgun private API key (key- + 32 hex)",
        r"(?-u:\b)key-[0-9a-f]{32}(?-u:\b)",
    ),
    whole(
        "mailchimp-api-key",
        "Mailchimp API key (32 hex + -us<datacenter>)",
        r"(?-u:\b)[0-9a-f]{32}-us[0-9]{1,2}(?-u:\b)",
    ),
    whole(
        "sendinblue-api-key",
        "Brevo (Sendinblue) API key (xkeysib-…)",
        r"(?-u:\b)xkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}(?-u:\b)",
    ),
    // Monitoring and observability.
    whole(
        "sentry-token",
        "Sentry organisation or user auth token (sntrys_, sntryu_)",
        r"(?-u:\b)(?:sntrys_eyJ[A-Za-z0-9+/=_]{60,}|sntryu_[a-f0-9]{64})",
    ),
    whole(
        "grafana-token",
        "Grafana Cloud API token (glc_…) or service account token (glsa_…)",
        r"(?-u:\b)(?:glc_[A-Za-z0-9+/]{32,}={0,2}|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8})",
    ),
    whole(
        "new-relic-key",
        "New Relic user API, insert or browser key (NRAK-, NRII-, NRJS-)",
        r"(?-u:\b)NR(?:AK-[A-Z0-9]{27}|II-[A-Za-z0-9\-]{32}|JS-[a-f0-9]{19})",
    ),
    // AI and SaaS APIs.
    Rule {
        id: "api-key",
        description: "OpenAI (sk-…, sk-proj-…, sk-svcacct-…, sk-admin-…), Anthropic (sk-ant-…), DeepSeek and other sk- keys: 20+ chars after sk-, random-looking unless a vendor prefix",
        pattern: r"(?-u:\b)sk-[A-Za-z0-9_\-]{20,}",
        mask: Mask::Whole,
        check: Check::RandomLooking,
    },
    whole(
        "ai-provider-key",
        "AI provider API keys: Hugging Face (hf_, api_org_), Groq (gsk_), xAI (xai-), Perplexity (pplx-), Replicate (r8_)",
        r"(?-u:\b)(?:(?:hf_|api_org_)[A-Za-z0-9]{34,}|gsk_[A-Za-z0-9]{52}|xai-[A-Za-z0-9]{80}|pplx-[A-Za-z0-9]{48}|r8_[A-Za-z0-9]{37})(?-u:\b)",
    ),
    whole(
        "saas-api-key",
        "SaaS API keys with a vendor prefix: Linear (lin_api_), Notion (ntn_), Readme (rdme_), Infracost (ico-), Typeform (tfp_), Frame.io (fio-u-), Adobe (p8e-), 1Password service accounts (ops_eyJ), Octopus Deploy (API-…), Settlemint (sm_aat_, sm_pat_, sm_sat_)",
        r"(?-u:\b)(?:lin_api_[A-Za-z0-9]{40}|ntn_[0-9]{11}[A-Za-z0-9]{35}|rdme_[a-z0-9]{70}|ico-[A-Za-z0-9]{32}|tfp_[A-Za-z0-9_.=\-]{59}|fio-u-[A-Za-z0-9_=\-]{64}|p8e-[A-Za-z0-9]{32}|ops_eyJ[A-Za-z0-9+/]{64,}={0,3}|API-[A-Z0-9]{26}|sm_(?:aat|pat|sat)_[A-Za-z0-9]{16})(?-u:\b)",
    ),
    whole(
        "facebook-access-token",
        "Facebook / Meta page or user access token (EAAC…, EAAM…)",
        r"(?-u:\b)EAA[MC][A-Za-z0-9]{64,}",
    ),
    // Generic shapes.
    whole(
        "jwt",
        "JSON Web Token, all three parts (header.payload.signature)",
        r"(?-u:\b)eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*",
    ),
    group(
        "url-password",
        "the password in a URL's user info (scheme://user:password@host), up to the last @ before the host",
        r"(?-u:\b)[A-Za-z][A-Za-z0-9+.\-]{1,15}://[^\s:/@]*:(?P<s>[^\s/]+)@[^\s/@]",
    ),
    whole(
        "tollgate-token",
        "tollgate's own session and sandbox tokens (12 id chars, `.`, (`sbx.`,) 43 url-safe chars)",
        r"[A-Za-z0-9_\-]{12}\.(?:sbx\.)?[A-Za-z0-9_\-]{43}",
    ),
    group(
        "authorization",
        "the value (8+ chars) after `authorization:` / `Authorization=` (its Basic/Bearer/Token/Digest word kept)",
        r#"(?-u:\b)(?i-u:authorization)["']?[ \t]*[:=][ \t]*["']?(?:(?i-u:basic|bearer|token|digest)[ \t]+)?(?P<s>[^\s"',;(){}\[\]<>]{8,})"#,
    ),
    group(
        "bearer",
        "the token (8+ chars) after `Bearer `",
        r"(?-u:\b)(?i-u:bearer)[ \t]+(?P<s>[A-Za-z0-9._~+/\-]{8,}=*)",
    ),
    Rule {
        id: "secret-assignment",
        description: "the value in NAME=value / name: value / \"name\": \"value\" when NAME contains secret, password, passwd, token, api_key, apikey, private_key, access_key or credential, and the value (8+ chars, no spaces, quotes, `;` `,` or brackets) is not all digits and is quoted, or assigned to an UPPER_CASE name, or mixes letters and digits",
        pattern: r#"(?-u:\b)(?P<name>[A-Za-z0-9_]*(?i-u:secret|password|passwd|token|api_?key|private_?key|access_?key|credential)[A-Za-z0-9_]*)["']?[ \t]*[:=][ \t]*(?P<quote>["']?)(?P<s>[^\s"',;(){}\[\]<>]{8,})"#,
        mask: Mask::Group,
        check: Check::SecretAssignment,
    },
];
