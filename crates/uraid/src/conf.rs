//! The configuration file, `uraid.conf` (TOML): where members are looked
//! for, what to run on events, and the arrays known by name, as mdadm.conf
//! does with its DEVICE, MAILADDR / PROGRAM and ARRAY lines. The format is
//! documented key by key in `docs/uraid.conf.md`.
//!
//! Path: `$URAID_CONFIG` if set, else [`DEFAULT_PATH`]. A missing file is an
//! empty configuration. Unknown keys are refused, with the file, the line
//! and the keys that are known.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Deserializer};

/// Where the configuration lives unless `$URAID_CONFIG` names another file.
pub(crate) const DEFAULT_PATH: &str = "/etc/uraid/uraid.conf";

/// The default `mail-command` of `[monitor]`.
pub(crate) const DEFAULT_MAIL_COMMAND: &str = "/usr/sbin/sendmail -t";

/// The whole configuration file.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct Config {
    /// Glob patterns of the paths where members are looked for (mdadm's
    /// DEVICE line), e.g. `/dev/nvme*n1` or `/srv/uraid/*.img`. `None`
    /// (the key left out): every block device of the machine.
    #[serde(default, deserialize_with = "de_globs")]
    pub devices: Option<Vec<String>>,
    /// What to run or whom to mail when an array changes state (mdadm's
    /// MAILADDR and PROGRAM); `None`: nothing.
    #[serde(default)]
    pub monitor: Option<MonitorConf>,
    /// Seconds a ublk device whose `uraid serve` is gone waits (its I/O
    /// queued) for a serve to re-attach, before `uraid monitor` deletes
    /// it so that its I/O fails with EIO (written `120s`, `2m`, or a plain
    /// number of seconds; 0: wait for ever). `None`: [`DEFAULT_UBLK_RECOVERY_TIMEOUT`].
    #[serde(default, deserialize_with = "de_timeout")]
    pub ublk_recovery_timeout: Option<u64>,
    /// The arrays known by name, one `[[array]]` table each.
    #[serde(default, rename = "array")]
    pub arrays: Vec<ArrayConf>,
}

/// `[monitor]`: how events are reported.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct MonitorConf {
    /// A program run as `PROGRAM EVENT ARRAY [MEMBER]` on every event
    /// (mdadm's PROGRAM); `None`: none.
    #[serde(default)]
    pub program: Option<String>,
    /// An address mailed on every event (mdadm's MAILADDR); `None`: no mail.
    #[serde(default)]
    pub mail: Option<String>,
    /// The command that sends a mail, given the message (headers first)
    /// on its standard input; default [`DEFAULT_MAIL_COMMAND`].
    #[serde(default = "default_mail_command")]
    pub mail_command: String,
    /// How often `serve` reads each member drive's health (SMART / NVMe
    /// health log), seconds: a duration (`5m`, `1h`), or 0 for never;
    /// `None`: the default, 5 minutes.
    #[serde(default, deserialize_with = "de_health_interval")]
    pub health_interval: Option<u64>,
    /// TemperatureHigh at or above this, °C (default: the drive's own
    /// warning temperature, else 70).
    #[serde(default)]
    pub temperature_warn: Option<i64>,
    /// WearOut at or above this NVMe percentage used (default 80).
    #[serde(default)]
    pub wear_warn: Option<u64>,
    /// SpareLow below this NVMe available spare, percent (default: the
    /// drive's own threshold).
    #[serde(default)]
    pub spare_warn: Option<u64>,
}

/// The default `ublk-recovery-timeout`, seconds: long enough for systemd
/// to restart a killed `uraid serve` (RestartSec=5) and for it to
/// assemble the array, short enough that a filesystem's writers do not
/// hang for good.
pub(crate) const DEFAULT_UBLK_RECOVERY_TIMEOUT: u64 = 120;

impl Config {
    /// `ublk-recovery-timeout` in seconds, its default when left out; 0:
    /// wait for ever.
    pub(crate) fn ublk_recovery_timeout(&self) -> u64 {
        self.ublk_recovery_timeout.unwrap_or(DEFAULT_UBLK_RECOVERY_TIMEOUT)
    }
}

