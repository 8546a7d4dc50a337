//! The `rlun` binary: parse the command line, set up logging, run the
//! subcommand, print the error chain and exit with a documented code.
#![forbid(unsafe_code)]

use clap::Parser;
use rlun::cli::Cli;
use rlun::exit;
use tracing_subscriber::EnvFilter;

/// mimalloc instead of glibc's malloc: per-thread free lists with no
/// locking or bin consolidation on the hot path. Every read hands its
/// buffer over as a `Bytes` (one small allocation per I/O) and glibc spent
/// about 300 instructions on each malloc/free pair of those at queue depth
/// 32 (benches/instructions.sh), mimalloc a fraction of that.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // `rlun mount`'s unmount watcher is rlun run again (see rlun::fuse::run_watcher).
    if std::env::var_os(rlun::fuse::WATCH_ENV).is_some() {
        let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
        std::process::exit(rlun::fuse::run_watcher(&args));
    }
    let cli = Cli::try_parse().unwrap_or_else(|err| {
        // A flag or subcommand of iscsiadm, qemu-nbd, nbd-client, mount or
        // fio gets the rlun way of saying it.
        let args: Vec<String> = std::env::args().skip(1).collect();
        match rlun::cmd::tips::explain(&err, &args) {
            Some(text) => {
                eprint!("{text}");
                std::process::exit(exit::USAGE);
            }
            None => err.exit(),
        }
    });
    let default_level = if cli.quiet {
        "error"
    } else {
        match cli.verbose {
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }
    };
    let filter = EnvFilter::try_from_default_env()
        // rustls warns of every client that connects by IP address
        // ("Illegal SNI extension"), which is no fault of anyone's: only
        // its errors are shown.
        .unwrap_or_else(|_| EnvFilter::new(format!("rlun={default_level},rustls=error,warn")));
    let sink = rlun::logging::init(cli.log_format, filter);

    // One thread (the default) runs every session's hot path — driver,
    // writer and the callers it completes — without cross-thread wake-ups;
    // blocking work goes to tokio's blocking pool either way. More worker
    // threads only pay off when many LUNs are busy at once (see --threads).
    let config = match rlun::cmd::load_config(&cli) {
        Ok(c) => c,
        Err(e) => {
            fatal(sink, &rlun_iscsi::error_chain(&e));
            std::process::exit(e.exit_code());
        }
    };
    let threads = rlun::cmd::threads(&cli, &config);
    let mut builder = if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rlun: cannot start the async runtime: {e}");
            std::process::exit(exit::FAILURE);
        }
    };
    let result = runtime.block_on(rlun::cmd::run(cli, config));
    // Don't wait for detached tasks (a session still logging out) forever.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(()) => std::process::exit(exit::OK),
        Err(rlun::cmd::CliError::BrokenPipe) => std::process::exit(exit::OK),
        Err(e) => {
            fatal(sink, &rlun_iscsi::error_chain(&e));
            std::process::exit(e.exit_code());
        }
    }
}

/// Say why rlun fails: on stderr, or in the journal as an entry of
/// priority 3 carrying the target's fields (rather than a stderr line,
/// which journald files at the stream's priority 6).
fn fatal(sink: rlun::logging::Sink, chain: &str) {
    if sink == rlun::logging::Sink::Journal {
        tracing::error!("{chain}");
    } else {
        eprintln!("rlun: {chain}");
    }
}
