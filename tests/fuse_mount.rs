//! `rlun mount` through the real kernel FUSE driver against a private tgtd:
//! dd and fio through the mounted file compared with tgtd's backing file,
//! ext4 on a loop device over it, fallocate reaching the target, write-back
//! on unmount, read-only LUNs, daemon mode, and the failure paths (bad mount
//! point, no /dev/fuse, unreachable or lost target, SIGKILL).
//!
//! Every mount is held by a [`Mounted`] guard that lazily unmounts it
//! (`fusermount3 -uz`) and kills rlun when the test ends, also on failure.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::cli::{assert_failure, assert_same_bytes, assert_success, both};
use common::{
    make_backing_file, pattern_bytes, run_rlun, run_with_timeout, spawn_rlun, ChildGuard, Tgtd,
};
use rlun::fuse::{find_mount, MountEntry};

const IQN: &str = "iqn.2026-11.org.example:fuse";
const MIB: u64 = 1 << 20;
const TOOL_TIMEOUT: Duration = Duration::from_secs(60);
const MOUNT_TIMEOUT: Duration = Duration::from_secs(30);

/// The mount at `mp` per /proc/self/mountinfo, if any.
fn mount_entry(mp: &Path) -> Option<MountEntry> {
    let info = fs::read_to_string("/proc/self/mountinfo").expect("read mountinfo");
    find_mount(&info, &mp.to_string_lossy())
}

/// Wait until `mp` is (or is no longer) an rlun mount.
fn wait_mounted(mp: &Path, want: bool, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let is = mount_entry(mp).is_some_and(|m| m.fstype == "fuse.rlun");
        if is == want {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A mount of rlun's: unmounted lazily and its process killed on drop.
struct Mounted {
    mp: PathBuf,
    child: Option<ChildGuard>,
}

impl Mounted {
    fn file(&self, name: &str) -> PathBuf {
        self.mp.join(name)
    }

    /// Wait for the foreground rlun to exit on its own; its exit code.
    fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                return status.code();
            }
            if Instant::now() >= deadline {
                panic!("rlun did not exit within {timeout:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("foreground mount").id()
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .args(["-uz", "--"])
            .arg(&self.mp)
            .output();
        // Give rlun a moment to see the unmount and clean up; ChildGuard
        // then kills and reaps it in any case.
        if let Some(child) = self.child.as_mut() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.child.take();
    }
}

/// Start `rlun mount URL MP ARGS...` in the foreground and wait until the
/// mount is there.
fn mount(url: &str, mp: &Path, args: &[&str]) -> Mounted {
    let mut argv = vec![
        "mount".to_string(),
        url.to_string(),
        mp.display().to_string(),
    ];
    argv.extend(args.iter().map(|s| s.to_string()));
    let mut child = spawn_rlun(&argv, &[]);
    let deadline = Instant::now() + MOUNT_TIMEOUT;
    while !wait_mounted(mp, true, Duration::from_millis(50)) {
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("rlun mount exited early: {status}");
        }
        assert!(
            Instant::now() < deadline,
            "no mount at {} in time",
            mp.display()
        );
    }
    Mounted {
        mp: mp.to_path_buf(),
        child: Some(child),
    }
}

/// A fresh mount point directory inside `dir`.
fn mountpoint(dir: &Path, name: &str) -> PathBuf {
    let mp = dir.join(name);
    fs::create_dir(&mp).expect("create mount point");
    mp
}

/// Run a command with [`TOOL_TIMEOUT`]; it must succeed.
fn sh(program: &str, args: &[&str]) -> Output {
    let out = run_with_timeout(Command::new(program).args(args), TOOL_TIMEOUT);
    assert!(
        out.status.success(),
        "{program} {} failed ({}):\n{}",
        args.join(" "),
        out.status,
        both(&out)
    );
    out
}

fn read(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn range(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    read(path)[offset as usize..offset as usize + len].to_vec()
}

/// A tgtd with one target whose LUN 1 is a file of `size` pattern bytes.
fn tgtd_with_file(dir: &Path, size: u64, seed: u64) -> (Tgtd, PathBuf) {
    let file = make_backing_file(dir, size, seed);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_file(1, &file, 512)
        .create()
        .expect("create target");
    (tgtd, file)
}

fn target_url(tgtd: &Tgtd) -> String {
    format!("iscsi://{}/{IQN}", tgtd.portal())
}

#[test]
fn dd_through_the_mounted_file_matches_the_backing_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, backing) = tgtd_with_file(dir.path(), 32 * MIB, 1);
    let mp = mountpoint(dir.path(), "mnt");
    let mut m = mount(&target_url(&tgtd), &mp, &[]);

    // Layout: LUN 0 (tgtd's controller) is not a disk and not shown.
    let names: Vec<String> = fs::read_dir(&mp)
        .expect("list mount")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    let meta = fs::metadata(m.file("lun1")).expect("stat lun1");
    let entry = mount_entry(&mp).expect("mounted");
    // Read the whole LUN with dd and compare.
    let copy = dir.path().join("copy.img");
    sh(
        "dd",
        &[
            &format!("if={}", m.file("lun1").display()),
            &format!("of={}", copy.display()),
            "bs=1M",
            "status=none",
        ],
    );
    // Write 5 MiB + 512 bytes at an unaligned offset, then fsync.
    let src = dir.path().join("src.bin");
    let payload = pattern_bytes(2, 0, 5 * MIB as usize + 512);
    fs::write(&src, &payload).expect("write source");
    sh(
        "dd",
        &[
            &format!("if={}", src.display()),
            &format!("of={}", m.file("lun1").display()),
            "bs=512",
            "seek=6001",
            "conv=notrunc,fsync",
            "status=none",
        ],
    );

    assert_eq!(names, vec!["lun1".to_string()]);
    assert_eq!(meta.len(), 32 * MIB);
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600);
    assert_eq!(entry.fstype, "fuse.rlun");
    assert_eq!(entry.source, format!("rlun:{IQN}"));
    assert_same_bytes(
        &read(&copy),
        &pattern_bytes(1, 0, 32 * MIB as usize),
        "dd read",
    );
    assert_same_bytes(
        &range(&backing, 6001 * 512, payload.len()),
        &payload,
        "backing file after dd write",
    );

    // `rlun umount` unmounts and the foreground rlun exits cleanly.
    let out = run_rlun(["umount", &mp.display().to_string()], &[]);
    assert_success(&out, "rlun umount");
    assert!(wait_mounted(&mp, false, Duration::from_secs(5)));
    assert_eq!(m.wait_exit(Duration::from_secs(30)), Some(0));
}

