//! Command-line definitions (clap). The man page `man/rlun.8` is generated
//! from these definitions (`rlun generate-man man/`), so `--help` and the man
//! page never disagree.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod connect;
mod help;
pub use connect::ConnectOpts;
use help::{ATTACH_AFTER_HELP, MOUNT_AFTER_HELP, SERVE_AFTER_HELP, STATS_AFTER_HELP};
use rlun_iscsi::proto::digest::DigestPref;

use crate::config::settings::Settings;
pub use crate::config::settings::{
    parse_cache_size, parse_duration, parse_segment_size, parse_size, parse_threads, parse_timeout,
    CacheChoice, Failback, MultipathPolicy, OnOff,
};

/// Exit codes that scripts can rely on (also listed in `rlun --help`):
/// [`crate::exit`], under the name it always had here.
pub use crate::exit;

const AFTER_HELP: &str = "\
URLs:
  iscsi://[user[%password]@]host[:port]/<target-iqn>/<lun>   one LUN
  iscsi://host[:port]/<target-iqn>                            all LUNs of a target
  iscsi://host[:port]  or  host[:port]                        a portal (discovery)
  iser://...   (same forms)                                   iSER: iSCSI over RDMA
  IPv6 hosts go in brackets: iscsi://[::1]:3260/...

Credentials (CHAP) should not be given on the command line, where other users
can read them: use RLUN_CHAP_USER/RLUN_CHAP_SECRET (and RLUN_CHAP_MUTUAL_USER/
RLUN_CHAP_MUTUAL_SECRET for mutual CHAP), --chap-file, or the config file.

Exit codes:
  0 success            1 other failure        2 usage error (bad URL/option)
  3 portal unreachable 4 login refused (auth, or iSER refused by the target)
  5 target or LUN not found  6 I/O refused by LUN  7 target protocol error
  8 local file error   129/130/143 cp stopped by SIGHUP/SIGINT/SIGTERM

Logging: -v/-vv/-vvv or RUST_LOG=rlun=debug; -q for errors only.
Under systemd (stderr on the journal, JOURNAL_STREAM) rlun logs to journald
natively: PRIORITY from the level (error 3, warn 4, info 5, debug 6), and
structured fields RLUN_TARGET (IQN) and RLUN_PORTAL (host:port) on every
entry of mount/serve/attach, plus each event's own, prefixed: RLUN_LUN,
RLUN_ERROR... (TARGET= is the Rust module, set by the journald layer).
  journalctl -u rlun-mount@store -o json     # with the fields
  journalctl RLUN_LUN=1 -p warning           # one LUN's warnings and errors
--log-format text|json|journal forces one (auto is the default).

Threads: --threads 1 (the default) runs each session's whole hot path on
one thread: completing an I/O wakes no other thread, which gives the least
CPU per I/O and, with one or a few LUNs, the most throughput (see
benches/compare.sh). Raise it only when one process serves many busy LUNs
(`rlun serve`/`mount` of several) and a single core is the limit. Blocking
work (file I/O of `rlun cp`) runs in a separate pool whatever it says.

Settings: the connection and cache options can also be set in the config
file, for every target ([defaults]) or one ([targets.NAME]), written the
same way (\"10s\", \"256M\"); the command line goes first (rlun.toml(5)).";

/// What `rlun -h` shows after the options (`--help` shows [`AFTER_HELP`]).
const SHORT_AFTER_HELP: &str = "\
URLs: iscsi://[user@]host[:port]/<target-iqn>[/<lun>], or iser://... over RDMA.
Each command's -h is brief; --help and the man pages (rlun(8), rlun-<command>(8),
rlun.toml(5)) say more: URL forms, CHAP credentials, exit codes.";

