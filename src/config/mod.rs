//! Settings and credentials: the TOML config file, a CHAP credentials file,
//! the environment, and the initiator name.
//!
//! The settings the command line and the file share (timeouts, digests,
//! the cache, threads), their syntax, rules and built-in defaults are in
//! [`settings`]; the file's tables and loading in `file.rs`; CHAP in
//! `credentials.rs`.
//!
//! # Where CHAP credentials come from
//!
//! Each of the four values (one-way user and secret, mutual user and secret)
//! is taken from the first source that has it, in this order:
//!
//! 1. explicit command-line values (`--chap-user`, …);
//! 2. the URL's user information (`iscsi://user%secret@…`) and its
//!    `?target_user=`/`?target_password=` query;
//! 3. environment variables `RLUN_CHAP_USER`, `RLUN_CHAP_SECRET`,
//!    `RLUN_CHAP_MUTUAL_USER`, `RLUN_CHAP_MUTUAL_SECRET`, or else libiscsi's
//!    `LIBISCSI_CHAP_USERNAME`, `LIBISCSI_CHAP_PASSWORD`,
//!    `LIBISCSI_CHAP_TARGET_USERNAME`, `LIBISCSI_CHAP_TARGET_PASSWORD`;
//! 4. the credentials file given with `--chap-file`;
//! 5. the config file's `[targets.<name>]` entry for the target.
//!
//! Values are picked one by one, so `iscsi://alice@host/...` with
//! `RLUN_CHAP_SECRET` set works. A user without a secret (or the reverse) is
//! an error, and so is mutual CHAP without one-way CHAP (RFC 7143 §12.1.3:
//! the target authenticates itself only in answer to the initiator's CHAP
//! response) and the same secret in both directions (RFC 7143 §12.1.3
//! forbids it). A secret shorter than 12 bytes (96 bits, the minimum RFC
//! 7143 §12.1.3 asks for without IPsec) gives a warning, as do secrets in
//! process arguments. A secret file, credentials file or config file with
//! an inline secret that its group or others can read is refused
//! ([`ConfigError::SecretsReadable`]), with the `chmod 600` that fixes it.
//!
//! Warnings are returned, never printed: the caller decides how to show them.
//! No function here reads the process environment directly; they take an
//! `env` closure (`|k| std::env::var(k).ok()` in the binary) so tests stay
//! hermetic.

mod credentials;
mod error;
mod file;
pub mod settings;

pub use credentials::{ChapCredentials, CliCreds, Credentials, MIN_CHAP_SECRET_LEN};
pub use error::{ChapRole, ConfigError};
pub use file::{Config, Defaults, TargetEntry, DEFAULT_CONFIG_PATH};

use std::fs;
use std::path::Path;

use crate::url::check_iscsi_name;

/// Prefix of the default initiator name; the host name follows the colon.
pub const DEFAULT_INITIATOR_PREFIX: &str = "iqn.2026-11.org.rlun";

/// Help text on credentials, for `--help` and the man page.
pub const CREDENTIALS_HELP: &str = "\
CHAP CREDENTIALS
    Each value is taken from the first of these that has it:
      1. --chap-user, --chap-secret, --chap-mutual-user, --chap-mutual-secret
      2. the URL: iscsi://user%secret@host/...?target_user=U&target_password=S
      3. RLUN_CHAP_USER, RLUN_CHAP_SECRET, RLUN_CHAP_MUTUAL_USER,
         RLUN_CHAP_MUTUAL_SECRET; or else libiscsi's LIBISCSI_CHAP_USERNAME,
         LIBISCSI_CHAP_PASSWORD, LIBISCSI_CHAP_TARGET_USERNAME,
         LIBISCSI_CHAP_TARGET_PASSWORD
      4. --chap-file PATH, a TOML file with user, secret, mutual_user and
         mutual_secret (keep it mode 0600)
      5. the [targets.<name>] entry in the config file (chap_user,
         chap_secret or chap_secret_file, mutual_user, mutual_secret or
         mutual_secret_file)
    The mutual pair is the name and secret the target must prove it knows.
    Secrets on the command line or in a URL are visible to every local user
    in the process list; prefer the environment or a file. Secrets should be
    at least 12 bytes long, and the mutual secret must differ from the
    one-way secret (RFC 7143).
";

