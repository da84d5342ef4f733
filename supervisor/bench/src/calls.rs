//! `--only calls`: the per-call rows of the native supervisor (read_file
//! 4 KiB, write_file 4 KiB, OpenSession + CloseSession), each beside the
//! floor under it measured in the same run: the gRPC health Check on the
//! same socket and one `write(2)` + `fdatasync` on the audit filesystem
//! (docs/PERFORMANCE.md "How each row is measured").

use super::harness::{SupervisorProc, TempRoot, blocking};
use super::native;
use super::stats::{Row, Target, Unit, fmt_nanos};

/// The derived floor of a durable call: a health Check plus one fsync.
const FLOOR: &str = "calls.grpc_plus_fdatasync";
const FSYNC: &str = "base.write_fdatasync";
const READ: &str = "native.read_file_4k";

/// Runs the group; a measurement that fails becomes a FAILED row.
pub async fn run(sup: &SupervisorProc, root: &TempRoot, n: usize) -> Vec<Row> {
    let mut rows = Vec::new();
    let ws = match native::prepare_workspace(root) {
        Ok(ws) => ws,
        Err(e) => {
            return vec![Row::failed(
                READ,
                "calls workspace",
                Unit::Nanos,
                format!("{e:#}"),
            )];
        }
    };
    // On the audit directory's filesystem, as the inproc group's.
    let fsync = match root.subdir("calls") {
        Ok(dir) => blocking(move || Ok(super::inproc::write_fdatasync(&dir, n))).await,
        Err(e) => Err(e),
    };
    match fsync {
        Ok(r) => rows.push(r),
        Err(e) => rows.push(Row::failed(
            FSYNC,
            "write(2) + fdatasync",
            Unit::Nanos,
            format!("{e:#}"),
        )),
    }
    match health(sup, n).await {
        Ok(r) => rows.push(r),
        Err(e) => rows.push(Row::failed(
            native::HEALTH,
            "gRPC health Check on agent.sock (baseline)",
            Unit::Nanos,
            format!("{e:#}"),
        )),
    }
    match native::files(sup, &ws, n).await {
        Ok(r) => rows.extend(r),
        Err(e) => rows.push(Row::failed(
            READ,
            "read_file 4 KiB via gRPC",
            Unit::Nanos,
            format!("{e:#}"),
        )),
    }
    rows.push(native::open_close(sup, &ws, n).await.unwrap_or_else(|e| {
        Row::failed(
            "native.session_open_close",
            "OpenSession + CloseSession (no sandbox)",
            Unit::Nanos,
            format!("{e:#}"),
        )
    }));
    rows.extend(against_floor(&rows, n));
    rows
}

async fn health(sup: &SupervisorProc, n: usize) -> anyhow::Result<Row> {
    let ch = sup.agent_channel().await?;
    Ok(native::health_row(&native::health_check(&ch, n).await?))
}

/// The floor row (health Check + write + fdatasync, medians added) and
/// read_file against it (the ≤ 1.3× floor target of docs/PERFORMANCE.md
/// "Targets not met, and why").
fn against_floor(rows: &[Row], n: usize) -> Vec<Row> {
    let median = |id: &str| rows.iter().find(|r| r.id == id).and_then(|r| r.median);
    let (Some(h), Some(f)) = (median(native::HEALTH), median(FSYNC)) else {
        return Vec::new();
    };
    let floor = Row::value(
        FLOOR,
        "gRPC health Check + write(2) + fdatasync (floor, derived)",
        Unit::Nanos,
        h + f,
        n,
    )
    .with_note(format!(
        "the two medians of this run added: {} + {}",
        fmt_nanos(h),
        fmt_nanos(f)
    ));
    let Some(read) = rows.iter().find(|r| r.id == READ) else {
        return vec![floor];
    };
    let mut beside = read.clone();
    beside.id = "calls.read_file_4k_vs_floor".to_string();
    beside.name = "read_file 4 KiB via gRPC, against its floor".to_string();
    let beside = beside
        .with_baseline(FLOOR)
        .with_target(Target::RatioAtMost {
            factor: 1.3,
            issue: 31,
        });
    vec![floor, beside]
}