#[test]
fn fio_verify_with_several_jobs_passes_on_the_mounted_file() {
    fio_verify_on_a_mount(&[], "4k-128k");
}

#[test]
fn fio_verify_passes_with_the_kernel_writeback_cache_and_split_large_writes() {
    // Direct writes up to 1 MiB go to the LUN in 256 KiB pieces at once;
    // buffered ones through the kernel's write-back cache.
    fio_verify_on_a_mount(&["--writeback-cache", "on"], "4k-1M");
}

fn fio_verify_on_a_mount(mount_args: &[&str], direct_bsrange: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _backing) = tgtd_with_file(dir.path(), 64 * MIB, 3);
    let mp = mountpoint(dir.path(), "mnt");
    let m = mount(&format!("{}/1", target_url(&tgtd)), &mp, mount_args);
    let file = m.file("lun1").display().to_string();

    // O_DIRECT AIO: 4 jobs, each on its own 16 MiB, random block sizes,
    // every block checksummed when written and verified when read back.
    let direct = sh(
        "fio",
        &[
            "--name=direct",
            &format!("--filename={file}"),
            "--rw=randwrite",
            &format!("--bsrange={direct_bsrange}"),
            "--ioengine=libaio",
            "--iodepth=16",
            "--direct=1",
            "--numjobs=4",
            "--size=16M",
            "--offset_increment=16M",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--verify_state_save=0",
            "--group_reporting",
        ],
    );
    // Buffered, through the kernel page cache: mixed random reads and writes
    // verified as they go, for a few seconds.
    let buffered = sh(
        "fio",
        &[
            "--name=buffered",
            &format!("--filename={file}"),
            "--rw=randrw",
            "--bs=4k",
            "--ioengine=psync",
            "--numjobs=3",
            "--size=8M",
            "--offset_increment=8M",
            "--verify=crc32c",
            "--verify_backlog=256",
            "--verify_fatal=1",
            "--verify_state_save=0",
            "--runtime=3",
            "--time_based",
            "--group_reporting",
        ],
    );

    let text = String::from_utf8_lossy(&direct.stdout);
    assert!(text.contains("WRITE:") && text.contains("READ:"), "{text}");
    let text = String::from_utf8_lossy(&buffered.stdout);
    assert!(
        !text.contains("verify:"),
        "fio reported verify errors: {text}"
    );
}