#[derive(Debug, Parser)]
#[command(
    name = "rlun",
    version,
    about = "Userspace iSCSI/iSER initiator: inspect, copy, benchmark, mount, serve and attach LUNs",
    long_about = "rlun logs in to remote SCSI targets over iSCSI (TCP) or iSER (RDMA) and works \
                  with their LUNs from user space: discover what a portal offers, inspect a LUN, \
                  copy whole LUNs to and from files, benchmark them, mount them as files (FUSE), \
                  serve them to NBD clients and attach them as /dev/nbdN block devices.",
    after_help = SHORT_AFTER_HELP,
    after_long_help = AFTER_HELP,
    propagate_version = true
)]
pub struct Cli {
    /// More logging (-v info, -vv debug, -vvv trace).
    ///
    /// RUST_LOG (e.g. RUST_LOG=rlun=debug) overrides it.
    #[arg(
        short,
        long,
        action = clap::ArgAction::Count,
        global = true,
        help_heading = "Global options"
    )]
    pub verbose: u8,

    /// Only print errors.
    #[arg(
        short,
        long,
        global = true,
        conflicts_with = "verbose",
        help_heading = "Global options"
    )]
    pub quiet: bool,

    /// How log lines are written: text for people, json for machines,
    /// journal for systemd's journal.
    ///
    /// auto (the default): text, or journal when systemd connected stderr
    /// to the journal (JOURNAL_STREAM names stderr). json: one object per
    /// line with timestamp, level, fields (message and the event's own
    /// fields, such as lun and error) and target, for log collectors.
    /// journal: entries sent to journald with PRIORITY and structured
    /// fields (RLUN_TARGET, RLUN_PORTAL, RLUN_LUN, RLUN_ERROR…); text on
    /// stderr when the journal cannot be reached. Also RLUN_LOG_FORMAT.
    #[arg(
        long,
        global = true,
        value_name = "FORMAT",
        value_enum,
        default_value_t = LogFormat::Auto,
        env = "RLUN_LOG_FORMAT",
        hide_env = true,
        help_heading = "Global options"
    )]
    pub log_format: LogFormat,

    /// Worker threads of the async runtime [default: 1].
    ///
    /// Raise it only when one process serves many busy LUNs (`rlun --help`
    /// says why). Also RLUN_THREADS, or `threads` in the config file's
    /// [defaults].
    #[arg(
        long,
        global = true,
        value_name = "N",
        env = "RLUN_THREADS",
        hide_env = true,
        value_parser = parse_threads,
        help_heading = "Global options"
    )]
    pub threads: Option<usize>,

    /// Configuration file [default: /etc/rlun/rlun.toml].
    ///
    /// Named targets, CHAP credentials, and the connection and cache
    /// settings of every target or of one (rlun.toml(5)). Also RLUN_CONFIG.
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        env = "RLUN_CONFIG",
        hide_env = true,
        help_heading = "Global options"
    )]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the targets a portal offers (SendTargets discovery).
    ///
    /// A portal that closes the connection during or right after the
    /// discovery login (tgtd does, with no targets bound to it) fails with
    /// exit code 3 and a hint: it may have no targets, or none an ACL lets
    /// this initiator see. CHAP credentials (RLUN_CHAP_USER/SECRET, the
    /// config) are offered as AuthMethod=CHAP,None, as iscsiadm does: a
    /// portal whose discovery takes no CHAP still answers.
    ///
    /// With --json: an array with one object per target: `target` (its
    /// name), `url` (iscsi://portal/name), `addresses` (each with
    /// `address` as the target sent it, `host`, `port`,
    /// `portal_group_tag` or null).
    Discover {
        /// Portal: iscsi://host[:port] or host[:port].
        portal: String,
        /// Print JSON instead of text (fields in rlun-discover(8)).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: ConnectOpts,
    },
    /// List LUNs with size, block size, vendor and product.
    ///
    /// Given a portal, lists the LUNs of every target it offers; given a
    /// target URL, lists that target's LUNs. Targets of a portal that
    /// cannot be listed (CHAP without credentials, an ACL, a lost
    /// connection) do not hide the others: their LUNs are left out, one
    /// error at the end names each with its cause, and the exit code is
    /// theirs when they all fail alike (4 when all want CHAP), else 1.
    /// Credentials given for a portal are offered to each target; a target
    /// that refuses the CHAP offer itself is listed without them.
    ///
    /// With --json: an array with one object per LUN: `target`, `portal`,
    /// `lun`, `url`, `device_type` ("disk", "storage array controller"…),
    /// `disk` (true or false), `size_bytes`, `block_size` and `read_only`
    /// (null when not a disk), `vendor`, `product`. Sizes are bytes.
    Ls {
        /// Portal or target URL.
        url: String,
        /// Print JSON instead of a table (fields in rlun-ls(8)).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: ConnectOpts,
    },
    /// Show everything about one LUN.
    ///
    /// Its inquiry data, capacity and VPD limits, its ALUA support, and
    /// the negotiated session parameters; with --portal, each path and its
    /// ALUA state (`multipath` in --json, as `rlun paths` shows it).
    Info {
        /// LUN URL: iscsi://host[:port]/<iqn>/<lun>.
        url: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        conn: ConnectOpts,
    },
    /// Copy a whole LUN to a file, a file to a LUN, or a LUN to a LUN.
    ///
    /// Either side may be a LUN URL or a local file path or block device
    /// (`-` is standard input as source, standard output as destination).
    /// Copying a file to a LUN requires the file to fit; a shorter file
    /// leaves the rest of the LUN untouched. Standard input, a pipe, FIFO or
    /// character device is read in order to its end; if it holds more than
    /// the LUN, the LUN is written full and the copy fails (exit code 6). A
    /// LUN or a regular file is synced at the end; a pipe, FIFO or character
    /// device is written in order and not synced. When a copy into a regular
    /// file fails or is interrupted (SIGINT, SIGTERM, SIGHUP: exit code 130,
    /// 143, 129), the file is cut back to the bytes copied before; into a
    /// LUN, the writes already sent land and the target's cache is flushed.
    /// Either way rlun says how many bytes of the source the destination
    /// holds from its start: the --offset that resumes the copy when the
    /// same command is rerun with it (a block multiple of the LUNs; a
    /// resumed file must hold at least that many bytes; a stream source
    /// skips them).
    ///
    /// A regular destination file is sparse: blocks of 4 KiB that hold only
    /// zeros become holes (--no-sparse writes them). A LUN, a block device
    /// or a stream receives every byte. A terminal shows a progress bar;
    /// --progress prints a line a second elsewhere; a summary line follows
    /// a successful copy. -q shows neither, but a stopped copy still says
    /// how far it got. Writing to standard output ends quietly, with exit
    /// code 0, when its reader goes away (`| head`). A copy of a LUN or file
    /// onto itself is refused (exit code 2).
    Cp {
        /// Source: LUN URL or file.
        src: String,
        /// Destination: LUN URL or file.
        dst: String,
        /// Size of each SCSI transfer.
        #[arg(long, default_value = "1M", value_parser = parse_size)]
        bs: u64,
        /// Transfers kept in flight.
        #[arg(long, default_value_t = 16)]
        qd: u32,
        /// Show progress also when stderr is no terminal (a line a second).
        #[arg(long, overrides_with = "no_progress")]
        progress: bool,
        /// Never show progress.
        #[arg(long)]
        no_progress: bool,
        /// Write the zeros into a file too (default: leave holes).
        #[arg(long)]
        no_sparse: bool,
        /// Start at this byte of both sides (resume a stopped copy).
        #[arg(long, default_value = "0", value_name = "BYTES", value_parser = parse_size)]
        offset: u64,
        /// Set the FUA bit on writes (write through the target's cache).
        #[arg(long)]
        fua: bool,
        #[command(flatten)]
        conn: ConnectOpts,
    },
    /// Measure a LUN: IOPS, MiB/s, latency percentiles and CPU time.
    ///
    /// Write patterns overwrite the LUN's data. With --cache the I/O goes
    /// through rlun's page cache, as a mount's does.
    Bench {
        /// LUN URL.
        url: String,
        /// Access pattern.
        #[arg(long, value_enum, default_value_t = Pattern::Randread)]
        pattern: Pattern,
        /// Block size of each I/O (e.g. 4k, 128k, 1M).
        #[arg(long, default_value = "4k", value_parser = parse_size)]
        bs: u64,
        /// I/Os kept in flight.
        #[arg(long, default_value_t = 32)]
        qd: u32,
        /// How long to run (e.g. 10s, 500ms, 1m).
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        duration: Duration,
        /// Limit I/O to the first SIZE bytes of the LUN (default: whole LUN).
        #[arg(long, value_parser = parse_size)]
        size: Option<u64>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Confirm that a write pattern may overwrite the LUN.
        #[arg(long)]
        allow_write: bool,
        #[command(flatten)]
        conn: ConnectOpts,
        #[command(flatten)]
        cache: CacheOpts,
    },
    /// Mount a target's LUNs as files (FUSE): `lun<N>` for each disk LUN.
    ///
    /// Each LUN appears as a regular file named after its number (`lun1`,
    /// `lun2`…) whose size is the LUN's capacity: dd it, loop-mount it, hand
    /// it to a VM or a database. A target URL mounts every disk LUN of the
    /// target, a LUN URL just that LUN; a bare portal is refused (pick a
    /// target with `rlun discover`). A write-protected LUN, or every LUN with
    /// --read-only, is a read-only file (EROFS on write). A directory that
    /// is already a mount point is refused (exit 8): unmount it first.
    ///
    /// rlun stays in the foreground until SIGINT/SIGTERM or `rlun umount`,
    /// then writes back cached data, logs out and unmounts; --daemon detaches
    /// once the mount is ready. The mount shows in /proc/mounts as
    /// `rlun:<target-iqn>` of type `fuse.rlun`. fsync/fdatasync flush the LUN
    /// (SYNCHRONIZE CACHE); fallocate --punch-hole unmaps (or zeroes) and
    /// --zero-range zeroes blocks on the target.
    #[command(
        after_help = "Example: rlun mount iscsi://10.0.0.5/iqn.2026-11.org.example:store /mnt/store",
        after_long_help = MOUNT_AFTER_HELP
    )]
    Mount {
        /// Target or LUN URL, or a config-file target name.
        ///
        /// A target URL iscsi://host[:port]/<iqn> names every disk LUN, a
        /// LUN URL iscsi://host[:port]/<iqn>/<lun> that LUN.
        target: String,
        /// Existing directory to mount on.
        mountpoint: PathBuf,
        #[command(flatten)]
        mount: MountOpts,
        #[command(flatten)]
        daemon: DaemonOpts,
        #[command(flatten)]
        conn: ConnectOpts,
        #[command(flatten)]
        cache: CacheOpts,
    },
    /// Unmount an rlun mount; wait until its rlun has written back.
    ///
    /// Waits until the rlun process of the mount has written back cached
    /// data and logged out. Fails, with the rlun process's message and exit code, when data
    /// written through the mount could not be made durable on the target
    /// (for instance because the target is gone for good).
    Umount {
        /// Where the LUNs are mounted.
        mountpoint: PathBuf,
        /// Detach even while files are open (lazy unmount); rlun serves them
        /// until they are closed, then exits. umount waits for that up to
        /// --timeout and fails, saying so, while files are still open.
        #[arg(short, long)]
        lazy: bool,
        /// Longest wait for the rlun process to finish.
        #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Serve a target's LUNs to NBD clients: `lun<N>` for each disk LUN.
    ///
    /// Each disk LUN of the target (or the one LUN the URL names) becomes
    /// an NBD export named `lun<N>`; the default export (empty name) is the
    /// first. NBD clients reach them by URI, e.g.
    /// `nbd+unix:///lun1?socket=PATH` or `nbd://host:port/lun1` (tested
    /// with qemu-img/qemu-io and libnbd's nbdinfo, nbdcopy and nbdsh). All
    /// connections to one LUN share one page cache and one iSCSI session,
    /// so clients may use several connections at once (multi-conn).
    ///
    /// rlun stays in the foreground until SIGINT/SIGTERM, then lets the
    /// requests in flight finish, writes back cached data and logs out.
    #[command(
        after_help = "Example: rlun serve iscsi://10.0.0.5/iqn.2026-11.org.example:store --socket /run/rlun/store.sock",
        after_long_help = SERVE_AFTER_HELP
    )]
    Serve {
        /// Target or LUN URL, or a config-file target name.
        ///
        /// A target URL iscsi://host[:port]/<iqn> names every disk LUN, a
        /// LUN URL iscsi://host[:port]/<iqn>/<lun> that LUN.
        target: String,
        #[command(flatten)]
        serve: ServeOpts,
        #[command(flatten)]
        daemon: DaemonOpts,
        #[command(flatten)]
        conn: ConnectOpts,
        #[command(flatten)]
        cache: CacheOpts,
    },
    /// Attach one LUN as a block device /dev/nbdN or /dev/ublkbN (root; nbd or ublk_drv).
    ///
    /// With --ublk (or a /dev/ublkbN device) the kernel's userspace block
    /// driver serves it instead of nbd: no socket between the kernel and
    /// rlun, one queue thread per --queues, and a device that survives a
    /// restart of rlun (`rlun attach --recover /dev/ublkbN`).
    ///
    /// rlun serves the LUN to the kernel's NBD client over socketpairs
    /// (one per --connections) and prints the device it attached. The
    /// device is named (it must be free) or, when left out, the kernel
    /// picks a free one. rlun stays in the foreground until
    /// SIGINT/SIGTERM or `rlun detach`, then fsyncs the device, disconnects
    /// it, lets the requests in flight finish, writes back cached data and
    /// logs out.
    /// Not root, the nbd module not loaded (`modprobe nbd`) and a device in
    /// use are refused before any network I/O, with exit code 1.
    #[command(
        after_help = "Example: rlun attach iscsi://10.0.0.5/iqn.2026-11.org.example:store/1 --daemon",
        after_long_help = ATTACH_AFTER_HELP
    )]
    Attach {
        /// LUN URL, or a target URL or config-file name of a one-LUN target.
        ///
        /// A LUN URL is iscsi://host[:port]/<iqn>/<lun>; a target URL
        /// iscsi://host[:port]/<iqn> or a config-file target name does when
        /// its target has one disk LUN.
        target: String,
        /// The device, e.g. /dev/nbd0 or /dev/ublkb0; a free one when left out.
        device: Option<PathBuf>,
        #[command(flatten)]
        attach: AttachOpts,
        #[command(flatten)]
        daemon: DaemonOpts,
        #[command(flatten)]
        conn: ConnectOpts,
        #[command(flatten)]
        cache: CacheOpts,
    },
    /// Detach a device attached by `rlun attach`.
    ///
    /// rlun fsyncs the device (what the kernel buffers for it is written
    /// to the target), then the owning rlun fsyncs it again, disconnects it, writes back and logs out;
    /// fails if written data did not reach the target. A device left
    /// connected by an rlun that was killed is disconnected directly.
    Detach {
        /// The device, e.g. /dev/nbd0 or /dev/ublkb0.
        device: PathBuf,
        /// Longest wait for the rlun process to finish.
        #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Look at the target again: new, removed and resized LUNs.
    ///
    /// Asks the rlun that serves WHAT (a mount point, /dev/nbdN, an NBD
    /// socket or nbd://ADDR; every one of this user's when left out) to
    /// rescan its target, as `iscsiadm -m session -R` does for the kernel
    /// initiator, waits for it and prints what changed. rlun follows the
    /// target's own reports by itself (UNIT ATTENTION CAPACITY DATA HAS
    /// CHANGED, REPORTED LUNS DATA HAS CHANGED); this is for targets that
    /// do not send them (LIO after a backstore grew). The same as SIGHUP
    /// to the serving rlun (`systemctl reload`).
    Rescan {
        /// Mount point, /dev/nbdN, NBD socket or nbd://ADDR (see `rlun list`).
        what: Option<String>,
        /// Longest wait for each rescan.
        #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Show what serving rlun processes do: I/O, latency, cache, reconnects.
    ///
    /// Asks the rlun that serves WHAT (a mount point, /dev/nbdN, an NBD
    /// socket, nbd://ADDR, or a control socket; every one of this user's
    /// when left out) over its control socket and prints one line per LUN,
    /// like `iostat -x`: reads and writes per second, MiB/s, latency
    /// percentiles (p50, p99, p99.9, in ms), requests in flight, cache hit
    /// ratio, dirty bytes, reconnects and failed requests. Without --watch
    /// the rates are since the process started serving; with --watch they
    /// are over each interval.
    #[command(after_long_help = STATS_AFTER_HELP)]
    Stats {
        /// Mount point, /dev/nbdN, NBD socket, nbd://ADDR or control socket.
        what: Option<String>,
        /// Sample again every INTERVAL (1s when not given) until Ctrl-C or q.
        ///
        /// In a terminal the table is redrawn in place; otherwise (and with
        /// --json) each sample is written after the last.
        #[arg(long, value_name = "INTERVAL", num_args = 0..=1, default_missing_value = "1s", value_parser = parse_duration)]
        watch: Option<Duration>,
        /// Print JSON (one object per sample and line) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List what this user's rlun processes have mounted, served, attached.
    ///
    /// One line each with kind (mounted, served, attached), where (mount
    /// point, socket path, nbd://ADDR, device), pid, LUNs, STATE (the
    /// session `up`, `down` while it reconnects, `?` when the process did
    /// not answer; with several paths the usable ones of all, `2/2`), DIRTY (cached data not yet written to the target) and
    /// target. Each process is asked over its control socket (see `rlun
    /// stats`).
    ///
    /// With --json: an array with one object per process: `kind`, `what`,
    /// `endpoints` (the NBD URIs of a server, else `what`), `target`,
    /// `portal`, `luns` (numbers), `pid`, `session_up`, `reconnects`,
    /// `down_seconds` (time without a connection), `dirty_bytes`, `health`
    /// (the one-line summary systemd's status shows), and with several
    /// paths `paths_usable` and `paths` (see `rlun paths`). A process that did
    /// not answer has `session_up` null and `control_error` (why); its
    /// other fields come from the description beside its pid file
    /// (`target` and `portal` null for an older rlun).
    List {
        /// Print JSON instead of a table (fields in rlun-list(8)).
        #[arg(long)]
        json: bool,
    },
    /// Show the paths of a LUN reached through several portals (multipath).
    ///
    /// Asks the rlun that serves WHAT (a mount point, /dev/nbdN, an NBD
    /// socket, nbd://ADDR, or a control socket; every one of this user's
    /// when left out) and prints one line per path of each LUN: portal,
    /// transport, target port group and its ALUA state, whether the path
    /// is up and carries I/O now, commands in flight and completed,
    /// failures and the last one's reason. A LUN with one path says so.
    Paths {
        /// Mount point, /dev/nbdN, NBD socket, nbd://ADDR or control socket.
        what: Option<String>,
        /// Print JSON: per process, per LUN, the policy, failovers and paths.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script (bash, zsh or fish) to standard output.
    ///
    /// bash: `rlun completions bash > /etc/bash_completion.d/rlun`;
    /// zsh: into a directory of `$fpath` as `_rlun`;
    /// fish: `~/.config/fish/completions/rlun.fish`. Packages install them.
    Completions {
        /// The shell.
        shell: Shell,
    },
    /// Watch a ublk device for its rlun (started by `rlun attach --ublk`):
    /// when that rlun dies and no new rlun takes the device over within
    /// TIMEOUT seconds, delete the device so that the I/O it holds fails.
    #[command(hide = true)]
    UblkGuard {
        /// N of /dev/ublkbN.
        device: u32,
        /// The rlun serving it.
        server: u32,
        /// Seconds to wait for a recovery.
        timeout: u64,
    },
    /// Write the man pages into a directory.
    #[command(hide = true)]
    GenerateMan {
        /// Output directory.
        dir: PathBuf,
    },
}

/// Shells `rlun completions` writes scripts for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// Benchmark access patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Uniformly random reads.
    Randread,
    /// Uniformly random writes.
    Randwrite,
}

impl Pattern {
    pub fn is_write(self) -> bool {
        matches!(self, Pattern::Write | Pattern::Randwrite)
    }
    pub fn is_random(self) -> bool {
        matches!(self, Pattern::Randread | Pattern::Randwrite)
    }
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Read => "read",
            Pattern::Write => "write",
            Pattern::Randread => "randread",
            Pattern::Randwrite => "randwrite",
        }
    }
}

