//! The console's create wizard: `POST /api/create` makes a new array
//! from free drives with the checks and the code of `uraid create`
//! (`uraid_core::control::array::create`). Without `confirm` it only
//! checks (`check_create`: nothing is written) and answers with the plan
//! (the volumes and the bytes create zeroes), which the page shows as the
//! cost before it asks to confirm; with `confirm` it creates the array,
//! marks it clean, and answers how to serve it. The new array is not
//! served by this process: it is another array, served by its own
//! `uraid serve`. Needs the access token and the page's header (see
//! `console`); every member must pass `console::may_use` first.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use uraid_core::control::array::{self, CreateOptions};

use super::console::{authorized, may_use_all, refused, token_ok, S};
use super::proto::{ErrorBody, Reply};

/// A create request from the page.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateRequest {
    /// The new array's name (as `uraid create --name`).
    name: String,
    /// RAID level: 0, 1, 10, 5 or 6.
    level: u32,
    /// Chunk as `uraid create --chunk` takes it: "64K", "128K", bytes.
    chunk: String,
    /// The members, in role order: block devices (or files under
    /// console-files-dir).
    members: Vec<String>,
    /// Create it; without: only check and plan.
    #[serde(default)]
    confirm: bool,
}

/// At most this many members in one request (the core's limit is lower;
/// this only bounds the work before it says so).
const MAX_REQUEST_MEMBERS: usize = 256;

/// `POST /api/create`: checks (and with `confirm` creates) a new array.
/// The reply is the control protocol's: `{"ok": true, "result": {...}}`
/// or `{"ok": false, "error": {"kind", "message"}}` with the core's error
/// text (too few members, a member in use, a bad chunk, ...).
pub(super) async fn create(State(src): S, h: HeaderMap, body: String) -> Response {
    if !authorized(&src, &h) {
        return refused();
    }
    if !h.get("x-uraid-token").and_then(|v| v.to_str().ok()).is_some_and(|t| token_ok(&src, t)) {
        return (StatusCode::FORBIDDEN, axum::Json(Reply::failed(ErrorBody::new("Protocol", "the X-Uraid-Token header is missing or wrong")))).into_response();
    }
    let fail = |e: ErrorBody| axum::Json(Reply::failed(e)).into_response();
    let req: CreateRequest = match serde_json::from_str(&body) {
        Ok(r) => r,
        Err(e) => return fail(ErrorBody::new("Protocol", format!("not a valid create request: {e}"))),
    };
    if req.members.len() > MAX_REQUEST_MEMBERS {
        return fail(ErrorBody::new("InvalidInput", format!("{} members: an array has at most {MAX_REQUEST_MEMBERS}", req.members.len())));
    }
    if req.name == src.array {
        return fail(ErrorBody::new(
            "InvalidInput",
            format!("'{}' is the name of the array this console serves: give the new array another name", req.name),
        ));
    }
    let chunk = match uraid_core::units::parse_size(&req.chunk, "chunk size") {
        Ok(c) => c,
        Err(e) => return fail(ErrorBody::from(e)),
    };
    let specs = match req.members.iter().map(|m| m.parse()).collect::<Result<Vec<uraid_core::MemberSpec>, uraid_core::Error>>() {
        Ok(s) => s,
        Err(e) => return fail(ErrorBody::from(e)),
    };
    if let Err(e) = may_use_all(&src, req.members.clone(), false).await {
        return fail(e);
    }
    let opts = CreateOptions { level: req.level, chunk, name: req.name, force: false, bitmap_region: None, volumes: Vec::new(), journal_reserve: 0, data: None, spares: None };
    let (members, confirm) = (req.members, req.confirm);
    let r = tokio::task::spawn_blocking(move || -> Result<serde_json::Value, ErrorBody> {
        let plan = array::check_create(&specs, &opts)?;
        let vols: Vec<serde_json::Value> = plan
            .iter()
            .map(|v| serde_json::json!({"name": v.name, "level": v.level, "chunk": v.chunk, "member_start": v.member_start, "member_size": v.member_size}))
            .collect();
        let zero_bytes: u64 = plan.iter().map(|v| v.member_size).sum::<u64>() * members.len() as u64;
        if !confirm {
            return Ok(serde_json::json!({"created": false, "volumes": vols, "zero_bytes": zero_bytes}));
        }
        let arr = array::create(&specs, &opts)?;
        let (uuid, capacity) = (arr.uuid().to_string(), arr.volumes().iter().map(|v| v.capacity()).sum::<u64>());
        let warnings = arr.warnings().to_vec();
        arr.stop()?;
        let serve = format!("uraid serve {} {}", opts.name, members.join(" "));
        Ok(serde_json::json!({"created": true, "name": opts.name, "uuid": uuid, "capacity": capacity, "volumes": vols,
            "zero_bytes": zero_bytes, "warnings": warnings, "serve": serve,
            "service": format!("uraid scan --config, then systemctl enable --now uraid@{}.service", opts.name)}))
    })
    .await;
    match r {
        Ok(Ok(v)) => axum::Json(Reply::done(v)).into_response(),
        Ok(Err(e)) => fail(e),
        Err(_) => fail(ErrorBody::new("Interrupted", "the create's worker failed")),
    }
}