/// Loop device over a file: `losetup -d` on drop.
struct Loop(String);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).output();
    }
}

/// A mounted ext4: lazily unmounted on drop.
struct Ext4(PathBuf);

impl Drop for Ext4 {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

/// A deterministic tree: 3 directories of 12 files, 1 byte to 700 KiB.
fn write_tree(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    for d in 0..3u64 {
        let sub = root.join(format!("dir{d}"));
        fs::create_dir_all(&sub).expect("mkdir");
        for f in 0..12u64 {
            let len = ((d * 12 + f) * 19_997 % (700 << 10)) as usize + 1;
            let data = pattern_bytes(100 + d * 12 + f, 0, len);
            let path = sub.join(format!("file{f}"));
            fs::write(&path, &data).expect("write file");
            files.push((path.strip_prefix(root).unwrap().to_path_buf(), data));
        }
    }
    files
}

#[test]
fn ext4_on_a_loop_device_over_the_file_passes_fsck_and_remounts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _backing) = tgtd_with_file(dir.path(), 128 * MIB, 4);
    let mp = mountpoint(dir.path(), "mnt");
    let ext = mountpoint(dir.path(), "ext4");
    // Write-back: the riskier mode for a filesystem stacked on top.
    let m = mount(
        &target_url(&tgtd),
        &mp,
        &["--cache", "write-back", "--writeback-delay", "500ms"],
    );
    let started = Instant::now();

    // Every step runs under TOOL_TIMEOUT: a deadlock fails the test.
    let out = sh(
        "losetup",
        &["--find", "--show", &m.file("lun1").display().to_string()],
    );
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let lo = Loop(dev.clone());
    sh("mkfs.ext4", &["-q", "-F", &lo.0]);
    sh("mount", &["-t", "ext4", &lo.0, &ext.display().to_string()]);
    let mounted = Ext4(ext.clone());
    let files = write_tree(&ext);
    sh("sync", &[]);
    sh("umount", &[&ext.display().to_string()]);
    drop(mounted);
    let fsck = run_with_timeout(
        Command::new("fsck.ext4").args(["-n", "-f", &dev]),
        TOOL_TIMEOUT,
    );
    sh(
        "mount",
        &["-t", "ext4", "-o", "ro", &dev, &ext.display().to_string()],
    );
    let _mounted = Ext4(ext.clone());
    let back: Vec<Vec<u8>> = files.iter().map(|(p, _)| read(&ext.join(p))).collect();

    assert_eq!(fsck.status.code(), Some(0), "fsck -n: {}", both(&fsck));
    for ((path, want), got) in files.iter().zip(&back) {
        assert_same_bytes(got, want, &path.display().to_string());
    }
    assert!(
        started.elapsed() < Duration::from_secs(90),
        "ext4 workload took {:?}",
        started.elapsed()
    );
}

