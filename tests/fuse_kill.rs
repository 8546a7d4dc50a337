//! SIGKILL of `rlun mount` in the middle of buffered and direct fio writes
//! must never leave a dead mount ("Transport endpoint is not connected"):
//! within [`GONE_WITHIN`] of the kill the mount point is a plain directory
//! again and fio has ended.
//!
//! Each round mounts a tgtd LUN, starts fio (buffered and `O_DIRECT`
//! writes in turn, one or four FUSE threads in turn), kills rlun with
//! SIGKILL at a random moment of the write, and checks the mount and fio.
//! `RLUN_KILL_ROUNDS` sets the number of rounds (default 6);
//! `scripts/fuse-kill-stress.sh` runs many of them by hand.

mod common;

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{make_backing_file, spawn_rlun, ChildGuard, Tgtd};
use rlun::fuse::find_mount;

const IQN: &str = "iqn.2026-11.org.example:fusekill";
const MIB: u64 = 1 << 20;
/// How soon after the kill the mount must be gone and fio ended.
const GONE_WITHIN: Duration = Duration::from_secs(5);

fn mounted(mp: &Path) -> bool {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("read mountinfo");
    find_mount(&info, &mp.to_string_lossy()).is_some_and(|m| m.fstype == "fuse.rlun")
}

/// Wait until `mp` is (`want`) or is no longer an rlun mount.
fn wait_mounted(mp: &Path, want: bool, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if mounted(mp) == want {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether some process has `file` open (fio's job process runs the writes).
fn file_open_somewhere(file: &Path) -> bool {
    let Ok(procs) = fs::read_dir("/proc") else {
        return false;
    };
    procs.flatten().any(|p| {
        fs::read_dir(p.path().join("fd")).is_ok_and(|fds| {
            fds.flatten()
                .any(|fd| fs::read_link(fd.path()).is_ok_and(|l| l == file))
        })
    })
}

/// A small pseudo-random generator (xorshift), seeded from the clock and
/// printed so that a failing round can be told apart.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let seed = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
            | 1;
        Rng(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// What one round saw after the kill.
#[derive(Debug)]
enum Outcome {
    Clean,
    /// The mount outlived rlun by more than [`GONE_WITHIN`].
    DeadMount(String),
    /// fio did not end within [`GONE_WITHIN`] of the kill.
    Hang,
}

fn round(url: &str, dir: &Path, n: u64, rng: &mut Rng) -> Outcome {
    let mp = dir.join(format!("mnt{n}"));
    fs::create_dir(&mp).expect("mount point");
    let direct = n % 2 == 1;
    let threads = if (n / 2).is_multiple_of(2) { "1" } else { "4" };
    let mut rlun = spawn_rlun(
        [
            "mount",
            url,
            &mp.to_string_lossy(),
            "--fuse-threads",
            threads,
        ],
        &[],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !wait_mounted(&mp, true, Duration::from_millis(50)) {
        if let Ok(Some(status)) = rlun.try_wait() {
            panic!("rlun mount exited early: {status}");
        }
        assert!(Instant::now() < deadline, "no mount at {}", mp.display());
    }
    let fio = Command::new("fio")
        .args([
            "--name=w",
            &format!("--filename={}", mp.join("lun1").display()),
            "--rw=write",
            "--bs=64k",
            "--size=48m",
            "--time_based",
            "--runtime=30",
            "--ioengine=psync",
            // A mount gone before fio opened the file must not let it write
            // into the directory underneath for the whole runtime.
            "--allow_file_create=0",
            &format!("--direct={}", u8::from(direct)),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start fio");
    let mut fio = ChildGuard(fio);
    // Kill at a random moment of the writes, not of fio's start-up.
    let file = mp.join("lun1");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !file_open_somewhere(&file) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let delay = Duration::from_millis(rng.below(1000));
    std::thread::sleep(delay);
    let _ = rlun.kill();
    let killed = Instant::now();
    let _ = rlun.wait();
    let gone = wait_mounted(&mp, false, GONE_WITHIN.saturating_sub(killed.elapsed()));
    let fio_done = loop {
        if let Ok(Some(_)) = fio.try_wait() {
            break true;
        }
        if killed.elapsed() >= GONE_WITHIN {
            break false;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    eprintln!(
        "round {n}: {} writes, {threads} FUSE thread(s), kill after {delay:?}: mount gone {gone}, fio ended {fio_done}",
        if direct { "direct" } else { "buffered" }
    );
    let outcome = if !gone {
        let state = match fs::read_dir(&mp) {
            Ok(_) => "readable".to_string(),
            Err(e) => e.to_string(),
        };
        Outcome::DeadMount(format!("{} ({state})", mp.display()))
    } else if !fio_done {
        Outcome::Hang
    } else {
        Outcome::Clean
    };
    if !gone {
        let _ = Command::new("fusermount3")
            .args(["-uz", "--"])
            .arg(&mp)
            .output();
    }
    drop(fio);
    outcome
}

#[test]
fn sigkill_during_buffered_and_direct_writes_never_leaves_a_dead_mount() {
    let rounds: u64 = std::env::var("RLUN_KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let dir = tempfile::tempdir().expect("tempdir");
    let backing = make_backing_file(dir.path(), 64 * MIB, 41);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_file(1, &backing, 512)
        .create()
        .expect("create target");
    let url = format!("iscsi://{}/{IQN}", tgtd.portal());
    let mut rng = Rng::new();
    let mut bad = Vec::new();
    for n in 0..rounds {
        match round(&url, dir.path(), n, &mut rng) {
            Outcome::Clean => {}
            Outcome::DeadMount(state) => {
                eprintln!("round {n}: dead mount {state}");
                bad.push((n, "dead mount"));
            }
            Outcome::Hang => bad.push((n, "fio hung")),
        }
    }
    eprintln!(
        "{} of {rounds} rounds left a dead mount or a hung fio",
        bad.len()
    );
    assert!(bad.is_empty(), "after SIGKILL: {bad:?}");
}
