//! [`ConnectOpts`]: the connection, login and multipath options every
//! subcommand that logs in shares.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::{parse_duration, parse_segment_size, parse_timeout, DigestChoice};
use crate::config::settings::{Failback, MultipathMode, MultipathPolicy, PathFence, Settings};

/// Options for connecting and logging in, shared by every subcommand that
/// logs in. Each but the CHAP ones can also come from the config file
/// (rlun.toml(5)): the command line goes first, then the target's entry,
/// then [defaults], then the default shown.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Connection options")]
pub struct ConnectOpts {
    /// Our iSCSI name [default: see --help].
    ///
    /// Default: --initiator-name, else RLUN_INITIATOR_NAME, else the config file's
    /// initiator_name, else the InitiatorName= of open-iscsi's
    /// /etc/iscsi/initiatorname.iscsi, else iqn.2026-11.org.rlun:<hostname>.
    #[arg(long, value_name = "IQN", env = "RLUN_INITIATOR_NAME", hide_env = true)]
    pub initiator_name: Option<String>,

    /// CHAP user name.
    ///
    /// The secret comes from RLUN_CHAP_SECRET, --chap-file or the config
    /// file.
    #[arg(long, value_name = "NAME")]
    pub chap_user: Option<String>,

    /// File with CHAP credentials (TOML).
    ///
    /// Its keys: user, secret, mutual_user, mutual_secret. Keep it mode
    /// 0600.
    #[arg(long, value_name = "PATH")]
    pub chap_file: Option<PathBuf>,

    /// Header digest.
    ///
    /// none offers None, crc32c insists on CRC32C, prefer-crc32c offers
    /// CRC32C,None. Without any setting rlun offers None,CRC32C: None
    /// unless the target insists on CRC32C.
    #[arg(long, value_enum, value_name = "MODE")]
    pub header_digest: Option<DigestChoice>,

    /// Data digest.
    ///
    /// As --header-digest.
    #[arg(long, value_enum, value_name = "MODE")]
    pub data_digest: Option<DigestChoice>,

    /// Give up connecting after this long [default: 10s].
    ///
    /// More than 0.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout)]
    pub connect_timeout: Option<Duration>,

    /// Give up logging in after this long [default: 15s].
    ///
    /// More than 0.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, hide_short_help = true)]
    pub login_timeout: Option<Duration>,

    /// How long I/O waits for a reconnect [default: 120s].
    ///
    /// When the connection is lost, keep logging in again until I/O has
    /// waited this long without any command completing, then fail pending
    /// and new I/O (a login alone does not count). 0 disables
    /// reconnecting.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub replacement_timeout: Option<Duration>,

    /// Ping the target (NOP-Out) after this much silence [default: 5s].
    ///
    /// 0 sends no pings.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, hide_short_help = true)]
    pub nop_interval: Option<Duration>,

    /// Declare the connection dead when a ping is unanswered this long [default: 10s].
    ///
    /// More than 0.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, hide_short_help = true)]
    pub nop_timeout: Option<Duration>,

    /// Largest data segment the target may send us in one PDU [default: 256k].
    ///
    /// The MaxRecvDataSegmentLength we declare, 512 to 16M-1.
    #[arg(long, value_name = "SIZE", value_parser = parse_segment_size, hide_short_help = true)]
    pub max_recv_segment: Option<u32>,

    /// Abort and retry a SCSI command unanswered this long [default: 30s].
    ///
    /// More than 0.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, hide_short_help = true)]
    pub command_timeout: Option<Duration>,

    /// Another portal of the target as one more path (multipath).
    ///
    /// HOST[:PORT], or iscsi://HOST[:PORT] / iser://HOST[:PORT] for a path
    /// over another transport than the URL's; repeat for more paths.
    /// rlun logs in through the URL's portal and each of these, checks
    /// that every path reaches the same logical unit (VPD page 0x83), and
    /// moves I/O to another path when one fails, without an error to the
    /// file, the export or the block device above.
    #[arg(long = "portal", value_name = "PORTAL")]
    pub portals: Vec<String>,

    /// Also use every portal discovery reports for the target [default: off].
    ///
    /// auto: before logging in, ask the URL's portal (SendTargets) which
    /// portals the target has, and use each as a path besides the URL's
    /// and --portal's (as people set up open-iscsi for dm-multipath).
    /// A target that reports one portal gives one path.
    #[arg(
        long,
        value_enum,
        value_name = "MODE",
        help_heading = "Multipath options",
        hide_short_help = true
    )]
    pub multipath: Option<MultipathMode>,

    /// How I/O is spread over the paths [default: failover].
    ///
    /// failover: one path at a time, another when it fails; round-robin:
    /// each usable path of the best ALUA state in turn; queue-length: the
    /// one with the fewest commands in flight.
    #[arg(
        long,
        value_enum,
        value_name = "POLICY",
        help_heading = "Multipath options",
        hide_short_help = true
    )]
    pub multipath_policy: Option<MultipathPolicy>,

    /// Whether failover goes back to the preferred path when it returns [default: immediate].
    ///
    /// The preferred path is the one to the ALUA preferred port group, else
    /// the URL's portal.
    #[arg(
        long,
        value_enum,
        value_name = "WHEN",
        help_heading = "Multipath options",
        hide_short_help = true
    )]
    pub failback: Option<Failback>,

    /// How often each path is checked (TEST UNIT READY, ALUA states) [default: 5s].
    ///
    /// More than 0.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, help_heading = "Multipath options", hide_short_help = true)]
    pub path_check_interval: Option<Duration>,

    /// How long a lost path keeps its commands before they move to another path [default: 5s].
    ///
    /// Within it the path's own session may log in again and resend them
    /// itself; after it they are re-issued on another path. More than 0.
    /// --replacement-timeout applies when no path is usable.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, help_heading = "Multipath options", hide_short_help = true)]
    pub path_timeout: Option<Duration>,

    /// How a write caught on a failed path is kept from landing after its retry [default: path-timeout].
    ///
    /// path-timeout: the path's writes wait for --path-timeout, then move
    /// to another path, as with dm-multipath. lun-reset: once the path is
    /// given up, LOGICAL UNIT RESET through a working path ends every task
    /// the target still holds, and the writes are sent again there at
    /// once (a shorter stall, and no held write can land late). The reset
    /// also aborts other hosts' commands on the LUN, and a target may end
    /// them without an answer, so those hosts wait for their own command
    /// timeouts: choose lun-reset only for a LUN no other host uses. Reads
    /// move at once either way.
    #[arg(
        long,
        value_enum,
        value_name = "HOW",
        help_heading = "Multipath options",
        hide_short_help = true
    )]
    pub path_fence: Option<PathFence>,
}

impl ConnectOpts {
    /// The settings given on the command line.
    pub fn settings(&self) -> Settings {
        Settings {
            connect_timeout: self.connect_timeout,
            login_timeout: self.login_timeout,
            replacement_timeout: self.replacement_timeout,
            nop_interval: self.nop_interval,
            nop_timeout: self.nop_timeout,
            command_timeout: self.command_timeout,
            max_recv_segment: self.max_recv_segment,
            header_digest: self.header_digest.map(DigestChoice::pref),
            data_digest: self.data_digest.map(DigestChoice::pref),
            multipath: self.multipath,
            multipath_policy: self.multipath_policy,
            failback: self.failback,
            path_check_interval: self.path_check_interval,
            path_timeout: self.path_timeout,
            path_fence: self.path_fence,
            ..Settings::default()
        }
    }
}