#[test]
fn fallocate_punch_hole_and_zero_range_reach_the_backing_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = make_backing_file(dir.path(), 16 * MIB, 5);
    let thin = make_backing_file(dir.path(), 16 * MIB, 6);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_file(1, &plain, 512)
        .lun_file(2, &thin, 512)
        .create()
        .expect("create target");
    // LUN 2 is thin: tgtd then offers UNMAP with LBPRZ and punches holes
    // into the backing file; LUN 1 refuses UNMAP, so rlun writes zeros.
    tgtd.tgtadm(&[
        "--op",
        "update",
        "--mode",
        "logicalunit",
        "--tid",
        "1",
        "--lun",
        "2",
        "--params",
        "thin_provisioning=1",
    ])
    .expect("thin provisioning on LUN 2");
    let mp = mountpoint(dir.path(), "mnt");
    let m = mount(&target_url(&tgtd), &mp, &[]);
    let thin_blocks_before = fs::metadata(&thin).expect("stat").blocks();

    for name in ["lun1", "lun2"] {
        let f = m.file(name).display().to_string();
        // Unaligned hole over 4+ MiB, and an unaligned zeroed range.
        sh("fallocate", &["-p", "-o", "1000", "-l", "4500000", &f]);
        sh("fallocate", &["-z", "-o", "8000001", "-l", "1048576", &f]);
    }
    let through_mount = range(&m.file("lun2"), 1000, 4_500_000);

    for (backing, seed) in [(&plain, 5), (&thin, 6)] {
        let what = backing.display().to_string();
        assert_same_bytes(&range(backing, 1000, 4_500_000), &vec![0; 4_500_000], &what);
        assert_same_bytes(
            &range(backing, 8_000_001, MIB as usize),
            &vec![0; MIB as usize],
            &what,
        );
        assert_eq!(
            range(backing, 999, 1),
            pattern_bytes(seed, 999, 1),
            "{what}"
        );
        assert_eq!(
            range(backing, 4_501_000, 1),
            pattern_bytes(seed, 4_501_000, 1),
            "{what}"
        );
        assert_eq!(
            range(backing, 8_000_000, 1),
            pattern_bytes(seed, 8_000_000, 1),
            "{what}"
        );
        assert_eq!(
            range(backing, 9_048_577, 1),
            pattern_bytes(seed, 9_048_577, 1),
            "{what}"
        );
    }
    assert_same_bytes(&through_mount, &vec![0; 4_500_000], "lun2 read back");
    let thin_blocks_after = fs::metadata(&thin).expect("stat").blocks();
    assert!(
        thin_blocks_after + 8000 < thin_blocks_before,
        "UNMAP freed space in the thin LUN's file: {thin_blocks_before} -> {thin_blocks_after} blocks"
    );
}

#[test]
fn write_back_data_reaches_the_backing_file_when_sigterm_unmounts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, backing) = tgtd_with_file(dir.path(), 16 * MIB, 7);
    let mp = mountpoint(dir.path(), "mnt");
    let mut m = mount(
        &target_url(&tgtd),
        &mp,
        &["--cache", "write-back", "--writeback-delay", "60s"],
    );
    let payload = pattern_bytes(8, 0, 4 * MIB as usize);
    let src = dir.path().join("src.bin");
    fs::write(&src, &payload).expect("write source");

    sh(
        "dd",
        &[
            &format!("if={}", src.display()),
            &format!("of={}", m.file("lun1").display()),
            "bs=1M",
            "seek=2",
            "conv=notrunc",
            "status=none",
        ],
    );
    let before = range(&backing, 2 * MIB, payload.len());
    sh("kill", &["-TERM", &m.pid().to_string()]);
    let code = m.wait_exit(Duration::from_secs(30));

    assert_ne!(before, payload, "write-back held the data in memory");
    assert_eq!(code, Some(0));
    assert!(wait_mounted(&mp, false, Duration::from_secs(5)));
    assert_same_bytes(
        &range(&backing, 2 * MIB, payload.len()),
        &payload,
        "backing file after unmount",
    );
}