/// The config file format, man-page ready (it becomes `rlun.toml(5)`).
pub const CONFIG_FORMAT_HELP: &str = r#"NAME
    rlun.toml - configuration file for rlun

SYNOPSIS
    /etc/rlun/rlun.toml (another path with --config PATH)

DESCRIPTION
    A TOML file with an optional [defaults] table and any number of
    [targets.<name>] tables. A missing default file is the same as an empty
    one; a file named with --config must exist. Unknown keys are errors.

[defaults]
    initiator_name = "iqn.2026-11.org.rlun:myhost"
        The iSCSI name rlun logs in with (RFC 7143 section 4.2.7). The
        RLUN_INITIATOR_NAME environment variable and --initiator-name take
        precedence. Without any of them rlun uses the InitiatorName= of
        open-iscsi's /etc/iscsi/initiatorname.iscsi when that file exists
        (so target ACLs written for this host's kernel initiator admit rlun
        too), else iqn.2026-11.org.rlun:<host name>, stable for the host.
    threads = 1
        Worker threads of the async runtime (--threads, RLUN_THREADS take
        precedence), 1 to 1024. Only in [defaults]: one runtime serves the
        whole process. Default 1.
    Every setting of the next section, for every target.

SETTINGS
    Each of these may appear in [defaults] and in [targets.<name>]; each is
    also a command-line option of the same name (--connect-timeout, ...).
    The first of these that gives a setting wins: the command line, the
    target's [targets.<name>] entry, [defaults], the built-in default.
    Values are written as on the command line, as TOML strings: durations
    "10s", "500ms", "2m", "1h"; sizes "4k", "256M", "1G". A bare integer
    means what a bare number means there (seconds, bytes). A value the
    command line refuses is refused here too, naming the line and key.
    connect_timeout = "10s"
        How long to wait for the TCP (or RDMA) connection. More than 0.
    login_timeout = "15s"
        How long to wait for the login to complete. More than 0.
    replacement_timeout = "120s"
        When the connection is lost, how long I/O waits, without any
        command completing, while rlun logs in again; then pending and new
        I/O fail. "0" disables reconnecting.
    nop_interval = "5s"
        Ping the target (NOP-Out) after this much silence. "0": no pings.
    nop_timeout = "10s"
        Declare the connection dead when a ping is unanswered this long.
        More than 0.
    command_timeout = "30s"
        Abort and retry a SCSI command unanswered this long. More than 0.
    max_recv_segment = "256k"
        Largest data segment the target may send in one PDU (the
        MaxRecvDataSegmentLength rlun declares), 512 to 16M-1.
    header_digest = "none" | "crc32c" | "prefer-crc32c"
    data_digest = "none" | "crc32c" | "prefer-crc32c"
        What to offer for HeaderDigest and DataDigest (RFC 7143 section
        13.1): "none" offers None, "crc32c" insists on CRC32C, and
        "prefer-crc32c" offers CRC32C,None ("prefer", the short form
        --header-digest also takes, means the same). Unset, rlun offers
        None,CRC32C: None unless the target insists on CRC32C. A URL's
        ?header_digest= goes before the file.
    cache = "none" | "write-through" | "write-back"
        rlun's own cache of LUN data, for mount, serve and attach (bench
        takes it from --cache only). Unset: none for mount (write-through
        with --direct-io), write-through for serve and attach.
    cache_size = "256M"
        Memory cap of rlun's cache for the whole process. At least 1M.
    readahead = "on" | "off"
        Read ahead of sequential streams (true and false work too).
        Default "on".
    writeback_delay = "1s"
        With cache = "write-back", the longest time written data waits in
        memory. "0": write back at once.
    stats_interval = "1m"
        Log each LUN's cache counters (and, with several portals, each
        path's) at this interval, at info level.
        More than 0. Default: never.
    multipath = "off" | "auto"
        "auto": also use, as paths, every portal SendTargets discovery
        through the URL's portal reports for the target. Default "off".
    multipath_policy = "failover" | "round-robin" | "queue-length"
        With several portals (portals = [...], --portal): how I/O is
        spread over the paths. "failover" uses one path at a time and
        another when it fails; "round-robin" each usable path of the best
        ALUA state in turn; "queue-length" the one with the fewest
        commands in flight. Default "failover".
    failback = "immediate" | "manual"
        Whether failover goes back to the preferred path (the ALUA
        preferred port group's, else the URL's portal) as soon as it is
        usable again, or only when the path in use fails. Default
        "immediate".
    path_check_interval = "5s"
        How often each path is checked (TEST UNIT READY, and REPORT
        TARGET PORT GROUPS for a LUN with ALUA). More than 0.
    path_timeout = "5s"
        How long a lost path keeps its commands (its session may log in
        again and resend them itself) before they move to another path.
        More than 0. replacement_timeout applies when no path is usable.
    path_fence = "path-timeout" | "lun-reset"
        How a write caught on a failed path is kept from landing after
        its retry on another: "path-timeout" waits out path_timeout
        first (dm-multipath's way); "lun-reset" sends LOGICAL UNIT RESET
        through a working path once the failed one is given up (it ends
        every task the target still holds) and then the write again at
        once. Reads move at once either way. A reset also aborts other
        hosts' commands on the LUN, which may then wait for their own
        command timeouts: use "lun-reset" only for a LUN no other host
        uses. Default "path-timeout".
    Deprecated: connect_timeout_secs = 10 and login_timeout_secs = 15
    (whole seconds, in [defaults] only) still work, with a warning; give
    either the old or the new key, not both.

[targets.<name>]
    A named target, usable in place of a URL: `rlun mount store /mnt/x`.
    url = "iscsi://10.0.0.5/iqn.2026-11.org.example:store/1"
        Required. Must name a target; the LUN may be left out.
    chap_user = "alice"
    chap_secret = "..."  or  chap_secret_file = "/etc/rlun/store.secret"
        One-way CHAP: the name and secret rlun proves it knows. A secret
        file holds the secret alone (one trailing newline is dropped); a
        relative path is taken from the config file's directory. Give
        chap_secret or chap_secret_file, not both.
    mutual_user = "store-target"
    mutual_secret = "..."  or  mutual_secret_file = "..."
        Mutual CHAP: the name and secret the target must prove it knows.
    portals = ["10.0.1.5", "iser://10.0.2.5:3260"]
        More portals of the same target, each used as a path (multipath,
        as --portal, which replaces this list when given): rlun logs in
        through the URL's portal and each of these, checks that all reach
        the same logical unit, follows the target's ALUA states and moves
        I/O off a path that fails. See the multipath settings above.
    metrics_listen = "127.0.0.1:9860"
        Serve Prometheus metrics at http://ADDR:PORT/metrics when this
        target is served by its name (rlun mount NAME DIR, the
        rlun-mount@NAME, rlun-serve@NAME, rlun-attach@NAME and
        rlun-attach-ublk@NAME units), as
        --metrics-listen does; the command line's goes first.
    metrics_allow_remote = true
        Let metrics_listen be an address other hosts can reach (the
        endpoint has no authentication). Default false: loopback only.
    Any setting of SETTINGS, for this target only.

    A file that holds secrets must be readable by its owner only (chmod 600):
    rlun refuses a secret file, a credentials file, or this file when it
    holds a secret inline, if its group or others can read it.

SYSTEMD
    The packages install four unit templates that run a target of this
    file by its name; the instance name is the <name> of [targets.<name>]:
    rlun-mount@<name>.service
        rlun mount <name> /run/rlun/mount/<name>: each disk LUN as a file
        in that directory (`systemctl enable --now rlun-mount@store`).
    rlun-serve@<name>.service
        rlun serve <name> --socket /run/rlun/nbd/<name>.sock: each disk LUN
        as the NBD export lun<N> on that socket (mode 0600: root's clients).
    rlun-attach@<name>.service
        rlun attach <name>: the target's one disk LUN (or the LUN its url
        names) as the first free /dev/nbdN, shown in the unit's status and
        by `rlun list`; the unit loads the nbd module first.
    rlun-attach-ublk@<name>.service
        rlun attach --ublk <name>: the same LUN as /dev/ublkbN (Linux 6.0+
        with ublk_drv, loaded by the unit). When rlun dies the kernel keeps
        the device and holds its I/O; the unit's restart recovers it, and
        the I/O completes (write-through or none cache only: a write-back
        cache's unwritten data dies with the process).
    The mount point, the socket and the device follow that fixed layout;
    timeouts, the cache and threads come from this file (the target's
    entry, or [defaults]), so an instance needs no options of its own. To
    use another layout, replace the unit's command with a drop-in
    (`systemctl edit rlun-mount@store`: an empty ExecStart= line, then your
    ExecStart=). All are Type=notify: the unit is started only when
    the mount answers, the socket accepts clients or the device is
    configured. Stopping writes back cached data, logs out and unmounts or
    detaches (rlun-attach first flushes the device's dirty pages) within
    TimeoutStopSec=150; the unit fails when written data did not reach the
    target. Restart=on-failure; LimitMEMLOCK=infinity for iSER. Secret
    files must lie outside /home and /root for the serve and attach units
    (ProtectHome=yes).

EXAMPLE
    [defaults]
    initiator_name = "iqn.2026-11.org.example:db1"
    header_digest = "prefer-crc32c"
    connect_timeout = "5s"
    replacement_timeout = "5m"

    [targets.store]
    url = "iscsi://10.0.0.5/iqn.2026-11.org.example:store/1"
    chap_user = "db1"
    chap_secret_file = "store.secret"
    cache = "write-back"
    cache_size = "1G"
"#;

/// open-iscsi's initiator name file, used when nothing else names one.
pub const OPEN_ISCSI_NAME_FILE: &str = "/etc/iscsi/initiatorname.iscsi";

/// The initiator name: `cli`, else `RLUN_INITIATOR_NAME`, else
/// `[defaults] initiator_name`, else open-iscsi's
/// [`OPEN_ISCSI_NAME_FILE`], else [`default_initiator_name`]. Checked
/// against RFC 7143 §4.2.7.
pub fn resolve_initiator_name(
    cli: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
    config: &Config,
) -> Result<String, ConfigError> {
    resolve_initiator_name_with(cli, env, config, Path::new(OPEN_ISCSI_NAME_FILE))
}

/// [`resolve_initiator_name`] with open-iscsi's file at `open_iscsi_file`.
pub fn resolve_initiator_name_with(
    cli: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
    config: &Config,
    open_iscsi_file: &Path,
) -> Result<String, ConfigError> {
    let (name, from) = if let Some(n) = cli {
        (n.to_string(), "the command line".to_string())
    } else if let Some(n) = env("RLUN_INITIATOR_NAME").filter(|n| !n.is_empty()) {
        (n, "RLUN_INITIATOR_NAME".to_string())
    } else if let Some(n) = &config.defaults.initiator_name {
        (n.clone(), "[defaults] initiator_name".to_string())
    } else if let Some(n) = fs::read_to_string(open_iscsi_file)
        .ok()
        .and_then(|t| parse_open_iscsi_name(&t))
    {
        (n, open_iscsi_file.display().to_string())
    } else {
        return Ok(default_initiator_name());
    };
    check_iscsi_name(&name).map_err(|source| ConfigError::BadInitiatorName { from, source })?;
    Ok(name)
}

/// The `InitiatorName=` of an open-iscsi `initiatorname.iscsi` file
/// (comments start with `#`; the last assignment wins, as in iscsid).
pub fn parse_open_iscsi_name(text: &str) -> Option<String> {
    text.lines()
        .rev()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.strip_prefix("InitiatorName="))
        .map(|v| v.trim().to_string())
        .find(|v| !v.is_empty())
}

/// `iqn.2026-11.org.rlun:<hostname>`, with the host name read from
/// `/proc/sys/kernel/hostname` or `/etc/hostname` ("localhost" if neither).
pub fn default_initiator_name() -> String {
    let host = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .filter_map(|p| fs::read_to_string(p).ok())
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty());
    initiator_name_for_host(host.as_deref().unwrap_or("localhost"))
}

/// `iqn.2026-11.org.rlun:<host>`, with the host name lower-cased and any
/// character an iSCSI name cannot hold replaced by `-`.
pub fn initiator_name_for_host(host: &str) -> String {
    let clean: String = host
        .trim()
        .chars()
        .take(MAX_HOST_IN_NAME)
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let clean = if clean.is_empty() {
        "localhost".to_string()
    } else {
        clean
    };
    format!("{DEFAULT_INITIATOR_PREFIX}:{clean}")
}

/// Room for the host name within the 223-byte limit (RFC 7143 §4.2.7.1).
const MAX_HOST_IN_NAME: usize = crate::url::MAX_ISCSI_NAME_LEN - DEFAULT_INITIATOR_PREFIX.len() - 1;

#[cfg(test)]
mod tests;