fn default_mail_command() -> String {
    DEFAULT_MAIL_COMMAND.to_string()
}

/// `[[array]]`: one array known by name.
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct ArrayConf {
    /// The array's name, as `uraid create --name` gave it (also in the
    /// superblocks).
    pub name: String,
    /// The array's UUID as `uraid examine` prints it
    /// (`xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, lowercase after loading).
    #[serde(deserialize_with = "de_uuid")]
    pub uuid: String,
    /// The paths of its members and spares; `None`: looked for by UUID
    /// among the config's `devices` (or every block device).
    #[serde(default)]
    pub members: Option<Vec<String>>,
    /// A journal device of its own (`--cache journal --journal DEVICE`),
    /// given with the members whenever the array is named; `None`: none.
    #[serde(default)]
    pub journal: Option<String>,
    /// The unix socket `uraid serve` exports the array on; `None`: the
    /// default socket (or `tcp`).
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// The TCP address (`HOST:PORT`) to export on instead of a socket.
    #[serde(default)]
    pub tcp: Option<String>,
    /// PEM certificate chain for TLS on `tcp`.
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for TLS on `tcp`.
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
    /// PEM CA certificates: clients of `tcp` must present a certificate
    /// they signed (`uraid serve --tls-verify-peer --tls-ca`).
    #[serde(default)]
    pub tls_ca: Option<PathBuf>,
    /// TLS-PSK key file (`USERNAME:HEXKEY` lines) for `tcp`, instead of
    /// `tls-cert` and `tls-key` (`uraid serve --tls-psk`).
    #[serde(default)]
    pub tls_psk: Option<PathBuf>,
    /// Serve a non-loopback `tcp` address to clients that do not
    /// authenticate (`uraid serve --insecure-no-client-auth`).
    #[serde(default)]
    pub insecure_no_client_auth: bool,
    /// The address (`HOST:PORT`) of the Prometheus metrics endpoint;
    /// `None`: no endpoint.
    #[serde(default)]
    pub metrics: Option<String>,
    /// Rebuild rate limit in bytes per second (written as MB/s when a
    /// plain number, or with units: `200M` = 200 * 10^6 B/s); `None`: no
    /// limit.
    #[serde(default, deserialize_with = "de_rate")]
    pub rebuild_rate: Option<u64>,
    /// Scrub (check) rate limit in bytes per second, written like
    /// `rebuild-rate`; `None`: no limit.
    #[serde(default, deserialize_with = "de_rate")]
    pub scrub_rate: Option<u64>,
    /// Seconds between scheduled checks (written as a duration: `12h`,
    /// `7d`, `1w`); `None`: no scheduled check.
    #[serde(default, deserialize_with = "de_duration")]
    pub scrub_every: Option<u64>,
    /// Corrected read errors a member may have before it is failed
    /// (md's max_read_errors, `uraid serve --max-read-errors`); `None`: 20.
    #[serde(default)]
    pub max_read_errors: Option<u32>,
    /// The address (`HOST:PORT`, loopback) of the web console; `None`: no
    /// console.
    #[serde(default)]
    pub console: Option<String>,
    /// The console's access token; `None`: a new random one at each start
    /// (printed by `uraid serve`).
    #[serde(default)]
    pub console_token: Option<String>,
    /// Where the console keeps benchmark reports; `None`:
    /// /var/lib/uraid/reports.
    #[serde(default)]
    pub reports: Option<PathBuf>,
    /// The one directory whose regular files the console may write
    /// (benchmark targets, spares); `None`: block devices only.
    #[serde(default)]
    pub console_files_dir: Option<PathBuf>,
    /// Serve the array as a block device, /dev/ublkbN (`uraid serve
    /// --ublk`): with no `socket` or `tcp` given, the only export.
    #[serde(default)]
    pub ublk: bool,
    /// N of a new /dev/ublkbN (`uraid serve --ublk-id`); `None`: the first
    /// free one.
    #[serde(default)]
    pub ublk_id: Option<u32>,
}

