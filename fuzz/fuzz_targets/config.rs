//! What the user types: the TOML config file (`config`), including the
//! error messages built for it, and the command-line value parsers (sizes,
//! durations, modes, digest preferences).
//!
//! Input: a TOML text (also fed whole to the value parsers). A config that
//! loads must satisfy the checks it promises (every target names an iSCSI
//! target; relative secret files are made absolute).
#![no_main]
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use rlun::cli::{parse_duration, parse_mode, parse_size};
use rlun::config::Config;
use rlun_iscsi::proto::digest::DigestPref;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::from_toml_str(text, Path::new("/etc/rlun/rlun.toml")) {
        Ok(config) => {
            for (name, t) in &config.targets {
                assert!(
                    t.url.target.is_some(),
                    "target {name} loaded without a target name"
                );
                for f in [&t.chap_secret_file, &t.mutual_secret_file]
                    .into_iter()
                    .flatten()
                {
                    assert!(f.is_absolute(), "secret file {} left relative", f.display());
                }
                let _ = config.require_target(name);
                // The settings of the entry over [defaults] over the
                // built-in ones: every one resolves to a value.
                let _ = config.settings_for(Some(t)).resolve();
            }
            let _ = config.settings_for(None).resolve();
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.is_empty());
        }
    }
    if let Ok(n) = parse_size(text) {
        let _ = n;
    }
    if let Ok(d) = parse_duration(text) {
        assert!(d.as_secs() <= 1_000_000_000);
    }
    if let Ok(m) = parse_mode(text) {
        assert!(m <= 0o7777);
    }
    if let Ok(d) = text.parse::<DigestPref>() {
        assert_eq!(d.to_string().parse::<DigestPref>().ok(), Some(d));
    }
});
