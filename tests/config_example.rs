//! The example config shipped in packaging/ must load (a config file with a
//! typo is an error, so a broken example would break every install).

#[test]
fn shipped_example_config_loads() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/rlun.toml");
    let cfg = rlun::config::Config::load(Some(&path)).expect("example config loads");
    assert!(
        cfg.targets.is_empty(),
        "every example entry is commented out"
    );
}

#[test]
fn example_config_with_a_target_uncommented_is_usable() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/rlun.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let uncommented: String = text
        .lines()
        .map(|l| match l.strip_prefix("# ") {
            Some(rest) if rest.starts_with('[') || rest.contains(" = ") => rest.to_string(),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("store.secret"), "a-secret-of-16-by\n").unwrap();
    std::fs::write(
        dir.path().join("store-mutual.secret"),
        "another-secret-16\n",
    )
    .unwrap();
    let cfg_path = dir.path().join("rlun.toml");
    std::fs::write(&cfg_path, uncommented).unwrap();
    let cfg = rlun::config::Config::load(Some(&cfg_path)).expect("uncommented example loads");
    let store = cfg.target("store").expect("target 'store'");
    assert_eq!(store.url.lun, Some(1));
    assert_eq!(store.chap_user.as_deref(), Some("myhost"));
    assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
    // Every setting the command line and the file share is shown, and the
    // values shown are the built-in defaults (where there is one).
    use rlun::config::settings::{Settings, BUILT_IN, DEFAULT_THREADS, SETTING_KEYS};
    for key in SETTING_KEYS {
        assert!(
            text.contains(&format!("# {key} = ")),
            "{key} is not in the example"
        );
    }
    assert_eq!(cfg.defaults.threads, Some(DEFAULT_THREADS));
    let defaults = cfg.settings_for(None);
    let shown = Settings {
        cache: None,
        stats_interval: None,
        ..defaults.clone()
    };
    assert_eq!(
        shown.resolve(),
        rlun::config::settings::Effective {
            header_digest: defaults.header_digest,
            data_digest: defaults.data_digest,
            ..BUILT_IN
        }
    );
    assert_eq!(
        store.settings().or(&defaults).resolve().replacement_timeout,
        std::time::Duration::from_secs(300)
    );
}