#[test]
fn read_only_luns_and_read_only_mounts_refuse_writes_with_erofs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ro = make_backing_file(dir.path(), 4 * MIB, 9);
    let rw = make_backing_file(dir.path(), 4 * MIB, 10);
    let mut tgtd = Tgtd::start().expect("start tgtd");
    tgtd.add_target(IQN)
        .lun_readonly(1, &ro, 512)
        .lun_file(2, &rw, 512)
        .create()
        .expect("create target");
    let mp = mountpoint(dir.path(), "mnt");
    let mp2 = mountpoint(dir.path(), "mnt2");
    let m = mount(&target_url(&tgtd), &mp, &["--mode", "0644"]);
    let m2 = mount(&tgtd.url(IQN, 2), &mp2, &["--read-only"]);

    let write = |f: PathBuf| {
        run_with_timeout(
            Command::new("dd")
                .arg("if=/dev/zero")
                .arg(format!("of={}", f.display()))
                .args(["bs=512", "count=1", "conv=notrunc"]),
            TOOL_TIMEOUT,
        )
    };
    let protected = write(m.file("lun1"));
    let writable = write(m.file("lun2"));
    let ro_mount = write(m2.file("lun2"));

    assert_eq!(
        fs::metadata(m.file("lun1")).unwrap().permissions().mode() & 0o777,
        0o444
    );
    assert_eq!(
        fs::metadata(m.file("lun2")).unwrap().permissions().mode() & 0o777,
        0o644
    );
    for out in [&protected, &ro_mount] {
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("Read-only file system"),
            "{}",
            both(out)
        );
    }
    assert!(writable.status.success(), "{}", both(&writable));
    assert_eq!(range(&rw, 0, 512), vec![0; 512]);
    assert_eq!(range(&ro, 0, 512), pattern_bytes(9, 0, 512));
}

#[test]
fn daemon_mode_returns_once_mounted_and_umount_waits_for_it_to_finish() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, backing) = tgtd_with_file(dir.path(), 8 * MIB, 11);
    let mp = mountpoint(dir.path(), "mnt");
    let mp_s = mp.display().to_string();
    let _guard = Mounted {
        mp: mp.clone(),
        child: None,
    };
    let url = target_url(&tgtd);
    let unreachable = "iscsi://127.0.0.1:9/iqn.2026-11.org.example:none";

    let out = run_rlun(
        [
            "mount",
            "--daemon",
            "--cache",
            "write-back",
            "--writeback-delay",
            "60s",
            &url,
            &mp_s,
        ],
        &[],
    );
    assert_success(&out, "rlun mount --daemon");
    let entry = mount_entry(&mp);
    let state = rlun::cmd::mount::state_file(&mp.canonicalize().unwrap());
    let pid: u32 = fs::read_to_string(&state)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    fs::write(m_file(&mp), vec![0x5a; 8192]).expect("write through the mount");
    let umount = run_rlun(["umount", &mp_s], &[]);
    let failed = run_rlun(["mount", "--daemon", unreachable, &mp_s], &[]);

    assert!(entry.is_some_and(|e| e.fstype == "fuse.rlun"));
    assert_success(&umount, "rlun umount");
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists() || !state.exists(),
        "rlun {pid} still running after rlun umount returned"
    );
    assert_eq!(range(&backing, 0, 8192), vec![0x5a; 8192]);
    assert_failure(&failed, 3, &["cannot reach portal 127.0.0.1:9"]);
    assert!(mount_entry(&mp).is_none());
}

fn m_file(mp: &Path) -> PathBuf {
    mp.join("lun1")
}

#[test]
fn startup_errors_are_clear_and_exit_non_zero() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _backing) = tgtd_with_file(dir.path(), 4 * MIB, 12);
    let url = target_url(&tgtd);
    let mp = mountpoint(dir.path(), "mnt");
    let _guard = Mounted {
        mp: mp.clone(),
        child: None,
    };
    let file = dir.path().join("plain-file");
    fs::write(&file, b"x").expect("write");
    let missing = dir.path().join("missing");
    let path = |p: &Path| p.display().to_string();
    let rlun = common::rlun_bin().display().to_string();

    let no_dir = run_rlun(["mount", &url, &path(&missing)], &[]);
    let not_dir = run_rlun(["mount", &url, &path(&file)], &[]);
    let portal = run_rlun(
        ["mount", &format!("iscsi://{}", tgtd.portal()), &path(&mp)],
        &[],
    );
    let unreachable = run_rlun(
        [
            "mount",
            "--connect-timeout",
            "2s",
            "iscsi://127.0.0.1:9/iqn.2026-11.org.example:none",
            &path(&mp),
        ],
        &[],
    );
    // /dev/fuse hidden in a private mount namespace: something else is
    // bind-mounted over it there, the host's stays untouched.
    let no_fuse = run_with_timeout(
        Command::new("unshare").args([
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount --bind \"$1\" /dev/fuse && exec \"$2\" mount \"$3\" \"$4\"",
            "sh",
            &path(&file),
            &rlun,
            &url,
            &path(&mp),
        ]),
        TOOL_TIMEOUT,
    );

    assert_failure(
        &no_dir,
        8,
        &["cannot mount on", "No such file or directory"],
    );
    assert_failure(&not_dir, 8, &["cannot mount on", "not a directory"]);
    assert_failure(
        &portal,
        2,
        &["names a portal, not a target", "rlun discover"],
    );
    assert_failure(&unreachable, 3, &["cannot reach portal"]);
    assert_failure(&no_fuse, 1, &["/dev/fuse", "not a character device"]);
    let umount_plain = run_rlun(["umount", &path(&mp)], &[]);
    let umount_other = run_rlun(["umount", "/proc"], &[]);
    assert_failure(&umount_plain, 1, &["is not mounted"]);
    assert_failure(&umount_other, 1, &["/proc is not an rlun mount"]);
    assert!(mount_entry(&mp).is_none());
}

