//! The first hour of an iscsiadm or NBD admin, against a private tgtd with
//! a target of three LUNs and a CHAP target: CHAP from the environment on
//! portal commands, errors that name what exists, `--json` of discover,
//! ls and list, the URIs a foreground `serve` prints, the hint of a busy
//! `umount` and the tips for other tools' flags.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::cli::{assert_failure, assert_success, json, stderr, stdout};
use common::{make_backing_file, rlun_bin, run_rlun, ChildGuard, Tgtd};

const MIB: u64 = 1 << 20;
const THREE: &str = "iqn.2026-12.org.rlun.test:three";
const LOCKED: &str = "iqn.2026-12.org.rlun.test:locked";
const USER: &str = "alice";
const SECRET: &str = "alice-secret-12";
const CHAP_ENV: [(&str, &str); 2] = [("RLUN_CHAP_USER", USER), ("RLUN_CHAP_SECRET", SECRET)];

/// tgtd with THREE (LUNs 1–3 of 4, 8 and 12 MiB) and LOCKED (one LUN, CHAP).
fn lab(dir: &Path) -> Tgtd {
    let mut tgtd = Tgtd::start().expect("tgtd starts");
    let mut t = tgtd.add_target(THREE);
    for lun in 1..=3u32 {
        let path = make_backing_file(dir, 4 * MIB * u64::from(lun), u64::from(lun));
        t = t.lun_file(lun, path, 512);
    }
    t.create().expect("target THREE");
    let locked = make_backing_file(dir, 4 * MIB, 9);
    tgtd.add_target(LOCKED)
        .lun_file(1, &locked, 512)
        .chap(USER, SECRET)
        .create()
        .expect("target LOCKED");
    tgtd
}

#[test]
fn chap_from_the_environment_works_on_portal_commands() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = lab(dir.path());
    let portal = tgtd.portal();

    let discover = run_rlun(["discover", &portal], &CHAP_ENV);
    let ls = run_rlun(["ls", "--json", &portal], &CHAP_ENV);
    let ls_without = run_rlun(["ls", &portal], &[]);
    let wrong_secret = run_rlun(
        ["ls", &portal],
        &[
            ("RLUN_CHAP_USER", USER),
            ("RLUN_CHAP_SECRET", "not-the-secret-1"),
        ],
    );
    let with_url_user = run_rlun(
        ["ls", "--json", &format!("iscsi://{USER}%{SECRET}@{portal}")],
        &[],
    );
    let chap_on_plain = run_rlun(["info", &tgtd.url_with_chap(USER, SECRET, THREE, 1)], &[]);

    let text = assert_success(&discover, "discover with CHAP in the environment");
    assert!(text.contains(THREE) && text.contains(LOCKED), "{text}");
    let rows = json(&assert_success(&ls, "ls with CHAP in the environment"));
    let listed: Vec<(String, u64)> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["target"].as_str().unwrap().to_string(),
                r["lun"].as_u64().unwrap(),
            )
        })
        .collect();
    for want in [(THREE, 1), (THREE, 2), (THREE, 3), (LOCKED, 1)] {
        assert!(
            listed.contains(&(want.0.to_string(), want.1)),
            "{want:?} not in {listed:?}"
        );
    }
    // The URLs ls prints carry the user name only where CHAP was used.
    let rows = json(&assert_success(&with_url_user, "ls with CHAP in the URL"));
    for r in rows.as_array().unwrap() {
        let url = r["url"].as_str().unwrap();
        assert_eq!(url.contains("alice@"), r["target"] == LOCKED, "{url}");
        assert!(!url.contains(SECRET), "{url}");
    }
    // Without credentials the CHAP target is named at the end, exit 4.
    assert_failure(&ls_without, 4, &[LOCKED, "no CHAP credentials were given"]);
    assert!(stdout(&ls_without).contains(THREE));
    // Wrong credentials are still told apart from a target without CHAP.
    assert_failure(&wrong_secret, 4, &[LOCKED, "rejected our CHAP credentials"]);
    assert_failure(
        &chap_on_plain,
        4,
        &[
            "refused AuthMethod=CHAP before any credentials were exchanged",
            "try without credentials",
        ],
    );
}