impl Config {
    /// The array named `name_or_uuid` (its name, or its UUID in any case).
    pub(crate) fn array(&self, name_or_uuid: &str) -> Option<&ArrayConf> {
        let want = name_or_uuid.trim();
        self.arrays.iter().find(|a| a.uuid.eq_ignore_ascii_case(want)).or_else(|| self.arrays.iter().find(|a| a.name == want))
    }
}

impl ArrayConf {
    /// The devices to give a command for this array: its members, then its
    /// journal device. Empty when the config does not list the members.
    pub(crate) fn devices(&self) -> Vec<String> {
        let mut v = self.members.clone().unwrap_or_default();
        v.extend(self.journal.clone());
        v
    }
}

/// The path of the configuration file: `$URAID_CONFIG` if set (and not
/// empty), else [`DEFAULT_PATH`].
pub(crate) fn path() -> PathBuf {
    match std::env::var_os("URAID_CONFIG") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_PATH),
    }
}

/// Reads the configuration file ([`path`]). A missing file is an empty
/// configuration. Errors: the file cannot be read, or does not parse (the
/// message names the file, the line and what to write instead).
pub(crate) fn load() -> Result<Config> {
    load_from(&path())
}

/// Reads the configuration file at `path` (missing: empty).
pub(crate) fn load_from(path: &Path) -> Result<Config> {
    match read_text(path)? {
        Some(text) => parse(&text, path),
        None => Ok(Config::default()),
    }
}

/// The largest configuration file read, bytes. A uraid.conf of a
/// thousand arrays is about 300 KiB; a larger one is refused before it is
/// parsed (a 50 MiB string once took 2 GB to parse).
pub(crate) const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The text of the configuration file at `path`, `None` when there is
/// none. Errors: it cannot be read, is larger than [`MAX_CONFIG_BYTES`]
/// (told before any of it is read), or is not UTF-8.
pub(crate) fn read_text(path: &Path) -> Result<Option<String>> {
    use std::io::Read;
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read the configuration file {}", path.display())),
    };
    let too_big = |n: u64| {
        anyhow!(
            "the configuration file {} is {n} bytes or more, larger than the {MAX_CONFIG_BYTES} bytes (1 MiB) read: a \
             uraid.conf holds a few KiB; is it the right file?",
            path.display()
        )
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if len > MAX_CONFIG_BYTES {
        return Err(too_big(len));
    }
    // A file that grows meanwhile (or a pipe) is cut at the bound too.
    let mut bytes = Vec::new();
    f.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read the configuration file {}", path.display()))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(too_big(bytes.len() as u64));
    }
    String::from_utf8(bytes).map(Some).map_err(|e| anyhow!("the configuration file {} is not UTF-8 text ({e})", path.display()))
}

/// `s` as status and scan lines print a value (a device path): as it is
/// when it holds only letters, digits and `/ . _ - + : @ ~ %`, else in
/// double quotes with the escapes of a TOML basic string (the syntax of
/// this file: `\"`, `\\`, `\n`, `\t`, `\r`, and `\uXXXX` or
/// `\UXXXXXXXX` for every other control or non-ASCII character), which
/// reads back to `s` exactly. So a path can neither run into the next
/// field, nor start a line of its own, nor send escape sequences to a
/// terminal.
pub(crate) fn quote(s: &str) -> std::borrow::Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:@~%".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            ' '..='~' => out.push(c),
            c if (c as u32) <= 0xffff => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push_str(&format!("\\U{:08X}", c as u32)),
        }
    }
    out.push('"');
    std::borrow::Cow::Owned(out)
}