#[test]
fn lost_target_gives_eio_after_the_replacement_timeout_instead_of_hanging() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut tgtd, _backing) = tgtd_with_file(dir.path(), 4 * MIB, 13);
    let mp = mountpoint(dir.path(), "mnt");
    let mut m = mount(
        &target_url(&tgtd),
        &mp,
        &[
            "--replacement-timeout",
            "3s",
            "--nop-interval",
            "1s",
            "--nop-timeout",
            "2s",
            "--connect-timeout",
            "1s",
            "--cache",
            "none",
            "--direct-io",
        ],
    );
    let f = m.file("lun1").display().to_string();
    sh(
        "dd",
        &[&format!("if={f}"), "of=/dev/null", "bs=4k", "count=1"],
    );

    tgtd.kill();
    let started = Instant::now();
    let read = run_with_timeout(
        Command::new("dd").args([
            &format!("if={f}"),
            "of=/dev/null",
            "bs=4k",
            "count=1",
            "skip=7",
        ]),
        TOOL_TIMEOUT,
    );
    let took = started.elapsed();
    let umount = run_rlun(["umount", &mp.display().to_string()], &[]);
    let code = m.wait_exit(Duration::from_secs(60));

    assert!(!read.status.success(), "read after target loss succeeded");
    assert!(
        String::from_utf8_lossy(&read.stderr).contains("Input/output error"),
        "{}",
        both(&read)
    );
    assert!(took < Duration::from_secs(30), "EIO took {took:?}");
    assert_success(&umount, "rlun umount of a mount whose target is gone");
    assert!(code.is_some(), "rlun exited");
    assert!(mount_entry(&mp).is_none());
}

#[test]
fn sigkill_with_auto_unmount_leaves_no_dead_mount() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _backing) = tgtd_with_file(dir.path(), 4 * MIB, 14);
    let mp = mountpoint(dir.path(), "mnt");
    let mut m = mount(&target_url(&tgtd), &mp, &[]);

    sh("kill", &["-KILL", &m.pid().to_string()]);
    let _ = m.wait_exit(Duration::from_secs(10));
    let gone = wait_mounted(&mp, false, Duration::from_secs(10));
    let listing = fs::read_dir(&mp).map(|d| d.count());

    assert!(gone, "the mount outlived rlun: {:?}", mount_entry(&mp));
    assert_eq!(
        listing.ok(),
        Some(0),
        "the mount point is a plain empty directory again"
    );
}

#[test]
fn sigterm_with_a_file_open_detaches_and_a_second_sigterm_cuts_it_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _backing) = tgtd_with_file(dir.path(), 4 * MIB, 15);
    let mp = mountpoint(dir.path(), "mnt");
    let mut m = mount(&target_url(&tgtd), &mp, &[]);
    // A process that keeps lun1 open: the mount is busy.
    let mut holder = ChildGuard(
        Command::new("sh")
            .args(["-c", "exec 3<\"$1\" && echo open && exec sleep 60", "sh"])
            .arg(m.file("lun1"))
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start holder"),
    );
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(holder.stdout.take().expect("stdout")),
        &mut line,
    )
    .expect("holder output");
    assert_eq!(line.trim(), "open");

    sh("kill", &["-TERM", &m.pid().to_string()]);
    let detached = wait_mounted(&mp, false, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    let still_serving = m
        .child
        .as_mut()
        .unwrap()
        .try_wait()
        .expect("try_wait")
        .is_none();
    sh("kill", &["-TERM", &m.pid().to_string()]);
    let code = m.wait_exit(Duration::from_secs(20));

    assert!(detached, "SIGTERM detached the busy mount");
    assert!(still_serving, "rlun kept serving the open file");
    assert_eq!(code, Some(0));
}