/// rlun's page cache, for every command that opens a device (`mount`,
/// `bench`, `serve`, `attach`). Each can also come from the config file.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Cache options")]
pub struct CacheOpts {
    /// Cache mode.
    ///
    /// Default: for mount none (the kernel page cache already caches),
    /// write-through with --direct-io; for serve and attach write-through
    /// (shared by every connection; it wins for 4 KiB random and hot
    /// re-reads, and reads of 128 KiB or more streamed with several in
    /// flight, as nbdcopy does, bypass it); for bench no cache at all (I/O
    /// goes straight to the LUN; bench takes the mode from --cache only,
    /// never from the config file).
    #[arg(long, value_enum, value_name = "MODE")]
    pub cache: Option<CacheChoice>,
    /// Memory cap of rlun's cache for the whole process [default: 256M].
    ///
    /// Every LUN the command opens shares it (a mount of a target with 16
    /// LUNs uses at most this much in all, not 16 times it). 7/8 of it (at
    /// least SIZE minus 256M) holds cache pages, reserved once as one
    /// region when the command starts and, over iSER, registered with the
    /// RDMA device once per connection; the rest bounds the cache's reads
    /// and write-backs in flight. At least 1M. Unused with --cache none.
    #[arg(long, value_name = "SIZE", value_parser = parse_cache_size)]
    pub cache_size: Option<u64>,
    /// Read ahead of sequential streams [default: on].
    ///
    /// In rlun's cache; mount also raises the kernel's read-ahead window to
    /// 8 MiB (when rlun may write /sys/class/bdi). Off: no read-ahead at
    /// all.
    #[arg(long, value_enum, value_name = "ON|OFF", hide_possible_values = true)]
    pub readahead: Option<OnOff>,
    /// Longest wait of data in a write-back cache [default: 1s].
    ///
    /// With --cache write-back, data written waits in memory at most this
    /// long before it is written back (0: at once).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub writeback_delay: Option<Duration>,
    /// Log cache counters at this interval [default: never].
    ///
    /// Each LUN's cache counters (hits, misses, read-ahead hits,
    /// evictions, dirty bytes, flushes), at info level; with several
    /// portals also a line per path (up, ALUA state, in use, commands in
    /// flight and completed, errors, failovers). More than 0.
    #[arg(long, value_name = "DURATION", value_parser = parse_timeout, hide_short_help = true)]
    pub stats_interval: Option<Duration>,
}

