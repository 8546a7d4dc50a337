//! `iscsi://` / `iser://` URLs, portals and iSCSI names (`url`): typed by
//! users, pasted from other tools, read from the config file.
//!
//! Whatever parses must print (`Display`, which leaves the secrets out) to
//! a URL that parses back to the same URL without its secrets.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rlun::url::{check_iscsi_name, Portal, TargetUrl};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    match TargetUrl::parse(s) {
        Ok(url) => {
            let shown = url.to_string();
            let again = TargetUrl::parse(&shown).unwrap_or_else(|e| {
                panic!("{s:?} printed as {shown:?}, which does not parse: {e}")
            });
            let mut expected = url.clone();
            expected.password = None;
            expected.mutual_password = None;
            assert_eq!(again, expected, "{s:?} printed as {shown:?}");
            let _ = url.require_lun();
            let _ = format!("{url:?}");
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
    if let Ok(p) = Portal::parse(s) {
        let shown = p.to_string();
        assert_eq!(
            Portal::parse(&shown).as_ref().ok(),
            Some(&p),
            "portal {s:?} printed as {shown:?}"
        );
        let _ = p.host_port();
    }
    let _ = check_iscsi_name(s).map_err(|e| e.to_string());
});
