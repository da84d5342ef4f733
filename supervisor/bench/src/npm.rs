//! `npm ci` from a warm package cache inside the native sandbox beside the
//! same on the host (docs/PERFORMANCE.md, "The development environment"),
//! without any network: a lock file of [`DEPS`] packages made here as
//! tarballs, put into each side's cache with `npm cache add`, then
//! installed with `npm ci --offline` (npm finds each by its integrity in
//! the cache; the lock file's `resolved` names a host that cannot exist).
//! Inside, the cache is the owner's package cache (`npm_config_cache`);
//! on the host, a directory of its own. Rounds alternate the two sides;
//! each install is timed where it runs ($EPOCHREALTIME around it).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::harness::{AgentSession, SupervisorProc, run_checked, which};
use super::stats::{Row, Target, Unit};
use super::variants::Ctx;

pub const HOST: &str = "devenv.npm_ci_host";
pub const SANDBOX: &str = "devenv.npm_ci_sandbox";
const NAME: &str =
    "`npm ci --offline` of a small lock file, warm per-owner cache, inside the native sandbox";

/// The packages in the lock file.
pub const DEPS: usize = 50;

/// Makes `DEPS` package tarballs under `deps/`, and `package.json` and
/// `package-lock.json` naming them with their integrity (node computes it).
fn project_script() -> String {
    format!(
        r#"set -e
rm -rf deps node_modules && mkdir -p deps/src
entries=""; wants=""
for i in $(seq 1 {DEPS}); do
  n=tg-bench-dep-$i; d=deps/src/$n/package
  mkdir -p $d
  printf '{{"name":"%s","version":"1.0.0","main":"index.js"}}' $n > $d/package.json
  echo "module.exports = $i;" > $d/index.js
  tar -C deps/src/$n -czf deps/$n-1.0.0.tgz package
  sri=$(node -e 'const c=require("crypto");process.stdout.write("sha512-"+c.createHash("sha512").update(require("fs").readFileSync(process.argv[1])).digest("base64"))' deps/$n-1.0.0.tgz)
  entries="$entries,\"node_modules/$n\":{{\"version\":\"1.0.0\",\"resolved\":\"http://tollgate-bench.invalid/$n/-/$n-1.0.0.tgz\",\"integrity\":\"$sri\"}}"
  wants="$wants${{wants:+,}}\"$n\":\"1.0.0\""
done
printf '{{"name":"bench-npm","version":"1.0.0","dependencies":{{%s}}}}' "$wants" > package.json
printf '{{"name":"bench-npm","version":"1.0.0","lockfileVersion":3,"requires":true,"packages":{{"":{{"name":"bench-npm","version":"1.0.0","dependencies":{{%s}}}}%s}}}}' "$wants" "$entries" > package-lock.json
"#
    )
}

/// Puts the tarballs into the cache `npm_config_cache` names.
const WARM: &str = "npm cache add ./deps/*.tgz --loglevel=error >/dev/null && npm ci --offline --no-audit --no-fund --loglevel=error >/dev/null && echo warm";

/// One timed install: its start and end ($EPOCHREALTIME), then the count
/// of packages installed.
const TIMED: &str = "a=$EPOCHREALTIME; npm ci --offline --no-audit --no-fund --loglevel=error >/dev/null || exit 1; b=$EPOCHREALTIME; echo \"$a $b $(ls node_modules | grep -c tg-bench-dep)\"";

/// The duration [`TIMED`] printed, checked to have installed every package.
fn parse_timed(out: &str) -> anyhow::Result<Duration> {
    let v: Vec<&str> = out.split_whitespace().collect();
    let [a, b, n] = v[..] else {
        anyhow::bail!("npm ci printed {out:?}");
    };
    let (a, b): (f64, f64) = (a.parse()?, b.parse()?);
    if n.parse::<usize>()? != DEPS {
        anyhow::bail!("npm ci installed {n} of {DEPS} packages");
    }
    Ok(Duration::from_secs_f64((b - a).max(0.0)))
}

fn host_bash(dir: &Path, cache: &Path, script: &str) -> anyhow::Result<String> {
    run_checked(
        Command::new("bash")
            .args(["-c", script])
            .current_dir(dir)
            .env("npm_config_cache", cache),
    )
}