impl CacheOpts {
    /// The settings given on the command line.
    pub fn settings(&self) -> Settings {
        Settings {
            cache: self.cache,
            cache_size: self.cache_size,
            readahead: self.readahead,
            writeback_delay: self.writeback_delay,
            stats_interval: self.stats_interval,
            ..Settings::default()
        }
    }
}

pub use crate::logging::LogFormat;

/// Foreground or background, and what the process shows of itself
/// (metrics), for every command that serves until stopped (`mount`,
/// `serve`, `attach`).
#[derive(Debug, Clone, Args)]
pub struct DaemonOpts {
    /// Detach once ready (exit 0), or report why it failed.
    ///
    /// Gives up when not ready within the connect and login timeouts plus
    /// 10 s.
    #[arg(short, long)]
    pub daemon: bool,
    /// With --daemon: append log messages to this file.
    ///
    /// Without it they are discarded.
    #[arg(long, value_name = "PATH", requires = "daemon")]
    pub log_file: Option<PathBuf>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics.
    ///
    /// OpenMetrics text: per LUN requests, bytes, errors by kind, the
    /// rlun_command_duration_seconds histogram, cache bytes, hits,
    /// read-ahead and write-back age; per process rlun_session_up,
    /// rlun_reconnects_total and rlun_session_down_seconds_total (names in
    /// README, "Watching rlun"). A loopback address unless
    /// --metrics-allow-remote.
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Let --metrics-listen use an address other hosts can reach.
    ///
    /// The endpoint has no authentication; it tells anyone who can reach
    /// it the target, the LUNs and their load.
    #[arg(long, requires = "metrics_listen", hide_short_help = true)]
    pub metrics_allow_remote: bool,
}