/// Parses `text`, the content of the file at `path` (named in errors).
pub(crate) fn parse(text: &str, path: &Path) -> Result<Config> {
    let cfg: Config = toml::from_str(text).map_err(|e| {
        // The line number, and the line itself (which names the key).
        let at = match e.span() {
            Some(s) => {
                let start = s.start.min(text.len());
                let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
                let line = text[line_start..].lines().next().unwrap_or("").trim();
                format!(", line {} ({line})", text[..start].matches('\n').count() + 1)
            }
            None => String::new(),
        };
        anyhow!(
            "{}{at}: {} (the keys and their syntax: docs/uraid.conf.md, or contrib/uraid.conf.example)",
            path.display(),
            e.message().trim_end()
        )
    })?;
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for a in &cfg.arrays {
        if let Some((_, other)) = seen.iter().find(|(uuid, _)| *uuid == a.uuid) {
            bail!(
                "{}: the arrays '{other}' and '{}' have the same uuid {}; keep one [[array]] per array",
                path.display(),
                a.name,
                a.uuid
            );
        }
        seen.push((&a.uuid, &a.name));
    }
    Ok(cfg)
}

fn de_globs<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<Vec<String>>, D::Error> {
    let globs = Vec::<String>::deserialize(d)?;
    for g in &globs {
        if let Err(e) = glob::Pattern::new(g) {
            return Err(serde::de::Error::custom(format!(
                "devices pattern '{g}' is not a glob ({e}); write paths with * ? [..] like \"/dev/nvme*n1\""
            )));
        }
    }
    Ok(Some(globs))
}

fn de_uuid<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<String, D::Error> {
    let s = String::deserialize(d)?;
    parse_uuid(&s).map_err(serde::de::Error::custom)
}

/// Checks that `s` is a UUID the way `uraid examine` prints one, and
/// returns it in lowercase.
pub(crate) fn parse_uuid(s: &str) -> Result<String> {
    let t = s.trim().to_ascii_lowercase();
    let shape_ok = t.len() == 36
        && t.char_indices().all(|(i, c)| if [8, 13, 18, 23].contains(&i) { c == '-' } else { c.is_ascii_hexdigit() });
    if !shape_ok {
        bail!("uuid '{s}' is not a UUID; write it as 'uraid examine' prints the array uuid, like 0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f0");
    }
    Ok(t)
}

/// A number or a string in the file (`rebuild-rate = 200` or `"200M"`).
#[derive(Deserialize)]
#[serde(untagged)]
enum NumOrText {
    Num(u64),
    Text(String),
}

fn de_rate<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<u64>, D::Error> {
    let text = match NumOrText::deserialize(d)? {
        NumOrText::Num(n) => n.to_string(),
        NumOrText::Text(t) => t,
    };
    parse_rate(&text).map(Some).map_err(serde::de::Error::custom)
}