pub async fn run(ctx: &Ctx<'_>, main: &SupervisorProc) -> Vec<Row> {
    if which("npm").is_none() || which("node").is_none() {
        let why = "npm and node are not installed on this host; install them (Debian: nodejs, npm)";
        return vec![
            Row::missing(
                HOST,
                "`npm ci --offline` on the host (baseline)",
                Unit::Nanos,
                why,
            ),
            Row::missing(SANDBOX, NAME, Unit::Nanos, why),
        ];
    }
    match measure(ctx, main).await {
        Ok(rows) => rows,
        Err(e) => vec![Row::failed(SANDBOX, NAME, Unit::Nanos, format!("{e:#}"))],
    }
}

async fn measure(ctx: &Ctx<'_>, main: &SupervisorProc) -> anyhow::Result<Vec<Row>> {
    let host_dir = ctx.workspace("npm-host")?;
    let host_cache = ctx.workspace("npm-host-cache")?;
    let ws = ctx.workspace("ws-npm")?;
    host_bash(&host_dir, &host_cache, &project_script())?;
    host_bash(&ws, &host_cache, &project_script())?;
    host_bash(&host_dir, &host_cache, WARM)?;
    let mut s = AgentSession::open(
        main.agent_channel().await?,
        &ws,
        "dangerouslySkipPermissions",
    )
    .await?;
    let args = |command: &str| serde_json::json!({ "command": command }).to_string();
    let warm = s.call("run_bash", &args(WARM)).await?;
    if !warm.output.contains("warm") {
        anyhow::bail!("warming the sandbox's cache: {:?}", warm.output);
    }
    let n = ctx.samples.clamp(3, 10);
    let (mut inside, mut host) = (Vec::new(), Vec::new());
    for i in 0..n {
        for sandbox in if i % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        } {
            if sandbox {
                let r = s.call("run_bash", &args(TIMED)).await?;
                inside.push(parse_timed(&r.output)?);
            } else {
                host.push(parse_timed(&host_bash(&host_dir, &host_cache, TIMED)?)?);
            }
        }
    }
    s.close().await?;
    Ok(vec![
        Row::latency(HOST, "`npm ci --offline` of the same lock file on the host, warm cache (baseline)", &host),
        Row::latency(SANDBOX, NAME, &inside)
            .with_baseline(HOST)
            .with_target(Target::RatioAtMost { factor: 1.5, issue: 34 })
            .with_note(format!("{DEPS} local tarball packages put into each side's cache with npm cache add, installed with --offline (no network); alternating rounds, each install timed where it ran")),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_install_is_its_two_times_apart_and_must_install_every_package() {
        let d = parse_timed(&format!("100.25 101.75 {DEPS}\n")).unwrap();
        assert_eq!(d, Duration::from_millis(1500));
        assert!(parse_timed("100.25 101.75 3\n").is_err());
        assert!(parse_timed("npm ERR! offline\n").is_err());
    }

    /// The project builds and installs offline on this host, when npm is here.
    #[test]
    fn the_project_installs_offline_from_a_warm_cache() {
        if which("npm").is_none() || which("node").is_none() {
            // CI installs node and npm and sets this: missing there is a failure.
            assert!(
                std::env::var_os("TOLLGATE_REQUIRE_CLIENTS").is_none(),
                "TOLLGATE_REQUIRE_CLIENTS is set and npm or node is missing"
            );
            eprintln!("skipped: no npm on this host");
            return;
        }
        let d = std::env::temp_dir().join(format!("tollgate-bench-npm-{}", std::process::id()));
        let (dir, cache) = (d.join("p"), d.join("c"));
        std::fs::create_dir_all(&dir).unwrap();
        host_bash(&dir, &cache, &project_script()).unwrap();
        host_bash(&dir, &cache, WARM).unwrap();
        let t = parse_timed(&host_bash(&dir, &cache, TIMED).unwrap()).unwrap();
        assert!(t > Duration::ZERO);
        let _ = std::fs::remove_dir_all(&d);
    }
}