impl DaemonOpts {
    /// What these options ask of [`crate::daemon::launch`].
    pub fn options(&self) -> crate::daemon::Options {
        crate::daemon::Options {
            background: self.daemon,
            log_file: self.log_file.clone(),
        }
    }

    /// Where to serve metrics ([`crate::metrics`]).
    pub fn metrics(&self) -> Option<crate::metrics::Listen> {
        self.metrics_listen.map(|addr| crate::metrics::Listen {
            addr,
            allow_remote: self.metrics_allow_remote,
        })
    }
}

/// Options of `rlun mount`.
#[derive(Debug, Clone, Args)]
pub struct MountOpts {
    /// Owner of the files [default: the user running rlun].
    ///
    /// Another user needs --allow-other too.
    #[arg(long, value_name = "UID")]
    pub uid: Option<u32>,
    /// Group of the files [default: the group running rlun].
    #[arg(long, value_name = "GID")]
    pub gid: Option<u32>,
    /// Permission bits of the files, in octal.
    ///
    /// Write bits are dropped for read-only LUNs. The kernel enforces them
    /// (default_permissions).
    #[arg(long, value_name = "OCTAL", default_value = "0600", value_parser = parse_mode)]
    pub mode: u16,
    /// Let other users (and root) use the mount.
    ///
    /// Non-root users need user_allow_other in /etc/fuse.conf.
    #[arg(long)]
    pub allow_other: bool,
    /// Refuse writes to every LUN.
    #[arg(short, long)]
    pub read_only: bool,
    /// Bypass the kernel page cache.
    ///
    /// See below.
    #[arg(long)]
    pub direct_io: bool,
    /// Do not unmount when rlun dies.
    ///
    /// By default a watcher process (and, for root, fusermount3)
    /// unmounts when rlun dies, so a killed rlun leaves no dead mount
    /// behind.
    #[arg(long)]
    pub no_auto_unmount: bool,
    /// Threads reading requests from /dev/fuse.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub fuse_threads: u16,
    /// The kernel's write-back cache for buffered writes.
    ///
    /// write(2) completes in the page cache; close, fsync and unmount
    /// write the data to the LUN (see below). Not with --direct-io.
    #[arg(
        long,
        value_enum,
        value_name = "ON|OFF",
        default_value_t = OnOff::Off,
        hide_possible_values = true
    )]
    pub writeback_cache: OnOff,
}

