//! The console's benchmarks and reports: `GET|POST /api/bench` (a
//! `uraid suite` on a target that holds no live data, or `uraid bench` of
//! the served array, read-only unless it is empty and the request
//! confirms; one at a time), `GET /api/reports` and
//! `GET /reports/DIR/FILE` (the reports kept under `--reports`). Every
//! route needs the console's access token (see `console`).

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::console::{authorized, may_use_all, refused, token_ok, S};
use super::proto::{ErrorBody, Reply};

/// A benchmark (`uraid suite`) started from the console.
pub(crate) struct BenchRun {
    /// What it measures.
    pub target: String,
    /// Its report's directory name under `reports`.
    pub dir: String,
    /// When it started.
    pub started: std::time::Instant,
    /// Its exit, once it ended: success, and the last lines it printed.
    pub done: Arc<Mutex<Option<bool>>>,
}

/// A name that is one plain path component (no `/`, no leading dot).
fn plain(name: &str) -> bool {
    !name.is_empty() && !name.starts_with('.') && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// The reports kept: `[{"name", "report", "unix_s"}]`, newest first.
pub(super) async fn reports(State(src): S, h: HeaderMap) -> Response {
    if !authorized(&src, &h) {
        return refused();
    }
    let mut list: Vec<(u64, String)> = std::fs::read_dir(&src.reports)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.path().join("report.html").is_file())
                .filter_map(|e| {
                    let name = e.file_name().to_str()?.to_string();
                    let t = e.metadata().ok()?.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs();
                    plain(&name).then_some((t, name))
                })
                .collect()
        })
        .unwrap_or_default();
    list.sort_by(|a, b| b.cmp(a));
    let v: Vec<serde_json::Value> =
        list.into_iter().map(|(t, n)| serde_json::json!({"name": n, "report": format!("/reports/{n}/report.html"), "unix_s": t})).collect();
    axum::Json(v).into_response()
}