#[test]
fn stats_interval_logs_the_cache_counters_of_a_running_mount() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _backing) = tgtd_with_file(dir.path(), 8 * MIB, 13);
    let mp = mountpoint(dir.path(), "mnt");
    let mp_s = mp.display().to_string();
    let log = dir.path().join("mount.log");
    let _guard = Mounted {
        mp: mp.clone(),
        child: None,
    };
    let url = target_url(&tgtd);

    let out = run_rlun(
        [
            "-v",
            "mount",
            "--daemon",
            "--log-file",
            log.to_str().unwrap(),
            "--cache",
            "write-back",
            "--writeback-delay",
            "60s",
            "--stats-interval",
            "200ms",
            &url,
            &mp_s,
        ],
        &[],
    );
    assert_success(&out, "rlun mount --stats-interval");
    fs::write(m_file(&mp), vec![0x11; 64 * 1024]).expect("write through the mount");
    std::thread::sleep(Duration::from_millis(800));
    let umount = run_rlun(["umount", &mp_s], &[]);

    assert_success(&umount, "rlun umount");
    let text = fs::read_to_string(&log).expect("mount log");
    let line = text
        .lines()
        .rev()
        .find(|l| l.contains(" cache ") && l.contains("dirty_bytes="))
        .unwrap_or_else(|| panic!("no cache counters line in the log:\n{text}"));
    for field in [
        "hits=",
        "misses=",
        "readahead_hits=",
        "evictions=",
        "flushes=",
    ] {
        assert!(line.contains(field), "{field} missing in {line}");
    }
    assert!(
        text.lines().any(|l| l.contains("dirty_bytes=65536")),
        "the 64 KiB write-back write shows as dirty before unmount:\n{text}"
    );
}

/// Mount `url` on `mp` as a daemon with `-v` and a log file plus `args`.
fn mount_logged(url: &str, mp: &Path, log: &Path, args: &[&str]) {
    let mut argv = vec![
        "-v",
        "mount",
        "--daemon",
        "--log-file",
        log.to_str().expect("log path"),
    ];
    argv.extend_from_slice(args);
    let mp_s = mp.display().to_string();
    argv.extend_from_slice(&[url, &mp_s]);
    let out = run_rlun(&argv, &[]);
    assert_success(&out, "rlun mount --daemon");
}

/// The request counters of the "FUSE requests:" line rlun logs when the
/// mount ends (`reads=… largest_read=… max_reads_in_flight=…`).
fn fuse_counters(log: &Path) -> std::collections::HashMap<String, u64> {
    let text = fs::read_to_string(log).expect("mount log");
    let line = text
        .lines()
        .find(|l| l.contains("FUSE requests:"))
        .unwrap_or_else(|| panic!("no FUSE requests line in the log:\n{text}"));
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

fn counter(c: &std::collections::HashMap<String, u64>, name: &str) -> u64 {
    *c.get(name)
        .unwrap_or_else(|| panic!("{name} missing in {c:?}"))
}

#[test]
fn sequential_reads_reach_rlun_as_1_mib_requests_several_at_once() {
    // What the negotiated limits promise, counted by rlun rather than
    // timed: max_pages lets a read-ahead request carry 1 MiB, and async
    // reads over the 8 MiB read-ahead window keep several in flight.
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _backing) = tgtd_with_file(dir.path(), 64 * MIB, 17);
    let mp = mountpoint(dir.path(), "mnt");
    let log = dir.path().join("mount.log");
    let _guard = Mounted {
        mp: mp.clone(),
        child: None,
    };
    mount_logged(&target_url(&tgtd), &mp, &log, &[]);

    let copy = dir.path().join("copy.img");
    sh(
        "dd",
        &[
            &format!("if={}", m_file(&mp).display()),
            &format!("of={}", copy.display()),
            "bs=1M",
            "status=none",
        ],
    );
    let umount = run_rlun(["umount", &mp.display().to_string()], &[]);

    assert_success(&umount, "rlun umount");
    assert_same_bytes(
        &read(&copy),
        &pattern_bytes(17, 0, 64 * MIB as usize),
        "dd read",
    );
    let c = fuse_counters(&log);
    assert!(counter(&c, "read_bytes") >= 64 * MIB, "{c:?}");
    assert_eq!(
        counter(&c, "largest_read"),
        MIB,
        "reads arrive as 1 MiB requests (max_pages): {c:?}"
    );
    assert!(
        counter(&c, "max_reads_in_flight") >= 4,
        "several read-ahead requests in flight at once: {c:?}"
    );
}