#[test]
fn errors_name_the_targets_and_luns_that_exist() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = lab(dir.path());
    let typo = format!("iscsi://{}/{}x/1", tgtd.portal(), THREE);
    let no_lun = format!("iscsi://{}/{THREE}", tgtd.portal());

    let unknown = run_rlun(["info", &typo], &[]);
    let missing = run_rlun(["info", &no_lun], &[]);
    let nine = run_rlun(["info", &tgtd.url(THREE, 9)], &[]);
    let by_file_name = run_rlun(["info", "--json", &format!("{no_lun}/lun2")], &[]);

    assert_failure(
        &unknown,
        5,
        &[&format!("target {THREE}x not found"), THREE, LOCKED],
    );
    assert_failure(
        &missing,
        2,
        &[
            "names no LUN",
            "disk LUNs are 1, 2, 3",
            &format!("{no_lun}/1"),
        ],
    );
    assert_failure(&nine, 5, &["LUN 9 does not exist", "disk LUNs are 1, 2, 3"]);
    let v = json(&assert_success(&by_file_name, "info …/lun2"));
    assert_eq!(v["lun"], 2);
    assert_eq!(v["capacity"]["bytes"], 8 * MIB);
}

#[test]
fn the_controller_lun_that_ls_lists_is_described_not_refused_as_missing() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = lab(dir.path());
    let rows = json(&assert_success(
        &run_rlun(
            [
                "ls",
                "--json",
                &format!("iscsi://{}/{THREE}", tgtd.portal()),
            ],
            &[],
        ),
        "ls --json",
    ));
    let lun0 = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["lun"] == 0)
        .expect("tgtd's controller LUN 0 is listed");
    let url0 = lun0["url"].as_str().unwrap();
    let disk1 = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["lun"] == 1)
        .unwrap();

    let info = run_rlun(["info", "--json", url0], &[]);
    let cp = run_rlun(
        ["cp", url0, &dir.path().join("out").display().to_string()],
        &[],
    );

    assert_eq!(lun0["disk"], false);
    assert_eq!(lun0["size_bytes"], serde_json::Value::Null);
    assert_eq!(disk1["disk"], true);
    assert_eq!(disk1["size_bytes"], 4 * MIB);
    assert_eq!(disk1["block_size"], 512);
    assert_eq!(disk1["read_only"], false);
    let v = json(&assert_success(&info, "info of LUN 0"));
    assert_eq!(v["disk"], false);
    assert_eq!(v["inquiry"]["device_type"], "storage array controller");
    assert_failure(
        &cp,
        2,
        &["LUN 0 is a storage array controller", "not a disk"],
    );
    // The table has no space inside the size column.
    let table = assert_success(
        &run_rlun(["ls", &format!("iscsi://{}/{THREE}", tgtd.portal())], &[]),
        "ls",
    );
    let row1 = table.lines().find(|l| l.starts_with("1 ")).unwrap();
    assert_eq!(row1.split_whitespace().nth(1), Some("4.0MiB"), "{table}");
}

#[test]
fn discover_json_has_the_documented_fields() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = lab(dir.path());
    let v = json(&assert_success(
        &run_rlun(["discover", "--json", &tgtd.portal()], &[]),
        "discover --json",
    ));
    let three = v
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["target"] == THREE)
        .expect("THREE discovered");
    assert_eq!(three["url"], format!("iscsi://{}/{THREE}", tgtd.portal()));
    let addr = &three["addresses"][0];
    assert_eq!(addr["host"], "127.0.0.1");
    assert_eq!(addr["port"], tgtd.port());
    assert_eq!(addr["portal_group_tag"], 1);
}

/// Read lines of `child`'s standard output until `count` arrived or
/// `timeout` passed.
fn first_lines(child: &mut ChildGuard, count: usize, timeout: Duration) -> Vec<String> {
    let out = child.0.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = std::time::Instant::now() + timeout;
    let mut lines = Vec::new();
    while lines.len() < count {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => lines.push(l),
            Err(_) => break,
        }
    }
    lines
}