/// Options of `rlun attach`.
#[derive(Debug, Clone, Args)]
pub struct AttachOpts {
    /// Sockets between rlun and the kernel.
    ///
    /// Multi-conn: the kernel spreads requests over them.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub connections: u32,
    /// Attach the device read-only.
    #[arg(short, long)]
    pub read_only: bool,
    /// How long the kernel waits before it fails I/O with EIO on its own.
    ///
    /// How long a request or a dead connection may wait. The default, --replacement-timeout
    /// (at least 30 s) plus 30 s, keeps an iSCSI reconnect from ever
    /// surfacing as an I/O error; a shorter one fails I/O sooner when rlun
    /// is killed, at the risk of errors during a long reconnect.
    #[arg(long, value_name = "DURATION", value_parser = parse_whole_seconds)]
    pub io_timeout: Option<Duration>,
    /// Attach through ublk as /dev/ublkbN instead of nbd.
    ///
    /// The kernel's userspace block driver (ublk_drv, Linux 6.0+) hands
    /// requests over io_uring, with no socket in between, and keeps the
    /// device while rlun restarts (--recover). Implied by a /dev/ublkbN
    /// device argument.
    #[arg(long)]
    pub ublk: bool,
    /// ublk: hardware queues, one thread each [default: one per CPU, at most 4].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub queues: Option<u16>,
    /// ublk: requests in flight per queue.
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub queue_depth: u16,
    /// ublk: take over the named /dev/ublkbN, whose rlun died.
    ///
    /// I/O issued while no rlun served the device waits in the kernel and
    /// completes now; the filesystem on it sees no error. Only data rlun
    /// had written through is safe: with --cache write-back, what the dead
    /// rlun held unwritten is lost. The device must have been attached to
    /// the same LUN URL.
    #[arg(long, requires = "device")]
    pub recover: bool,
}