/// Parses a rate limit as the command line's `--rate` takes it: a plain
/// number is MB/s (10^6 bytes/s), or a number with units (`250M`).
/// Returns bytes per second. Errors: not a rate, or 0.
pub(crate) fn parse_rate(s: &str) -> Result<u64> {
    let bytes = match s.trim().parse::<u64>() {
        Ok(mb) => mb.checked_mul(1_000_000).ok_or_else(|| anyhow!("rate '{s}' is too large"))?,
        Err(_) => uraid_core::units::parse_rate(s, "rate").map_err(|e| anyhow!("{e}; write MB/s like 200 or \"200M\""))?,
    };
    if bytes == 0 {
        bail!("rate '{s}' must be above 0; leave it out for no limit");
    }
    Ok(bytes)
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<u64>, D::Error> {
    let s = String::deserialize(d)?;
    parse_duration(&s).map(Some).map_err(serde::de::Error::custom)
}

/// A health polling interval: a duration (`5m`), or 0 / `off` for none.
pub(crate) fn parse_health_interval(s: &str) -> Result<u64> {
    match s.trim() {
        "0" | "off" => Ok(0),
        t => parse_duration(t).map_err(|e| anyhow!("{e}; or 0 (off) for no health polling")),
    }
}

fn de_health_interval<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<u64>, D::Error> {
    match NumOrText::deserialize(d)? {
        NumOrText::Num(n) => Ok(Some(n)),
        NumOrText::Text(t) => parse_health_interval(&t).map(Some).map_err(serde::de::Error::custom),
    }
}

fn de_timeout<'de, D: Deserializer<'de>>(d: D) -> std::result::Result<Option<u64>, D::Error> {
    match NumOrText::deserialize(d)? {
        NumOrText::Num(n) => Ok(Some(n)),
        NumOrText::Text(t) if t.trim() == "0" => Ok(Some(0)),
        NumOrText::Text(t) => parse_duration(&t)
            .map(Some)
            .map_err(|e| serde::de::Error::custom(format!("{e}; or 0 to wait for ever"))),
    }
}

/// Parses a duration such as `90s`, `30m`, `12h`, `7d` or `1w` (a whole
/// number and one unit: s, m, h, d, w) into seconds. Errors: another
/// shape, or 0.
pub(crate) fn parse_duration(s: &str) -> Result<u64> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let per = match unit.trim() {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => bail!("duration '{s}' has no unit or an unknown one; write a whole number and s, m, h, d or w, like 12h, 7d or 1w"),
    };
    let n: u64 = num.parse().map_err(|_| anyhow!("duration '{s}' does not start with a whole number; write it like 12h, 7d or 1w"))?;
    let secs = n.checked_mul(per).ok_or_else(|| anyhow!("duration '{s}' is too long"))?;
    if secs == 0 {
        bail!("duration '{s}' must be above 0; leave the key out for no schedule");
    }
    Ok(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"
devices = ["/dev/nvme*n1", "/srv/uraid/*.img"]
[monitor]
program = "/usr/local/sbin/uraid-event"
mail = "root@example.com"
[[array]]
name = "data"
uuid = "0F1E2D3C-4B5A-4978-8695-A4B3C2D1E0F0"
members = ["/dev/loop3", "/dev/loop4"]
journal = "/dev/nvme4n1"
socket = "/run/uraid/data.sock"
metrics = "127.0.0.1:9109"
rebuild-rate = "200M"
scrub-rate = 100
scrub-every = "7d"
max-read-errors = 5
[[array]]
name = "scratch"
uuid = "11111111-2222-3333-4444-555555555555"
"#;

    #[test]
    fn a_full_file_parses() {
        let c = parse(FULL, Path::new("/x.conf")).unwrap();
        assert_eq!(c.devices.as_deref().unwrap().len(), 2);
        let m = c.monitor.as_ref().unwrap();
        assert_eq!(m.mail_command, DEFAULT_MAIL_COMMAND);
        let a = c.array("data").unwrap();
        assert_eq!(a.uuid, "0f1e2d3c-4b5a-4978-8695-a4b3c2d1e0f0");
        assert_eq!(a.rebuild_rate, Some(200_000_000));
        assert_eq!(a.scrub_rate, Some(100_000_000));
        assert_eq!(a.scrub_every, Some(7 * 86_400));
        assert_eq!(a.max_read_errors, Some(5));
        assert_eq!(a.devices(), ["/dev/loop3", "/dev/loop4", "/dev/nvme4n1"]);
        assert_eq!(c.array("11111111-2222-3333-4444-555555555555").unwrap().name, "scratch");
        assert_eq!(c.array("0F1E2D3C-4B5A-4978-8695-A4B3C2D1E0F0").unwrap().name, "data");
        assert!(c.array("nope").is_none());
        assert_eq!(parse("", Path::new("/x")).unwrap(), Config::default());
    }

    #[test]
    fn errors_name_the_file_the_line_and_the_fix() {
        let e = parse("devices = []\n[[array]]\nname = \"a\"\nuuid = \"x\"\n", Path::new("/etc/u.conf")).unwrap_err().to_string();
        assert!(e.contains("/etc/u.conf, line 4") && e.contains("uraid examine"), "{e}");
        let e = parse("\n\n[[array]]\nname = \"a\"\nuuid = \"11111111-2222-3333-4444-555555555555\"\nsockt = \"/s\"\n", Path::new("/c"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("/c, line 6") && e.contains("sockt") && e.contains("socket"), "{e}");
        let e = parse("[[array]]\nname = \"a\"\nuuid = \"11111111-2222-3333-4444-555555555555\"\nscrub-every = \"7x\"\n", Path::new("/c"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 4") && e.contains("12h"), "{e}");
    }

    #[test]
    fn the_documented_examples_parse() {
        let example = include_str!("../../../contrib/uraid.conf.example");
        assert_eq!(parse(example, Path::new("example")).unwrap(), Config::default());
        let uncommented: String =
            example.lines().map(|l| if l.starts_with("#[") || l.starts_with("#") && l[1..].starts_with(|c: char| c.is_ascii_lowercase()) { &l[1..] } else { l }).map(|l| format!("{l}\n")).collect();
        let c = parse(&uncommented, Path::new("example")).unwrap();
        assert_eq!(c.array("data").unwrap().scrub_every, Some(7 * 86_400));
        let m = c.monitor.as_ref().expect("the example's [monitor]");
        assert_eq!((m.health_interval, m.temperature_warn, m.wear_warn, m.spare_warn), (Some(300), Some(70), Some(80), Some(10)));
        assert_eq!(parse_health_interval("off").unwrap(), 0);
        assert!(parse_health_interval("5").unwrap_err().to_string().contains("0 (off)"));
        let doc = include_str!("../../../docs/uraid.conf.md");
        let block = doc.split("```toml\n").nth(1).and_then(|b| b.split("```").next()).expect("a toml example in the doc");
        assert_eq!(parse(block, Path::new("doc")).unwrap().arrays.len(), 2);
    }

    /// Quoted values read back as TOML strings to exactly what was quoted.
    #[test]
    fn quoted_paths_read_back_exactly() {
        for p in ["/dev/loop3", "/srv/a b.img", "/x\nARRAY name=evil uuid=0 devices=/dev/sda", "/e\u{1b}[31mred\u{1b}[0m", "/q\"\\'", "/u/é\u{202e}\u{1F600}", "/c,d=e", ""] {
            let q = quote(p);
            assert!(q.chars().all(|c| (' '..='~').contains(&c)), "{q}");
            assert!(!q.contains('\n'));
            if q.starts_with('"') {
                let back: toml::Value = toml::from_str(&format!("v = {q}")).unwrap_or_else(|e| panic!("{q}: {e}"));
                assert_eq!(back["v"].as_str(), Some(p), "{q}");
            } else {
                assert_eq!(q, p);
            }
        }
        assert_eq!(quote("/dev/nvme0n1"), "/dev/nvme0n1");
    }

    /// A file past the bound is refused before it is read or parsed.
    #[test]
    fn a_huge_file_is_refused_unread() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("uraid.conf");
        let f = std::fs::File::create(&p).unwrap();
        f.set_len(50 << 20).unwrap();
        let e = load_from(&p).unwrap_err().to_string();
        assert!(e.contains("larger than the 1048576 bytes") && e.contains(&p.display().to_string()), "{e}");
        std::fs::write(&p, "devices = [\"/dev/x*\"]\n").unwrap();
        assert!(load_from(&p).unwrap().devices.is_some());
    }

    #[test]
    fn the_ublk_recovery_timeout_is_a_duration_or_0() {
        let t = |s: &str| parse(&format!("ublk-recovery-timeout = {s}\n"), Path::new("/c")).map(|c| c.ublk_recovery_timeout());
        assert_eq!(t("\"2m\"").unwrap(), 120);
        assert_eq!(t("\"30s\"").unwrap(), 30);
        assert_eq!(t("45").unwrap(), 45);
        assert_eq!(t("0").unwrap(), 0);
        assert_eq!(t("\"0\"").unwrap(), 0);
        assert_eq!(parse("", Path::new("/c")).unwrap().ublk_recovery_timeout(), DEFAULT_UBLK_RECOVERY_TIMEOUT);
        let e = t("\"2 minutes\"").unwrap_err().to_string();
        assert!(e.contains("line 1") && e.contains("0 to wait for ever"), "{e}");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s").unwrap(), 90);
        assert_eq!(parse_duration("30m").unwrap(), 1800);
        assert_eq!(parse_duration("12h").unwrap(), 43_200);
        assert_eq!(parse_duration(" 1w ").unwrap(), 604_800);
        for bad in ["", "7", "d", "7x", "0d", "1.5h", "-1d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
