//! The CLI's side of the control socket: finds the running process that
//! holds an array (by name, UUID or member paths) and sends it a command.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};

use super::proto::{Command, Reply, Request, PROTOCOL_VERSION};

/// The control socket of array `name`: `RUN_DIR/NAME.ctl`.
pub(crate) fn ctl_path(name: &str) -> PathBuf {
    crate::runstate::run_dir().join(format!("{name}.ctl"))
}

/// A connection to the control socket of a running array.
pub(crate) struct Client {
    stream: UnixStream,
    /// The array's name.
    pub name: String,
    /// Why the process that answered is not trusted (another user than
    /// root or us: whoever could write to the run directory put it
    /// there); every [`call`](Self::call) then fails with this, sending
    /// nothing and reading nothing from it.
    untrusted: Option<String>,
}

impl Client {
    /// Connects to array `name`'s control socket; `None` when no process
    /// serves it (no socket, or a stale one). A socket answered by a
    /// process of another user than root or ours (SO_PEERCRED) gives a
    /// client whose every call fails, saying so.
    pub(crate) fn connect(name: &str) -> Option<Client> {
        if name.is_empty() || name.contains('/') {
            return None;
        }
        let path = ctl_path(name);
        let stream = UnixStream::connect(&path).ok()?;
        let untrusted = match uraid_nbd::sock::peer_cred(std::os::fd::AsRawFd::as_raw_fd(&stream)) {
            Some(c) if crate::sock::trusted_uid(c.uid) => None,
            Some(c) => Some(format!(
                "the control socket {} is answered by process {} of user {}, not by root or by you (user {}): it is not \
                 trusted, and nothing was sent to it or read from it. Whoever can write to {} can put a socket there: \
                 serve arrays with a run directory only root can write (the default /run/uraid), or set URAID_RUN_DIR to one",
                path.display(),
                c.pid,
                c.uid,
                // SAFETY: geteuid has no preconditions.
                unsafe { libc::geteuid() },
                crate::runstate::run_dir().display()
            )),
            None => Some(format!("cannot tell who answers on the control socket {} (SO_PEERCRED failed); not trusted", path.display())),
        };
        Some(Client { stream, name: name.to_string(), untrusted })
    }

    /// Sends `cmd`; `line` sees every progress or event line; returns the
    /// final result.
    ///
    /// Errors: the service refused the command (its message), or the
    /// connection failed.
    pub(crate) fn call(mut self, cmd: Command, line: &mut dyn FnMut(&Reply)) -> Result<serde_json::Value> {
        let what = cmd.name();
        if let Some(why) = self.untrusted.take() {
            bail!("{why}");
        }
        let mut req = serde_json::to_vec(&Request { version: PROTOCOL_VERSION, command: cmd })?;
        req.push(b'\n');
        self.stream.write_all(&req).with_context(|| format!("cannot send '{what}' to array '{}'", self.name))?;
        let mut r = BufReader::new(&self.stream);
        let mut buf = String::new();
        loop {
            buf.clear();
            if r.read_line(&mut buf)? == 0 {
                bail!("the process serving array '{}' closed the control connection before answering '{what}'", self.name);
            }
            let reply: Reply = serde_json::from_str(&buf).with_context(|| format!("unreadable reply from array '{}'", self.name))?;
            match reply.ok {
                Some(true) => return Ok(reply.result.unwrap_or_default()),
                Some(false) => {
                    let e = reply.error.unwrap_or_else(|| super::proto::ErrorBody::new("Protocol", "no reason given"));
                    return Err(anyhow!("{}", e.message));
                }
                None => line(&reply),
            }
        }
    }
}

/// The names of the arrays served on this machine (their control sockets).
pub(crate) fn served_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(crate::runstate::run_dir())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".ctl")).map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// The running array that `args` (an array name or UUID, or the paths of
/// its members) names, if a process serves it.
pub(crate) fn find(args: &[String]) -> Option<Client> {
    if let [one] = args {
        if !one.contains('/') && !one.starts_with("mem:") && !one.starts_with("null:") {
            if let Some(c) = Client::connect(one) {
                return Some(c);
            }
            // A UUID: ask each running array.
            for n in served_names() {
                if uuid_of(&n).as_deref() == Some(one.as_str()) {
                    return Client::connect(&n);
                }
            }
            return None;
        }
    }
    // Member paths: the array their superblocks name, when it runs with
    // the same UUID.
    for a in args {
        let Ok(spec) = a.parse::<uraid_core::MemberSpec>() else { continue };
        if let Ok(uraid_core::control::array::Examination::Member(sb)) = uraid_core::control::array::examine(&spec) {
            let uuid = uraid_core::control::superblock::fmt_uuid(&sb.array_uuid);
            return (uuid_of(&sb.name).as_deref() == Some(uuid.as_str())).then(|| Client::connect(&sb.name)).flatten();
        }
    }
    None
}

/// The UUID of running array `name`.
fn uuid_of(name: &str) -> Option<String> {
    let v = Client::connect(name)?.call(Command::Status, &mut |_| {}).ok()?;
    v["array"]["uuid"].as_str().map(str::to_string)
}