/// Options of `rlun serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeOpts {
    /// Listen on this Unix socket (created with mode 0600).
    ///
    /// A stale socket file is replaced, a live one refused.
    #[arg(
        long,
        value_name = "PATH",
        required_unless_present = "listen",
        conflicts_with = "listen"
    )]
    pub socket: Option<PathBuf>,
    /// Listen on this TCP address, e.g. 127.0.0.1:10809 or [::1]:10809.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<std::net::SocketAddr>,
    /// Refuse writes to every export.
    #[arg(short, long)]
    pub read_only: bool,
    /// TLS certificate chain (PEM): clients must use TLS.
    ///
    /// NBD_OPT_STARTTLS; with --tls-key.
    #[arg(long, value_name = "PATH", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM) of --tls-cert.
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by these CAs (PEM).
    #[arg(long, value_name = "PATH", requires = "tls_cert")]
    pub tls_ca: Option<PathBuf>,
    /// Allow --listen on a non-loopback address without TLS.
    #[arg(long)]
    pub allow_insecure: bool,
}

impl CacheChoice {
    /// The device layer's mode.
    pub fn mode(self) -> crate::device::CacheMode {
        match self {
            CacheChoice::None => crate::device::CacheMode::None,
            CacheChoice::WriteThrough => crate::device::CacheMode::WriteThrough,
            CacheChoice::WriteBack => crate::device::CacheMode::WriteBack,
        }
    }
}

