//! Unix sockets that only those allowed can reach: the NBD export's and
//! the control socket of a running array.

use std::os::unix::net::UnixListener;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

/// Listens on unix socket `path` with permissions `mode` (and group
/// `gid`), so that only those allowed can connect:
/// - the directory is made (0755) when missing, and refused when another
///   user owns it, or anyone may write to it without the sticky bit (then
///   anyone could put their own socket in our place);
/// - a file at `path` that is not a socket is refused (never removed); a
///   socket that answers belongs to a running server and is refused; a
///   stale one is replaced;
/// - the socket is bound under a temporary name with umask 0177, given its
///   mode and group, then renamed over `path`, so that it is never
///   reachable with wider permissions and a stale socket is replaced in one
///   step.
pub(crate) fn bind_unix(path: &std::path::Path, mode: u32, gid: Option<libc::gid_t>) -> Result<UnixListener> {
    use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let md = std::fs::metadata(&dir).with_context(|| format!("cannot look at {}", dir.display()))?;
    if !md.is_dir() {
        bail!("{} is not a directory; pick another --socket", dir.display());
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if md.uid() != me && md.uid() != 0 {
        bail!("{} belongs to user {}, not to us: another user could replace the socket; pick another --socket", dir.display(), md.uid());
    }
    if md.mode() & 0o022 != 0 && md.mode() & 0o1000 == 0 {
        bail!(
            "{} may be written by other users and has no sticky bit: they could replace the socket; \
             pick another --socket or chmod o-w,g-w {}",
            dir.display(),
            dir.display()
        );
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_socket() => {
            bail!("{} exists and is not a socket; it is left alone: pick another --socket", path.display())
        }
        Ok(_) if std::os::unix::net::UnixStream::connect(path).is_ok() => {
            bail!("{} is in use by another server; pick another --socket", path.display())
        }
        _ => {}
    }
    let file = path.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_else(|| "uraid.sock".into());
    let tmp = dir.join(format!(".{file}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    // SAFETY: umask has no preconditions; it is put back right after bind.
    let old = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(&tmp);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let l = bound.with_context(|| format!("cannot listen on {}", tmp.display()))?;
    let set = || -> std::io::Result<()> {
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
        if let Some(g) = gid {
            std::os::unix::fs::chown(&tmp, None, Some(g))?;
        }
        std::fs::rename(&tmp, path)
    };
    if let Err(e) = set() {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot put the socket in place at {} (mode {mode:o})", path.display()));
    }
    Ok(l)
}

/// Whether a process of user `uid` may be trusted by this process on a
/// control socket: root, or our own effective user.
pub(crate) fn trusted_uid(uid: libc::uid_t) -> bool {
    // SAFETY: geteuid has no preconditions.
    uid == 0 || uid == unsafe { libc::geteuid() }
}