#[test]
fn serve_prints_its_uris_and_list_names_target_luns_and_absolute_socket() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = lab(dir.path());
    let target = format!("iscsi://{}/{THREE}", tgtd.portal());
    // A relative socket path, given in another working directory.
    let mut serve = ChildGuard(
        Command::new(rlun_bin())
            .args(["serve", &target, "--socket", "rel.sock"])
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("rlun serve starts"),
    );
    let uris = first_lines(&mut serve, 3, Duration::from_secs(30));
    let socket = dir.path().canonicalize().unwrap().join("rel.sock");
    let list = run_rlun(["list", "--json"], &[]);
    let table = run_rlun(["list"], &[]);

    let want: Vec<String> = (1..=3)
        .map(|n| format!("nbd+unix:///lun{n}?socket={}", socket.display()))
        .collect();
    assert_eq!(uris, want, "serve's standard output");
    let rows = json(&assert_success(&list, "list --json"));
    let pid = serve.id();
    let mine = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["pid"] == pid)
        .unwrap_or_else(|| panic!("pid {pid} not in {rows}"));
    assert_eq!(mine["kind"], "served");
    assert_eq!(mine["what"], socket.display().to_string());
    assert_eq!(mine["target"], THREE);
    assert_eq!(mine["portal"], tgtd.portal());
    assert_eq!(mine["luns"], serde_json::json!([1, 2, 3]));
    assert_eq!(mine["endpoints"], serde_json::json!(want));
    // From the process itself, over its control socket.
    assert_eq!(mine["session_up"], true, "{mine}");
    assert_eq!(mine["dirty_bytes"], 0, "{mine}");
    assert!(mine.get("control_error").is_none(), "{mine}");
    let text = assert_success(&table, "list");
    let line = text
        .lines()
        .find(|l| l.contains(&socket.display().to_string()))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains(THREE) && line.contains("1,2,3"), "{line}");
    assert!(line.contains(" up "), "STATE column: {line}");
}

#[test]
fn a_tcp_export_is_listed_as_an_nbd_uri() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = lab(dir.path());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let listen = format!("127.0.0.1:{port}");
    let out = run_rlun(
        [
            "serve",
            "--daemon",
            &tgtd.url(THREE, 2),
            "--listen",
            &listen,
        ],
        &[],
    );
    let text = assert_success(&out, "serve --daemon --listen");
    let list = run_rlun(["list"], &[]);
    let rows = json(&assert_success(
        &run_rlun(["list", "--json"], &[]),
        "list --json",
    ));
    // Stop it: the pid is in the list.
    let mine = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["what"] == format!("nbd://{listen}"))
        .cloned();
    if let Some(pid) = mine.as_ref().and_then(|r| r["pid"].as_u64()) {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }

    assert_eq!(
        text.trim(),
        format!("nbd://{listen}/lun2"),
        "the parent prints the URI"
    );
    let mine = mine.expect("the export is listed");
    assert_eq!(mine["luns"], serde_json::json!([2]));
    assert!(
        stdout(&list).contains(&format!("nbd://{listen}")),
        "{}",
        stdout(&list)
    );
}

#[test]
fn a_busy_umount_names_the_process_and_offers_lazy() {
    let dir = tempfile::tempdir().unwrap();
    let tgtd = lab(dir.path());
    let mp = dir.path().join("mnt");
    std::fs::create_dir(&mp).unwrap();
    let mp_s = mp.display().to_string();
    let mounted = run_rlun(
        [
            "mount",
            "--daemon",
            &format!("iscsi://{}/{THREE}", tgtd.portal()),
            &mp_s,
        ],
        &[],
    );
    assert_success(&mounted, "mount --daemon");
    let holder = ChildGuard(
        Command::new("sleep")
            .arg("60")
            .current_dir(&mp)
            .spawn()
            .expect("sleep in the mount"),
    );
    let busy = run_rlun(["umount", &mp_s], &[]);
    let holder_pid = holder.id();
    drop(holder);
    let done = run_rlun(["umount", &mp_s], &[]);

    assert_failure(
        &busy,
        1,
        &[&format!("{holder_pid} (sleep, cwd)"), "rlun umount --lazy"],
    );
    assert_success(&done, "umount once it is no longer busy");
}

#[test]
fn flags_of_other_tools_get_the_rlun_equivalent() {
    let cases: [(&[&str], &str); 5] = [
        (
            &["serve", "iscsi://h/iqn.2026-12.x:y", "-k", "/tmp/s"],
            "--socket PATH",
        ),
        (
            &["serve", "iscsi://h/iqn.2026-12.x:y", "--fork"],
            "--daemon",
        ),
        (
            &["mount", "iscsi://h/iqn.2026-12.x:y", "/mnt", "-o", "ro"],
            "--read-only",
        ),
        (
            &["bench", "iscsi://h/iqn.2026-12.x:y/1", "--runtime", "5"],
            "--duration",
        ),
        (&["logout"], "rlun umount DIR"),
    ];
    for (args, want) in cases {
        let out = run_rlun(args, &[]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("use '--"), "{args:?}: {err}");
    }
    let out = run_rlun(
        [
            "bench",
            "iscsi://h/iqn.2026-12.x:y/1",
            "--pattern",
            "randrw",
        ],
        &[],
    );
    assert!(!stderr(&out).contains("similar value exists: 'randwrite'"));
    assert!(stderr(&out).contains("no mixed pattern"));
}