/// Digest choice for `--header-digest` / `--data-digest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DigestChoice {
    /// No digest.
    None,
    /// Require CRC32C (login fails if the target refuses).
    Crc32c,
    /// Offer CRC32C, accept None (also spelled `prefer`, as before).
    #[value(name = "prefer-crc32c", alias = "prefer")]
    Prefer,
}

impl DigestChoice {
    /// What to offer for the digest.
    pub fn pref(self) -> DigestPref {
        match self {
            DigestChoice::None => DigestPref::None,
            DigestChoice::Crc32c => DigestPref::Crc32c,
            DigestChoice::Prefer => DigestPref::PreferCrc32c,
        }
    }
}

/// Parse an octal permission mode like `0640` or `640` (at most `7777`).
pub fn parse_mode(s: &str) -> Result<u16, String> {
    let t = s.trim();
    let digits = t.strip_prefix("0o").unwrap_or(t);
    match u16::from_str_radix(digits, 8) {
        Ok(m) if m <= 0o7777 && !digits.is_empty() => Ok(m),
        _ => Err(format!(
            "invalid mode {t:?}: expected octal permission bits like 0640"
        )),
    }
}

/// A duration the kernel takes in whole seconds: at least one second,
/// rounded up.
pub fn parse_whole_seconds(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_secs(1) {
        return Err(format!("{:?} is too short: at least 1s", s.trim()));
    }
    Ok(Duration::from_secs(
        d.as_secs() + u64::from(d.subsec_nanos() > 0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn kernel_timeouts_are_whole_seconds_of_at_least_one() {
        assert_eq!(parse_whole_seconds("15s").unwrap(), Duration::from_secs(15));
        assert_eq!(parse_whole_seconds("1.2s").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_whole_seconds("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_whole_seconds("500ms")
            .unwrap_err()
            .contains("at least 1s"));
        assert!(parse_whole_seconds("0").is_err());
        assert!(parse_whole_seconds("soon").is_err());
    }

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("128K"), Ok(131072));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("512"), Ok(512));
        assert!(parse_size("k").is_err());
        assert!(parse_size("4x").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn modes_parse_as_octal() {
        assert_eq!(parse_mode("0640"), Ok(0o640));
        assert_eq!(parse_mode("600"), Ok(0o600));
        assert_eq!(parse_mode("0o755"), Ok(0o755));
        assert!(parse_mode("0980").is_err());
        assert!(parse_mode("17777").is_err());
        assert!(parse_mode("").is_err());
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1s").is_err());
    }

    /// The "[default: …]" of each option's help is the built-in default
    /// ([`crate::config::settings::BUILT_IN`]), which the help cannot read.
    #[test]
    fn help_shows_the_built_in_defaults() {
        use crate::config::settings::{BUILT_IN, DEFAULT_THREADS};
        let secs = |d: Duration| format!("{}s", d.as_secs());
        let cmd = Cli::command();
        let mount = cmd.find_subcommand("mount").unwrap();
        let b = BUILT_IN;
        for (id, shown) in [
            ("connect_timeout", secs(b.connect_timeout)),
            ("login_timeout", secs(b.login_timeout)),
            ("replacement_timeout", secs(b.replacement_timeout)),
            ("nop_interval", secs(b.nop_interval)),
            ("nop_timeout", secs(b.nop_timeout)),
            ("command_timeout", secs(b.command_timeout)),
            ("max_recv_segment", format!("{}k", b.max_recv_segment >> 10)),
            ("cache_size", format!("{}M", b.cache_size >> 20)),
            ("readahead", "on".to_string()),
            ("writeback_delay", secs(b.writeback_delay)),
        ] {
            let arg = mount.get_arguments().find(|a| a.get_id() == id).unwrap();
            let help = arg.get_help().unwrap().to_string();
            assert!(
                help.contains(&format!("[default: {shown}]")),
                "--{id}: {help}"
            );
        }
        assert_eq!(b.readahead, OnOff::On);
        assert!(b.stats_interval.is_none() && b.cache.is_none());
        let threads = cmd
            .get_arguments()
            .find(|a| a.get_id() == "threads")
            .unwrap();
        let help = threads.get_help().unwrap().to_string();
        assert!(
            help.contains(&format!("[default: {DEFAULT_THREADS}]")),
            "{help}"
        );
    }
}
