//! NBD URIs (NetworkBlockDevice/nbd doc/uri.md): `nbd+unix:///NAME?socket=PATH`
//! and `nbd://HOST[:PORT]/NAME`; the TLS forms are refused.

use std::path::PathBuf;

use uraid_core::{bail, Error, Result};

/// The NBD port (IANA): `nbd://HOST/NAME` without a port uses it.
pub const NBD_PORT: u16 = 10809;

/// Where an export listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A Unix domain socket (its path).
    Unix(PathBuf),
    /// A TCP address, `HOST:PORT`.
    Tcp(String),
}

/// An NBD URI: where the server is and the export's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NbdUri {
    /// The server's address.
    pub endpoint: Endpoint,
    /// The export's name (empty: the server's default export).
    pub name: String,
}

impl NbdUri {
    /// True when `s` is written as an NBD URI (`nbd://`, `nbd+unix://`, or
    /// their TLS forms, which [`str::parse`] refuses with a clear error).
    pub fn looks_like(s: &str) -> bool {
        ["nbd://", "nbd+unix://", "nbds://", "nbds+unix://"].iter().any(|p| s.starts_with(p))
    }
}

impl std::fmt::Display for NbdUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.endpoint {
            Endpoint::Unix(p) => write!(f, "nbd+unix:///{}?socket={}", self.name, p.display()),
            Endpoint::Tcp(a) => write!(f, "nbd://{a}/{}", self.name),
        }
    }
}

impl std::str::FromStr for NbdUri {
    type Err = Error;

    /// Parses `nbd+unix:///NAME?socket=PATH` or `nbd://HOST[:PORT][/NAME]`
    /// (doc/uri.md; an IPv6 host in brackets). Errors (`InvalidInput`):
    /// another scheme, a missing socket or host, and the TLS schemes
    /// (`nbds`), which this client does not speak.
    fn from_str(s: &str) -> Result<NbdUri> {
        if s.starts_with("nbds://") || s.starts_with("nbds+unix://") {
            bail!(InvalidInput, "'{s}' asks for NBD over TLS, which uraid's NBD client does not speak; use nbd:// or nbd+unix://");
        }
        if let Some(rest) = s.strip_prefix("nbd+unix://") {
            let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
            if !path.is_empty() && !path.starts_with('/') {
                bail!(InvalidInput, "'{s}': a Unix socket URI has no host: write nbd+unix:///NAME?socket=PATH");
            }
            let name = path.strip_prefix('/').unwrap_or("").to_string();
            let socket = query.split('&').find_map(|kv| kv.strip_prefix("socket="));
            let Some(socket) = socket.filter(|p| !p.is_empty()) else {
                bail!(InvalidInput, "'{s}' names no socket: write nbd+unix:///NAME?socket=PATH");
            };
            return Ok(NbdUri { endpoint: Endpoint::Unix(PathBuf::from(socket)), name });
        }
        if let Some(rest) = s.strip_prefix("nbd://") {
            let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
            if authority.is_empty() {
                bail!(InvalidInput, "'{s}' names no host: write nbd://HOST[:PORT]/NAME");
            }
            // HOST, HOST:PORT, [V6], [V6]:PORT.
            let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
                match v6.split_once(']') {
                    Some((h, "")) => (format!("[{h}]"), None),
                    Some((h, p)) if p.starts_with(':') => (format!("[{h}]"), Some(&p[1..])),
                    _ => bail!(InvalidInput, "'{s}': '{authority}' is not [IPV6] or [IPV6]:PORT"),
                }
            } else {
                match authority.rsplit_once(':') {
                    Some((h, p)) => (h.to_string(), Some(p)),
                    None => (authority.to_string(), None),
                }
            };
            let port = match port {
                None => NBD_PORT,
                Some(p) => match p.parse::<u16>() {
                    Ok(p) => p,
                    Err(_) => bail!(InvalidInput, "'{s}': '{p}' is not a port from 0 to 65535"),
                },
            };
            if host.is_empty() || host == "[]" {
                bail!(InvalidInput, "'{s}' names no host: write nbd://HOST[:PORT]/NAME");
            }
            let addr = format!("{host}:{port}");
            let name = path.split('?').next().unwrap_or("").to_string();
            return Ok(NbdUri { endpoint: Endpoint::Tcp(addr), name });
        }
        bail!(InvalidInput, "'{s}' is not an NBD URI: write nbd+unix:///NAME?socket=PATH or nbd://HOST[:PORT]/NAME")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> std::result::Result<NbdUri, String> {
        s.parse::<NbdUri>().map_err(|e| e.to_string())
    }

    #[test]
    fn uri_forms() {
        let u = parse("nbd+unix:///bench?socket=/tmp/u.sock").unwrap();
        assert_eq!(u, NbdUri { endpoint: Endpoint::Unix("/tmp/u.sock".into()), name: "bench".into() });
        assert_eq!(u.to_string(), "nbd+unix:///bench?socket=/tmp/u.sock");
        assert_eq!(parse("nbd+unix://?socket=/s").unwrap().name, "");
        assert_eq!(parse("nbd://host/vol").unwrap().endpoint, Endpoint::Tcp("host:10809".into()));
        assert_eq!(parse("nbd://10.0.0.1:2000/vol").unwrap(), NbdUri { endpoint: Endpoint::Tcp("10.0.0.1:2000".into()), name: "vol".into() });
        assert_eq!(parse("nbd://[::1]:2000").unwrap(), NbdUri { endpoint: Endpoint::Tcp("[::1]:2000".into()), name: "".into() });
        assert_eq!(parse("nbd://[::1]/x").unwrap().endpoint, Endpoint::Tcp("[::1]:10809".into()));
        for (bad, says) in [
            ("nbds://host/x", "TLS"),
            ("nbds+unix:///x?socket=/s", "TLS"),
            ("nbd+unix:///x", "names no socket"),
            ("nbd+unix:///x?socket=", "names no socket"),
            ("nbd+unix://host/x?socket=/s", "has no host"),
            ("nbd://", "names no host"),
            ("nbd://:10809/x", "names no host"),
            ("nbd://host:99999/x", "not a port"),
            ("nbd://[::1/x", "not [IPV6]"),
            ("http://host/x", "not an NBD URI"),
        ] {
            let e = parse(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(NbdUri::looks_like("nbd+unix:///x?socket=/s") && NbdUri::looks_like("nbds://h/x"));
        assert!(!NbdUri::looks_like("/dev/loop0") && !NbdUri::looks_like("mem:1G"));
    }
}