/// A file of a kept report (the HTML, its charts, results.json).
pub(super) async fn report_file(State(src): S, axum::extract::Path((dir, file)): axum::extract::Path<(String, String)>, h: HeaderMap) -> Response {
    if !authorized(&src, &h) {
        return refused();
    }
    if !plain(&dir) || !plain(&file) {
        return StatusCode::NOT_FOUND.into_response();
    }
    let kind = match file.rsplit('.').next() {
        Some("html") => "text/html; charset=utf-8",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        Some("json") => "application/json",
        Some("txt") => "text/plain; charset=utf-8",
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    match std::fs::read(src.reports.join(&dir).join(&file)) {
        Ok(b) => ([(header::CONTENT_TYPE, kind)], b).into_response(),
        Err(_) => StatusCode::NOT_FOUND.into_response(),
    }
}

/// The benchmark started from the console: target, seconds, whether it
/// ended and how, the last lines of its log, its report once written.
pub(super) async fn bench_state(State(src): S, h: HeaderMap) -> Response {
    if !authorized(&src, &h) {
        return refused();
    }
    let g = src.bench.lock().unwrap_or_else(|p| p.into_inner());
    let v = match &*g {
        None => serde_json::Value::Null,
        Some(b) => {
            let dir = src.reports.join(&b.dir);
            let log = std::fs::read_to_string(dir.join("log.txt")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(6).collect::<Vec<_>>().into_iter().rev().collect();
            let done = *b.done.lock().unwrap_or_else(|p| p.into_inner());
            serde_json::json!({
                "target": b.target, "dir": b.dir, "seconds": b.started.elapsed().as_secs_f64(),
                "running": done.is_none(), "ok": done, "log": tail,
                "report": dir.join("report.html").is_file().then(|| format!("/reports/{}/report.html", b.dir)),
            })
        }
    };
    axum::Json(v).into_response()
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct BenchRequest {
    /// `mem:SIZE[,...]` or a device or file that holds nothing.
    target: String,
    /// Test sets (`uraid suite --sets`), default cdm.
    #[serde(default)]
    sets: Option<String>,
    /// Timed runs per test (1 to 5), default 1.
    #[serde(default)]
    runs: Option<u32>,
    /// Seconds per run (1 to 10), default 2.
    #[serde(default)]
    time: Option<u32>,
    /// With the served array as the target: run the write tests too. Only
    /// taken when the array is empty (its test area reads as zeros);
    /// without it, the served array is benchmarked read-only.
    #[serde(default)]
    confirm: bool,
}

/// The test area of a benchmark started from the console (`--size`), bytes.
const BENCH_AREA: u64 = 256 << 20;

/// Whether the first [`BENCH_AREA`] bytes of the export at `uri` (or all
/// of it when smaller) read as zeros: nothing was ever written where a
/// benchmark would write. Errors: as reading through the NBD client.
fn export_area_is_empty(uri: &str) -> uraid_core::Result<bool> {
    use uraid_core::{BlockDevice, BlockQueue};
    let dev = uraid_nbd::client::NbdDevice::connect(&uri.parse()?)?;
    let end = BENCH_AREA.min(dev.capacity());
    let mut q = dev.open_queue(1)?;
    let mut at = 0;
    while at < end {
        let n = (1u64 << 20).min(end - at) as usize;
        if q.read_at(at, n)?.iter().any(|&b| b != 0) {
            return Ok(false);
        }
        at += n as u64;
    }
    Ok(true)
}

/// Starts `uraid suite` on a target that holds no live data: a `mem:`
/// drive, or a block device free by `create`'s checks, or a file under
/// `--console-files-dir` (see `console::may_use`), never this array's members;
/// or `uraid bench` on the served array itself (its name or its export's
/// URI): read-only, unless `confirm` and its test area reads as zeros.
/// One at a time; the report is kept under `reports`.
pub(super) async fn bench_start(State(src): S, h: HeaderMap, body: String) -> Response {
    if !authorized(&src, &h) {
        return refused();
    }
    if !h.get("x-uraid-token").and_then(|v| v.to_str().ok()).is_some_and(|t| token_ok(&src, t)) {
        return (StatusCode::FORBIDDEN, axum::Json(Reply::failed(ErrorBody::new("Protocol", "the X-Uraid-Token header is missing or wrong")))).into_response();
    }
    let fail = |kind: &str, msg: String| axum::Json(Reply::failed(ErrorBody::new(kind, msg))).into_response();
    let req: BenchRequest = match serde_json::from_str(&body) {
        Ok(r) => r,
        Err(e) => return fail("Protocol", format!("not a valid benchmark request: {e}")),
    };
    let (runs, time) = (req.runs.unwrap_or(1), req.time.unwrap_or(2));
    if !(1..=5).contains(&runs) || !(1..=10).contains(&time) {
        return fail("InvalidInput", "runs must be 1 to 5 and time 1 to 10 seconds".into());
    }
    let sets = req.sets.unwrap_or_else(|| "cdm".into());
    if !sets.split(',').all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')) {
        return fail("InvalidInput", format!("'{sets}' is not a list of test sets (cdm, nvme, peak, atto, ...)"));
    }
    let stamp = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    // Local time in ISO 8601's basic form (a plain path component): bench-20261127T001503.
    let dir_name = format!("bench-{}", &crate::common::local_iso8601(stamp).replace([':', '-'], "")[..15]);
    let dir = src.reports.join(&dir_name);
    let (runs, time) = (runs.to_string(), time.to_string());
    let size = format!("{}M", BENCH_AREA >> 20);
    let common = ["--quiet", "--runs", &runs, "--time", &time, "--warmup", "1", "--size", &size];
    let args: Vec<String> = if req.target == src.array || req.target == src.export_uri {
        let uri = src.export_uri.clone();
        let write = if req.confirm {
            match tokio::task::spawn_blocking(move || export_area_is_empty(&uri)).await {
                Ok(Ok(true)) => true,
                Ok(Ok(false)) => {
                    return fail(
                        "WouldDestroy",
                        format!(
                            "array '{}' holds data in its first {size} (the benchmark's test area): a write benchmark \
                             would destroy it. Nothing was started; leave out the confirmation to run the read-only tests",
                            src.array
                        ),
                    )
                }
                Ok(Err(e)) => return fail("Io", format!("cannot read array '{}' through its export: {e}", src.array)),
                Err(_) => return fail("Interrupted", "the check of the array's test area failed".into()),
            }
        } else {
            false
        };
        let mut a: Vec<String> = ["bench"].iter().chain(&common).map(|x| x.to_string()).collect();
        if !write {
            a.push("--read-only".into());
        }
        a.push(src.export_uri.clone());
        a
    } else {
        if let Err(e) = may_use_all(&src, vec![req.target.clone()], true).await {
            return axum::Json(Reply::failed(e)).into_response();
        }
        let mut a: Vec<String> = ["suite", "--sets", &sets].iter().chain(&common).map(|x| x.to_string()).collect();
        a.extend(["--out".to_string(), dir.display().to_string(), req.target.clone()]);
        a
    };
    let mut g = src.bench.lock().unwrap_or_else(|p| p.into_inner());
    if g.as_ref().is_some_and(|b| b.done.lock().unwrap_or_else(|p| p.into_inner()).is_none()) {
        return fail("Busy", "a benchmark is running; wait for it to end".into());
    }
    let started = (|| -> std::io::Result<std::process::Child> {
        std::fs::create_dir_all(&dir)?;
        let log = std::fs::File::create(dir.join("log.txt"))?;
        std::process::Command::new(std::env::current_exe()?)
            .args(&args)
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
    })();
    let mut child = match started {
        Ok(c) => c,
        Err(e) => return fail("Io", format!("cannot start the benchmark: {e}")),
    };
    let done = Arc::new(Mutex::new(None));
    {
        let done = done.clone();
        std::thread::spawn(move || {
            let ok = child.wait().map(|s| s.success()).unwrap_or(false);
            *done.lock().unwrap_or_else(|p| p.into_inner()) = Some(ok);
        });
    }
    *g = Some(BenchRun { target: req.target.clone(), dir: dir_name.clone(), started: std::time::Instant::now(), done });
    axum::Json(Reply::done(serde_json::json!({"dir": dir_name}))).into_response()
}
