//! The array commands on a served array: `status`, `fail`, `remove`,
//! `add`, `replace`, `rebuild`, `check`, `repair`, `config` and `stop`
//! sent to the serving process's control socket ([`crate::service`]),
//! and `uraid monitor`. They print what the stopped-array commands of
//! [`crate::manage`] print; membership changes rebuild in the background
//! of the serving process (md's way) instead of in the foreground.

use anyhow::{bail, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use uraid_core::control::array::ArrayStatus;

use crate::manage::{CheckArgs, ConfigArgs, print_status};
use crate::service::client::{self, Client};
use crate::service::proto::{Command, IoFigures, Progress, Reply};

/// `uraid status` of a served array: the status, the background
/// operation with its rate and ETA, and the live I/O figures.
pub(crate) fn status(c: Client, json: bool) -> Result<()> {
    let c_name = c.name.clone();
    let v = c.call(Command::Status, &mut |_| {})?;
    if json {
        // The stopped array's shape, with what only the serving process
        // knows beside it.
        let mut out = v["array"].clone();
        out["served_by"] = serde_json::json!({
            "pid": v["pid"],
            "age_seconds": 0.0,
            "control_socket": client::ctl_path(&c_name),
            "state_file": crate::runstate::state_path(v["array"]["uuid"].as_str().unwrap_or("")),
        });
        out["progress"] = v["progress"].clone();
        out["reshape"] = v["reshape"].clone();
        out["maintenance"] = v["maintenance"].clone();
        out["io"] = v["io"].clone();
        out["exports"] = v["exports"].clone();
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let st: ArrayStatus = serde_json::from_value(v["array"].clone())?;
    println!("served by uraid serve (pid {}), live from its control socket {}", v["pid"], client::ctl_path(&c_name).display());
    print_status(&st);
    if let Some(r) = v["reshape"].as_object() {
        let (pos, total) = (r["position"].as_u64().unwrap_or(0), r["total"].as_u64().unwrap_or(0));
        println!(
            "  reshape from {} to {} members: {:.1}% ({} of {}){}",
            r["members"][0],
            r["members"][1],
            if total == 0 { 100.0 } else { pos as f64 * 100.0 / total as f64 },
            uraid_core::units::fmt_size(pos),
            uraid_core::units::fmt_size(total),
            match r["failed"].as_str() {
                Some(why) => format!("; stopped: {why}"),
                None => String::new(),
            }
        );
    }
    if let Ok(Some(p)) = serde_json::from_value::<Option<Progress>>(v["progress"].clone()) {
        println!("  {}", progress_line(&p));
    }
    if let Some(line) = maintenance_line(&v["maintenance"]) {
        println!("  {line}");
    }
    if let Some(list) = v["exports"].as_array().filter(|l| !l.is_empty()) {
        for line in exported_lines(list) {
            println!("  {line}");
        }
        for note in list.iter().filter_map(|e| e["note"].as_str()) {
            println!("  {note}");
        }
    }
    if let Some(io) = v["io"].as_object() {
        for (vol, f) in io {
            if let Ok(f) = serde_json::from_value::<IoFigures>(f.clone()) {
                println!("  volume '{vol}' I/O over the last {:.0} s:", f.seconds);
                println!(
                    "      read  {:>9.0} IOPS {:>9.1} MB/s, latency mean {:>8.1} us, p99 {:>8.1} us",
                    f.read_iops, f.read_mb_s, f.read_mean_us, f.read_p99_us
                );
                println!(
                    "      write {:>9.0} IOPS {:>9.1} MB/s, latency mean {:>8.1} us, p99 {:>8.1} us",
                    f.write_iops, f.write_mb_s, f.write_mean_us, f.write_p99_us
                );
                println!("      {} request(s) in flight, {} connection(s)", f.in_flight, f.connections);
            }
        }
    }
    Ok(())
}

/// The "exported as:" lines of `status` from its `exports` (each
/// `{"kind", "address", "volume"}`): one line for an array whose exports
/// serve one volume, else one per volume (a Matrix array's), in order.
fn exported_lines(list: &[serde_json::Value]) -> Vec<String> {
    let mut volumes: Vec<&str> = Vec::new();
    for e in list {
        let v = e["volume"].as_str().unwrap_or("");
        if !volumes.contains(&v) {
            volumes.push(v);
        }
    }
    volumes
        .iter()
        .map(|vol| {
            let each: Vec<String> = list
                .iter()
                .filter(|e| e["volume"].as_str().unwrap_or("") == *vol)
                .map(|e| format!("{} {}", e["kind"].as_str().unwrap_or("?"), e["address"].as_str().unwrap_or("?")))
                .collect();
            match volumes.len() {
                1 => format!("exported as: {}", each.join(", ")),
                _ => format!("volume '{vol}' exported as: {}", each.join(", ")),
            }
        })
        .collect()
}

/// `maintenance: check every 7d (next in 6d 23h), scrub rate 100 MB/s,
/// rebuild rate no limit`, from the status's `maintenance` (`None` when
/// the serving process did not send it).
fn maintenance_line(m: &serde_json::Value) -> Option<String> {
    let m = m.as_object()?;
    let rate = |k: &str| m.get(k).and_then(|r| r.as_u64()).map_or("no limit".to_string(), |r| format!("{:.0} MB/s", r as f64 / 1e6));
    let check = match m.get("scrub_every").and_then(|e| e.as_u64()) {
        Some(every) => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            let next = match m.get("next_check_unix").and_then(|n| n.as_u64()) {
                Some(n) if n > now => format!("next in {}", fmt_secs(n - now)),
                Some(_) => "next now".to_string(),
                None => "next beyond the clock".to_string(),
            };
            format!("check every {} ({next})", fmt_secs(every))
        }
        None => "no scheduled check".to_string(),
    };
    Some(format!("maintenance: {check}, scrub rate {}, rebuild rate {}", rate("scrub_rate"), rate("rebuild_rate")))
}

/// `s` seconds in its two largest units: `7d`, `6d 23h`, `59m 58s`, `0s`.
fn fmt_secs(s: u64) -> String {
    let parts: Vec<String> = [(86_400, "d"), (3600, "h"), (60, "m"), (1, "s")]
        .iter()
        .scan(s, |left, &(unit, name)| {
            let n = *left / unit;
            *left %= unit;
            Some((n, name))
        })
        .skip_while(|(n, _)| *n == 0)
        .take(2)
        .filter(|(n, _)| *n > 0)
        .map(|(n, name)| format!("{n}{name}"))
        .collect();
    if parts.is_empty() { "0s".to_string() } else { parts.join(" ") }
}

/// `rebuild of role 1: 45.2% (1.2 GiB of 2.5 GiB) at 120.3 MB/s, ETA 11 s`.
fn progress_line(p: &Progress) -> String {
    let eta = p.eta_seconds.map(|s| format!(", ETA {s:.0} s")).unwrap_or_default();
    let limit = p.rate_limit.map(|r| format!(" (limit {:.0} MB/s)", r as f64 / 1e6)).unwrap_or_default();
    format!(
        "{} of {}: {:.1}% ({} of {}) at {:.1} MB/s{limit}{eta}",
        p.action,
        p.target,
        p.percent(),
        uraid_core::units::fmt_size(p.done),
        uraid_core::units::fmt_size(p.total),
        p.mb_per_s
    )
}

/// Prints where the array stands after a change.
fn after(name: &str) -> Result<()> {
    match Client::connect(name) {
        Some(c) => status(c, false),
        None => Ok(()),
    }
}

/// `uraid grow --add` on a served array: the reshape starts and runs in
/// the background; with `wait`, this follows it to its end.
pub(crate) fn grow(c: Client, add: &[String], force: bool, rate: Option<u64>, chunk: Option<u64>, level: Option<u32>, wait: bool) -> Result<()> {
    let name = c.name.clone();
    let v = c.call(Command::Grow { add: add.to_vec(), force, rate, size: None, chunk, level }, &mut |_| {})?;
    if v.get("rebuilding").is_some() {
        // A takeover: done already; its new roles (if any) are rebuilt.
        println!(
            "array '{name}': its volume is RAID {} over {} members now (no data moved){}",
            v["level"][1],
            v["members"][1],
            if v["rebuilding"].as_array().is_some_and(|r| !r.is_empty()) {
                "; the new member(s) are rebuilt in the background ('uraid status' shows how far)"
            } else {
                ""
            }
        );
        if !wait {
            return Ok(());
        }
        return follow(&name, "the next assemble goes on with the rebuild", |st| {
            let vols = st["array"]["volumes"].as_array().cloned().unwrap_or_default();
            if vols.iter().any(|v| v["state"] == "rebuilding") {
                return None;
            }
            println!("array '{name}': the new member(s) were rebuilt; the volume is {}", vols.first().and_then(|v| v["state"].as_str()).unwrap_or("gone"));
            Some(Ok(()))
        });
    }
    if v["members"][0] == v["members"][1] {
        println!(
            "array '{name}' is being restriped to {} chunks over the same {} members in the background at most {:.0} MB/s \
             ('uraid status {name}' shows how far)",
            chunk.map(uraid_core::units::fmt_size).unwrap_or_default(),
            v["members"][1],
            v["rate"].as_f64().unwrap_or(0.0) / 1e6
        );
    } else {
        println!(
            "array '{name}' is being reshaped from {} to {} members in the background at most {:.0} MB/s; the volume grows to {} \
             bytes when it ends ('uraid status {name}' shows how far)",
            v["members"][0],
            v["members"][1],
            v["rate"].as_f64().unwrap_or(0.0) / 1e6,
            v["capacity"]
        );
    }
    if !wait {
        return Ok(());
    }
    follow(&name, "the next assemble finishes the reshape", |st| {
        if let Some(why) = st["reshape"]["failed"].as_str() {
            return Some(Err(anyhow::anyhow!("the reshape of array '{name}' stopped: {why}")));
        }
        if !st["reshape"].is_null() {
            return None;
        }
        println!(
            "array '{name}' was reshaped: {} members, the volume holds {} bytes; new connections see the new size: grow the \
             filesystem on it (resize2fs for ext4, xfs_growfs for xfs)",
            st["array"]["member_count"],
            st["array"]["volumes"][0]["capacity"]
        );
        Some(Ok(()))
    })
}

/// Reads the status of the served array `name` every 250 ms until `done`
/// says how it ended. Errors: the array is no longer served (`gone` says
/// what happens then), the status cannot be read, or `done`'s.
fn follow(name: &str, gone: &str, mut done: impl FnMut(&serde_json::Value) -> Option<Result<()>>) -> Result<()> {
    loop {
        std::thread::sleep(std::time::Duration::from_millis(250));
        let Some(c) = Client::connect(name) else { bail!("array '{name}' is no longer served; {gone}") };
        let st = c.call(Command::Status, &mut |_| {})?;
        if let Some(r) = done(&st) {
            return r;
        }
    }
}

/// `uraid grow --size` on a served array: the last volume grows into the
/// room past it; the export moves to it (new connections see the size).
pub(crate) fn grow_size(c: Client, size: &str) -> Result<()> {
    let name = c.name.clone();
    let v = c.call(Command::Grow { add: Vec::new(), force: false, rate: None, size: Some(size.to_string()), chunk: None, level: None }, &mut |_| {})?;
    println!(
        "volume '{}' of array '{name}' grew from {} to {} bytes; new connections see the new size: grow the filesystem on it \
         (resize2fs for ext4, xfs_growfs for xfs)",
        v["volume"].as_str().unwrap_or(""),
        v["capacity"][0],
        v["capacity"][1]
    );
    // A ublk device the driver cannot resize keeps its size until its export restarts.
    if let Some(st) = Client::connect(&name).and_then(|c| c.call(Command::Status, &mut |_| {}).ok()) {
        for note in st["exports"].as_array().into_iter().flatten().filter_map(|e| e["note"].as_str()) {
            println!("but {note}");
        }
    }
    Ok(())
}

/// `uraid fail` on a served array.
pub(crate) fn fail(c: Client, member: &str, force: bool) -> Result<()> {
    let name = c.name.clone();
    let v = c.call(Command::Fail { member: member.to_string(), force }, &mut |_| {})?;
    println!("role {} of array '{name}' marked faulty (events {})", v["role"], v["events"]);
    after(&name)
}

/// `uraid remove` on a served array.
pub(crate) fn remove(c: Client, member: &str) -> Result<()> {
    let name = c.name.clone();
    let v = c.call(Command::Remove { member: member.to_string() }, &mut |_| {})?;
    println!("slot {} removed from array '{name}' (events {})", v["slot"], v["events"]);
    after(&name)
}

/// `uraid add` on a served array: the drive becomes a spare, which takes
/// over a failed or missing role at once and is rebuilt in the background.
pub(crate) fn add(c: Client, device: &str, force: bool) -> Result<()> {
    let name = c.name.clone();
    let v = c.call(Command::Add { device: device.to_string(), force }, &mut |_| {})?;
    match v["takes_over"].as_u64() {
        Some(r) => println!(
            "{device} added to array '{name}'; it takes over role {r} and is rebuilt in the background \
             ('uraid status {name}' shows the progress)"
        ),
        None => println!("{device} added to array '{name}' as a spare (slot {})", v["slot"]),
    }
    after(&name)
}

/// `uraid replace` on a served array.
pub(crate) fn replace(c: Client, old: &str, new: &str, force: bool) -> Result<()> {
    let name = c.name.clone();
    let v = c.call(Command::Replace { old: old.to_string(), new: new.to_string(), force }, &mut |_| {})?;
    println!(
        "{new} replaces role {} of array '{name}' and is rebuilt in the background ('uraid status {name}' shows the progress)",
        v["role"]
    );
    after(&name)
}

/// `uraid rebuild` on a served array: sets the background rebuild's rate.
pub(crate) fn rebuild(c: Client, rate: Option<u64>) -> Result<()> {
    let name = c.name.clone();
    let v = c.call(Command::Rebuild { rate }, &mut |_| {})?;
    match rate {
        Some(r) => println!("array '{name}': background rebuild limited to {:.1} MB/s", r as f64 / 1e6),
        None => println!("array '{name}': background rebuild without a rate limit"),
    }
    if v["rebuilding"].as_array().is_some_and(|a| a.is_empty()) {
        println!("array '{name}': nothing is being rebuilt");
    }
    after(&name)
}

/// `uraid check` / `repair` on a served array: runs in the serving
/// process alongside the clients' I/O; progress until it ends.
pub(crate) fn check(c: Client, a: &CheckArgs, repair: bool) -> Result<()> {
    if a.stop {
        let name = c.name.clone();
        let v = c.call(Command::CheckStop, &mut |_| {})?;
        println!("array '{name}': the {} was stopped at {:.1}%", v["stopped"].as_str().unwrap_or("check"), v["percent"].as_f64().unwrap_or(0.0));
        return Ok(());
    }
    let rate = crate::manage::rate(&a.rate)?;
    let bar = if a.quiet || a.json { ProgressBar::hidden() } else { ProgressBar::new(0) };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {percent:>3}% {bytes}/{total_bytes} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    // Not a terminal (a log, a pipe): the bar draws nothing, so a line
    // per 10% step instead, as the background rebuild's events go.
    let lines = !(a.quiet || a.json || std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let mut step: Option<(String, u64)> = None;
    let v = c.call(Command::Check { volume: a.volume.clone(), repair, rate }, &mut |r: &Reply| {
        if let Some(p) = &r.progress {
            bar.set_length(p.total);
            bar.set_position(p.done);
            bar.set_message(format!("{} '{}' {:.1} MB/s", p.action, p.target, p.mb_per_s));
            let now = (p.percent() / 10.0).floor() as u64 * 10;
            if lines && step.as_ref().is_none_or(|(t, s)| *t != p.target || now > *s) {
                step = Some((p.target.clone(), now));
                eprintln!("uraid: {}", progress_line(p));
            }
        }
    })?;
    bar.finish_and_clear();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    for r in v.as_array().into_iter().flatten() {
        let report = r["report"].as_object().map(|o| o.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", "));
        let level = r["level"].as_u64().map_or_else(|| r["level"].to_string(), |n| crate::common::level_name(n as u32));
        println!("volume '{}' ({level}): {}", r["volume"].as_str().unwrap_or(""), report.unwrap_or_default());
    }
    Ok(())
}

/// `uraid config` on a served array.
pub(crate) fn config(c: Client, a: &ConfigArgs) -> Result<()> {
    let Some(mode) = a.cache.cache.clone() else { bail!("nothing to change: give --cache MODE (off, writethrough, writeback, journal)") };
    if a.cache.journal.is_some() || a.cache.journal_size.is_some() || a.without_journal {
        bail!(
            "--journal, --journal-size and --without-journal need the array stopped: 'uraid stop {}' first. Nothing was changed",
            c.name
        );
    }
    let size = a.cache.cache_size.as_deref().map(|s| uraid_core::units::parse_size(s, "cache size")).transpose()?;
    let dirty = a.cache.dirty_limit.as_deref().map(|s| uraid_core::units::parse_size(s, "dirty limit")).transpose()?;
    let name = c.name.clone();
    let v = c.call(Command::Config { volume: a.volume.clone(), mode, cache_size: size, dirty_limit: dirty }, &mut |_| {})?;
    for n in v["volumes"].as_array().into_iter().flatten() {
        println!("volume '{}': cache {} from now on (changed live)", n.as_str().unwrap_or(""), v["mode"].as_str().unwrap_or(""));
    }
    if let Some(w) = v["warning"].as_str() {
        eprintln!("uraid: warning: {w}");
    }
    after(&name)
}

#[derive(Args)]
pub(crate) struct StopArgs {
    /// The served array: its name or UUID, or its members.
    #[arg(required = true, value_name = "NAME|MEMBER")]
    pub(crate) array: Vec<String>,
}

/// `uraid stop`: stops the process serving the array, cleanly (requests in
/// flight finish, members flushed and marked clean), and waits for it.
pub(crate) fn stop(a: StopArgs) -> Result<()> {
    let Some(c) = client::find(&a.array) else {
        bail!("no running uraid serves '{}' (no control socket answers in {})", a.array.join(" "), crate::runstate::run_dir().display());
    };
    let name = c.name.clone();
    let v = c.call(Command::Stop, &mut |_| {})?;
    let pid = v["pid"].as_i64().unwrap_or(0) as libc::pid_t;
    let t0 = std::time::Instant::now();
    while pid > 0 && running(pid) {
        if t0.elapsed() > std::time::Duration::from_secs(300) {
            bail!("array '{name}' (pid {pid}) is still stopping after 300 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    println!("array '{name}' stopped (pid {pid})");
    Ok(())
}

/// Whether process `pid` still runs: it exists and is not a zombie (a
/// stopped `serve` whose parent has not reaped it yet has finished).
fn running(pid: libc::pid_t) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses.
        Ok(s) => !matches!(s.rsplit(')').next().and_then(|r| r.split_whitespace().next()), Some("Z") | Some("X")),
        Err(_) => false,
    }
}