#[test]
fn writeback_cache_sends_large_writes_and_fsync_and_close_put_them_on_the_backing_file() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, backing) = tgtd_with_file(dir.path(), 64 * MIB, 19);
    let mp = mountpoint(dir.path(), "mnt");
    let log = dir.path().join("mount.log");
    let _guard = Mounted {
        mp: mp.clone(),
        child: None,
    };
    mount_logged(&target_url(&tgtd), &mp, &log, &["--writeback-cache", "on"]);
    let first = pattern_bytes(20, 0, 16 * MIB as usize);
    let second = pattern_bytes(21, 0, 3 * MIB as usize + 4096);

    // 64 KiB write(2) calls, then fsync: on the target's file at once.
    let mut f = fs::OpenOptions::new()
        .write(true)
        .open(m_file(&mp))
        .expect("open lun1 for writing");
    f.seek(SeekFrom::Start(4 * MIB)).expect("seek");
    for chunk in first.chunks(64 * 1024) {
        f.write_all(chunk).expect("write");
    }
    f.sync_all().expect("fsync");
    let after_fsync = range(&backing, 4 * MIB, first.len());
    // Without fsync: close writes the dirty pages back before it returns.
    f.seek(SeekFrom::Start(30 * MIB + 512)).expect("seek");
    f.write_all(&second).expect("write");
    drop(f);
    let after_close = range(&backing, 30 * MIB + 512, second.len());
    let umount = run_rlun(["umount", &mp.display().to_string()], &[]);

    assert_same_bytes(&after_fsync, &first, "backing file after fsync");
    assert_same_bytes(&after_close, &second, "backing file after close");
    assert_success(&umount, "rlun umount");
    let c = fuse_counters(&log);
    assert!(
        counter(&c, "largest_write") >= 512 * 1024,
        "the kernel's write-back joins 64 KiB writes into large requests: {c:?}"
    );
    assert!(
        counter(&c, "max_writes_in_flight") >= 2,
        "write-back sends several writes at once: {c:?}"
    );
}

#[test]
fn mounting_on_a_mount_point_that_is_already_mounted_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (tgtd, _backing) = tgtd_with_file(dir.path(), 4 * MIB, 13);
    let url = target_url(&tgtd);
    let mp = mountpoint(dir.path(), "mnt");
    let mp_s = mp.display().to_string();
    let first = mount(&url, &mp, &[]);
    let before = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let stacked = |info: &str| {
        info.lines()
            .filter(|l| l.contains(&format!(" {mp_s} ")))
            .count()
    };

    let again = run_rlun(["mount", &url, &mp_s], &[]);

    assert_failure(
        &again,
        8,
        &["cannot mount on", "already a mount point", "rlun umount"],
    );
    let after = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert_eq!(stacked(&before), 1);
    assert_eq!(stacked(&after), 1, "a second mount was stacked");
    assert_eq!(
        read(&first.file("lun1"))[..512],
        pattern_bytes(13, 0, 512)[..],
        "the first mount still serves"
    );
    let umount = run_rlun(["umount", &mp_s], &[]);
    assert_success(&umount, "rlun umount of the first mount");
}
