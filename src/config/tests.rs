use super::settings::{CacheChoice, OnOff, Settings, BUILT_IN};
use super::*;
use crate::config::settings::Effective;
use crate::url::TargetUrl;
use rlun_iscsi::proto::digest::DigestPref;
use rlun_iscsi::secret::Secret;
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

const IQN: &str = "iqn.2026-11.org.example:store";

fn url(s: &str) -> TargetUrl {
    TargetUrl::parse(s).unwrap()
}

fn plain_url() -> TargetUrl {
    url(&format!("iscsi://10.0.0.5/{IQN}/1"))
}

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

fn no_env() -> impl Fn(&str) -> Option<String> {
    |_| None
}

fn write_file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
    let p = dir.join(name);
    let mut f = fs::File::create(&p).unwrap();
    f.write_all(text.as_bytes()).unwrap();
    fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    p
}

fn entry(text: &str) -> TargetEntry {
    let cfg = Config::from_toml_str(text, Path::new("/etc/rlun/rlun.toml")).unwrap();
    cfg.targets.into_values().next().unwrap()
}

fn chap(user: &str, secret: &str) -> Option<ChapCredentials> {
    Some(ChapCredentials {
        user: user.into(),
        secret: Secret::new(secret),
    })
}

// ---- precedence ----

#[test]
fn no_source_gives_no_credentials_and_no_warnings() {
    let (c, w) =
        Credentials::resolve(&CliCreds::default(), &plain_url(), no_env(), None, None).unwrap();
    assert_eq!(c, Credentials::default());
    assert!(w.is_empty(), "{w:?}");
}

#[test]
fn cli_beats_url_beats_env_beats_file_beats_config() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_file(
        dir.path(),
        "creds.toml",
        "user = \"file-user\"\nsecret = \"file-secret-123\"\n",
        0o600,
    );
    let cfg_entry = entry(&format!(
        "[targets.s]\nurl = \"iscsi://h/{IQN}/1\"\nchap_user = \"cfg-user\"\nchap_secret = \"cfg-secret-1234\"\n"
    ));
    let env = env_of(&[
        ("RLUN_CHAP_USER", "env-user"),
        ("RLUN_CHAP_SECRET", "env-secret-1234"),
    ]);
    let cli = CliCreds {
        user: Some("cli-user".into()),
        secret: Some(Secret::new("cli-secret-1234")),
        ..CliCreds::default()
    };
    let u = url(&format!("iscsi://url-user%url-secret-123@h/{IQN}/1"));

    // Each step removes the winning source and checks the next one wins.
    let resolve = |cli: &CliCreds,
                   u: &TargetUrl,
                   env: &dyn Fn(&str) -> Option<String>,
                   f: Option<&Path>,
                   e: Option<&TargetEntry>| {
        Credentials::resolve(cli, u, env, f, e).unwrap().0.chap
    };
    assert_eq!(
        resolve(&cli, &u, &env, Some(&file), Some(&cfg_entry)),
        chap("cli-user", "cli-secret-1234")
    );
    let no_cli = CliCreds::default();
    assert_eq!(
        resolve(&no_cli, &u, &env, Some(&file), Some(&cfg_entry)),
        chap("url-user", "url-secret-123")
    );
    let bare = plain_url();
    assert_eq!(
        resolve(&no_cli, &bare, &env, Some(&file), Some(&cfg_entry)),
        chap("env-user", "env-secret-1234")
    );
    assert_eq!(
        resolve(&no_cli, &bare, &no_env(), Some(&file), Some(&cfg_entry)),
        chap("file-user", "file-secret-123")
    );
    assert_eq!(
        resolve(&no_cli, &bare, &no_env(), None, Some(&cfg_entry)),
        chap("cfg-user", "cfg-secret-1234")
    );
}

#[test]
fn values_are_picked_one_by_one_across_sources() {
    let u = url(&format!("iscsi://alice@h/{IQN}/1"));
    let env = env_of(&[("RLUN_CHAP_SECRET", "from-the-environment")]);
    let (c, _) = Credentials::resolve(&CliCreds::default(), &u, env, None, None).unwrap();
    assert_eq!(c.chap, chap("alice", "from-the-environment"));
}

#[test]
fn libiscsi_variables_are_fallbacks_for_rlun_ones() {
    let env = env_of(&[
        ("LIBISCSI_CHAP_USERNAME", "li-user"),
        ("LIBISCSI_CHAP_PASSWORD", "li-secret-1234"),
        ("RLUN_CHAP_SECRET", "rlun-secret-123"),
        ("LIBISCSI_CHAP_TARGET_USERNAME", "tgt"),
        ("LIBISCSI_CHAP_TARGET_PASSWORD", "tgt-secret-1234"),
    ]);
    let (c, w) = Credentials::resolve(&CliCreds::default(), &plain_url(), env, None, None).unwrap();
    assert_eq!(c.chap, chap("li-user", "rlun-secret-123"));
    assert_eq!(c.mutual, chap("tgt", "tgt-secret-1234"));
    assert!(w.is_empty(), "{w:?}");
}

#[test]
fn empty_environment_values_count_as_unset() {
    let env = env_of(&[("RLUN_CHAP_USER", ""), ("LIBISCSI_CHAP_USERNAME", "")]);
    let (c, _) = Credentials::resolve(&CliCreds::default(), &plain_url(), env, None, None).unwrap();
    assert_eq!(c.chap, None);
}

#[test]
fn mutual_credentials_come_from_url_query() {
    let u = url(&format!(
        "iscsi://alice%one-way-secret@h/{IQN}/1?target_user=tgt&target_password=other-secret-1"
    ));
    let (c, _) = Credentials::resolve(&CliCreds::default(), &u, no_env(), None, None).unwrap();
    assert_eq!(c.chap, chap("alice", "one-way-secret"));
    assert_eq!(c.mutual, chap("tgt", "other-secret-1"));
}

#[test]
fn config_secret_file_is_read_when_nothing_else_gives_the_secret() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "store.secret", "file-secret-1234\n", 0o600);
    let cfg = Config::from_toml_str(
        &format!(
            "[targets.s]\nurl = \"iscsi://h/{IQN}/1\"\nchap_user = \"u\"\nchap_secret_file = \"store.secret\"\n"
        ),
        &dir.path().join("rlun.toml"),
    )
    .unwrap();
    let e = cfg.target("s").unwrap();
    assert_eq!(
        e.chap_secret_file.as_deref(),
        Some(&*dir.path().join("store.secret"))
    );

    let (c, w) =
        Credentials::resolve(&CliCreds::default(), &plain_url(), no_env(), None, Some(e)).unwrap();

    assert_eq!(c.chap, chap("u", "file-secret-1234"));
    assert!(w.is_empty(), "{w:?}");
}

#[test]
fn config_secret_file_is_not_read_when_a_higher_source_has_the_secret() {
    let e = entry(&format!(
        "[targets.s]\nurl = \"iscsi://h/{IQN}/1\"\nchap_user = \"u\"\nchap_secret_file = \"/nonexistent/x\"\n"
    ));
    let env = env_of(&[("RLUN_CHAP_SECRET", "env-secret-1234")]);
    let (c, _) =
        Credentials::resolve(&CliCreds::default(), &plain_url(), env, None, Some(&e)).unwrap();
    assert_eq!(c.chap, chap("u", "env-secret-1234"));
}

#[test]
fn missing_secret_file_is_an_error_naming_the_file_and_key() {
    let e = entry(&format!(
        "[targets.s]\nurl = \"iscsi://h/{IQN}/1\"\nchap_user = \"u\"\nchap_secret_file = \"/nonexistent/x\"\n"
    ));
    let err = Credentials::resolve(&CliCreds::default(), &plain_url(), no_env(), None, Some(&e))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot read secret file /nonexistent/x (named by chap_secret_file)"
    );
}

// ---- validation ----

#[test]
fn user_without_secret_is_an_error_naming_the_source() {
    let u = url(&format!("iscsi://alice@h/{IQN}/1"));
    let err = Credentials::resolve(&CliCreds::default(), &u, no_env(), None, None).unwrap_err();
    assert!(matches!(
        err,
        ConfigError::UserWithoutSecret {
            role: ChapRole::OneWay,
            ..
        }
    ));
    assert!(
        err.to_string()
            .starts_with("one-way CHAP user 'alice' (from the URL) has no secret"),
        "{err}"
    );
}

#[test]
fn secret_without_user_is_an_error() {
    let env = env_of(&[("LIBISCSI_CHAP_PASSWORD", "secret-secret")]);
    let err =
        Credentials::resolve(&CliCreds::default(), &plain_url(), env, None, None).unwrap_err();
    assert!(
        err.to_string().starts_with(
            "one-way CHAP secret (from the environment (LIBISCSI_CHAP_PASSWORD)) has no user name"
        ),
        "{err}"
    );
}

#[test]
fn mutual_without_one_way_is_an_error() {
    let env = env_of(&[
        ("RLUN_CHAP_MUTUAL_USER", "tgt"),
        ("RLUN_CHAP_MUTUAL_SECRET", "tgt-secret-1234"),
    ]);
    let err =
        Credentials::resolve(&CliCreds::default(), &plain_url(), env, None, None).unwrap_err();
    assert!(matches!(err, ConfigError::MutualWithoutOneWay), "{err:?}");
}

#[test]
fn same_secret_both_ways_is_an_error() {
    let env = env_of(&[
        ("RLUN_CHAP_USER", "me"),
        ("RLUN_CHAP_SECRET", "same-secret-123"),
        ("RLUN_CHAP_MUTUAL_USER", "tgt"),
        ("RLUN_CHAP_MUTUAL_SECRET", "same-secret-123"),
    ]);
    let err =
        Credentials::resolve(&CliCreds::default(), &plain_url(), env, None, None).unwrap_err();
    assert!(matches!(err, ConfigError::SameSecretBothWays), "{err:?}");
    assert!(!err.to_string().contains("same-secret"));
}

#[test]
fn short_secret_gives_a_warning_not_an_error() {
    let env = env_of(&[("RLUN_CHAP_USER", "me"), ("RLUN_CHAP_SECRET", "short")]);
    let (c, w) = Credentials::resolve(&CliCreds::default(), &plain_url(), env, None, None).unwrap();
    assert_eq!(c.chap, chap("me", "short"));
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].contains("only 5 bytes") && w[0].contains("at least 12"),
        "{w:?}"
    );
    assert!(!w[0].contains("short\""));
}

#[test]
fn secrets_in_arguments_or_url_give_a_warning() {
    let cli = CliCreds {
        user: Some("me".into()),
        secret: Some(Secret::new("long-enough-secret")),
        ..CliCreds::default()
    };
    let (_, w) = Credentials::resolve(&cli, &plain_url(), no_env(), None, None).unwrap();
    assert!(w.iter().any(|w| w.contains("command line")), "{w:?}");

    let u = url(&format!("iscsi://me%long-enough-secret@h/{IQN}/1"));
    let (_, w) = Credentials::resolve(&CliCreds::default(), &u, no_env(), None, None).unwrap();
    assert!(w.iter().any(|w| w.contains("in the URL")), "{w:?}");
}

#[test]
fn url_taken_from_the_config_entry_gives_no_argv_warning() {
    let e = entry(&format!(
        "[targets.s]\nurl = \"iscsi://me%long-enough-secret@h/{IQN}/1\"\n"
    ));
    let (c, w) =
        Credentials::resolve(&CliCreds::default(), &e.url, no_env(), None, Some(&e)).unwrap();
    assert_eq!(c.chap, chap("me", "long-enough-secret"));
    assert!(w.is_empty(), "{w:?}");
}

// ---- credentials file ----

#[test]
fn group_readable_credentials_file_is_refused_with_the_chmod_fix() {
    let dir = tempfile::tempdir().unwrap();
    let f = write_file(
        dir.path(),
        "c.toml",
        "user = \"u\"\nsecret = \"long-enough-secret\"\n",
        0o640,
    );
    let err = Credentials::resolve(&CliCreds::default(), &plain_url(), no_env(), Some(&f), None)
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ConfigError::SecretsReadable { .. }), "{msg}");
    assert!(
        msg.contains("readable by its group")
            && msg.contains("0640")
            && msg.contains(&format!("chmod 600 {}", f.display())),
        "{msg}"
    );
    fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
    let (c, _) =
        Credentials::resolve(&CliCreds::default(), &plain_url(), no_env(), Some(&f), None).unwrap();
    assert_eq!(c.chap, chap("u", "long-enough-secret"));
}

#[test]
fn owner_only_credentials_file_gives_no_warning() {
    let dir = tempfile::tempdir().unwrap();
    let f = write_file(
        dir.path(),
        "c.toml",
        "user = \"u\"\nsecret = \"long-enough-secret\"\n",
        0o600,
    );
    let (_, w) =
        Credentials::resolve(&CliCreds::default(), &plain_url(), no_env(), Some(&f), None).unwrap();
    assert!(w.is_empty(), "{w:?}");
}

#[test]
fn world_readable_secret_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "s", "long-enough-secret", 0o644);
    let cfg = Config::from_toml_str(
        &format!("[targets.s]\nurl = \"iscsi://h/{IQN}/1\"\nchap_user = \"u\"\nchap_secret_file = \"s\"\n"),
        &dir.path().join("rlun.toml"),
    )
    .unwrap();
    let err = Credentials::resolve(
        &CliCreds::default(),
        &plain_url(),
        no_env(),
        None,
        cfg.target("s"),
    )
    .unwrap_err();
    assert!(err.to_string().contains("its group and by others"), "{err}");
}

#[test]
fn unknown_key_in_credentials_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let f = write_file(
        dir.path(),
        "c.toml",
        "user = \"u\"\npassword = \"long-enough-secret\"\n",
        0o600,
    );
    let err = Credentials::resolve(&CliCreds::default(), &plain_url(), no_env(), Some(&f), None)
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ConfigError::ParseCredentials { .. }));
    assert!(
        msg.contains("c.toml") && msg.contains("line 2") && msg.contains("`password`"),
        "{msg}"
    );
    assert!(!msg.contains("long-enough-secret"), "{msg}");
}

#[test]
fn missing_credentials_file_is_an_error() {
    let err = Credentials::resolve(
        &CliCreds::default(),
        &plain_url(),
        no_env(),
        Some(Path::new("/nonexistent/creds.toml")),
        None,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot read credentials file /nonexistent/creds.toml"
    );
}

// ---- config file ----

const FULL: &str = r#"
[defaults]
initiator_name = "iqn.2026-11.org.example:db1"
connect_timeout = "5s"
login_timeout = "20s"
threads = 2
header_digest = "prefer-crc32c"
data_digest = "crc32c"

[targets.store]
url = "iser://10.0.0.5:3261/iqn.2026-11.org.example:store/1"
chap_user = "db1"
chap_secret = "inline-secret-1"
mutual_user = "store"
mutual_secret_file = "/etc/rlun/store-mutual.secret"
header_digest = "none"
login_timeout = "1m"
cache = "write-back"

[targets.all]
url = "iscsi://10.0.0.6/iqn.2026-11.org.example:all"
"#;

#[test]
fn full_config_parses() {
    let cfg = Config::from_toml_str(FULL, Path::new("/etc/rlun/rlun.toml")).unwrap();
    assert_eq!(
        cfg.defaults.initiator_name.as_deref(),
        Some("iqn.2026-11.org.example:db1")
    );
    assert_eq!(cfg.defaults.threads, Some(2));
    assert!(cfg.warnings.is_empty(), "{:?}", cfg.warnings);
    let store = cfg.target("store").unwrap();
    assert_eq!(store.url.transport, crate::url::TransportKind::Iser);
    assert_eq!(store.url.lun, Some(1));
    assert_eq!(
        store.chap_secret.as_ref().map(Secret::expose),
        Some("inline-secret-1")
    );
    let s = cfg.settings_for(Some(store)).resolve();
    assert_eq!(s.header_digest, Some(DigestPref::None));
    assert_eq!(s.data_digest, Some(DigestPref::Crc32c));
    assert_eq!(s.connect_timeout, Duration::from_secs(5));
    assert_eq!(s.login_timeout, Duration::from_secs(60));
    assert_eq!(s.cache, Some(CacheChoice::WriteBack));
    let all = cfg.target("all").unwrap();
    assert_eq!(all.url.lun, None);
    let s = cfg.settings_for(Some(all)).resolve();
    assert_eq!(s.header_digest, Some(DigestPref::PreferCrc32c));
    assert_eq!(s.login_timeout, Duration::from_secs(20));
    assert_eq!(s.cache, None);
    assert!(!format!("{cfg:?}").contains("inline-secret"));
}

#[test]
fn empty_config_uses_built_in_defaults() {
    let cfg = Config::from_toml_str("", Path::new("x.toml")).unwrap();
    assert_eq!(cfg.settings_for(None), Settings::default());
    assert_eq!(cfg.settings_for(None).resolve(), BUILT_IN);
    assert_eq!(cfg.defaults.threads, None);
    assert!(cfg.targets.is_empty());
}

#[test]
fn unknown_key_is_an_error_naming_file_line_and_key() {
    let text = "[defaults]\nconect_timeout = \"5s\"\n";
    let err = Config::from_toml_str(text, Path::new("/etc/rlun/rlun.toml")).unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("config file /etc/rlun/rlun.toml: line 2, column 1, key `defaults.conect_timeout`: unknown field `conect_timeout`"), "{msg}");
}

#[test]
fn unknown_key_in_target_table_is_named() {
    let text = format!("[targets.s]\nurl = \"iscsi://h/{IQN}/1\"\nchap_pasword = \"x\"\n");
    let msg = Config::from_toml_str(&text, Path::new("r.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("key `targets.s.chap_pasword`") && msg.contains("unknown field"),
        "{msg}"
    );
}

#[test]
fn bad_toml_syntax_is_an_error_with_a_position() {
    let err = Config::from_toml_str("[defaults\n", Path::new("r.toml")).unwrap_err();
    assert!(matches!(err, ConfigError::ParseConfig { .. }));
    let msg = err.to_string();
    assert!(msg.starts_with("config file r.toml: line 1"), "{msg}");
    assert!(!msg.contains('\n'), "one line: {msg:?}");
}

#[test]
fn wrong_type_for_a_secret_does_not_echo_the_value() {
    let text = format!("[targets.s]\nurl = \"iscsi://h/{IQN}/1\"\nchap_secret = 123456789\n");
    let msg = Config::from_toml_str(&text, Path::new("r.toml"))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("targets.s.chap_secret"), "{msg}");
    assert!(!msg.contains("123456789"), "{msg}");
}

#[test]
fn bad_digest_value_is_named() {
    let msg = Config::from_toml_str("[defaults]\nheader_digest = \"md5\"\n", Path::new("r.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("defaults.header_digest") && msg.contains("md5"),
        "{msg}"
    );
}

#[test]
fn bad_url_in_target_is_reported_with_its_key_and_no_password() {
    let text = "[targets.s]\nurl = \"http://me%topsecretpw@h/x/1\"\n";
    let msg = Config::from_toml_str(text, Path::new("r.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("targets.s.url") && msg.contains("unsupported URL scheme 'http'"),
        "{msg}"
    );
    assert!(!msg.contains("topsecretpw"), "{msg}");
}

#[test]
fn target_url_must_name_a_target() {
    let err = Config::from_toml_str("[targets.s]\nurl = \"iscsi://h\"\n", Path::new("r.toml"))
        .unwrap_err();
    assert!(
        matches!(err, ConfigError::InvalidConfig { ref key, .. } if key == "targets.s.url"),
        "{err:?}"
    );
}

#[test]
fn secret_and_secret_file_together_are_rejected() {
    let text = format!(
        "[targets.s]\nurl = \"iscsi://h/{IQN}/1\"\nmutual_secret = \"a\"\nmutual_secret_file = \"b\"\n"
    );
    let err = Config::from_toml_str(&text, Path::new("r.toml")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "config file r.toml: line 4, key `targets.s.mutual_secret_file`: give mutual_secret or mutual_secret_file, not both"
    );
}

#[test]
fn zero_timeout_and_bad_initiator_name_are_rejected() {
    let err = Config::from_toml_str("[defaults]\nlogin_timeout_secs = 0\n", Path::new("r.toml"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "config file r.toml: line 2, key `defaults.login_timeout_secs`: must be more than 0",
    );
    let err = Config::from_toml_str(
        "[defaults]\ninitiator_name = \"bob\"\n",
        Path::new("r.toml"),
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("line 2, key `defaults.initiator_name`: bad iSCSI name 'bob'"),
        "{err}"
    );
}

#[test]
fn missing_default_file_is_empty_but_missing_explicit_file_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let cfg = Config::load_from(&missing, false).unwrap();
    assert_eq!(cfg, Config::default());

    let err = Config::load(Some(&missing)).unwrap_err();
    assert!(matches!(err, ConfigError::ReadConfig { .. }));
    assert!(err.to_string().contains("nope.toml"));
}

#[test]
fn load_refuses_a_readable_config_with_inline_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_file(dir.path(), "rlun.toml", FULL, 0o644);
    let err = Config::load(Some(&p)).unwrap_err();
    assert!(err.to_string().contains("config file"), "{err}");
    assert!(err.to_string().contains("chmod 600"), "{err}");

    fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
    let cfg = Config::load(Some(&p)).unwrap();
    assert_eq!(cfg.path.as_deref(), Some(&*p));
    assert!(cfg.warnings.is_empty());
}

#[test]
fn require_target_lists_known_names() {
    let cfg = Config::from_toml_str(FULL, Path::new("/etc/rlun/rlun.toml")).unwrap();
    let err = cfg.require_target("stor").unwrap_err();
    assert_eq!(
        err.to_string(),
        "no target named 'stor' in config file /etc/rlun/rlun.toml; known: all, store"
    );
    assert!(cfg.require_target("store").is_ok());
}

#[test]
fn unknown_target_without_a_config_file_says_no_file_was_read() {
    let cfg = Config::default();
    let err = cfg.require_target("store").unwrap_err();
    assert_eq!(
        err.to_string(),
        "no target named 'store' (no config file was read: /etc/rlun/rlun.toml is \
         missing or unreadable; --config PATH names another)"
    );
}

// ---- initiator name ----

#[test]
fn initiator_name_precedence_is_cli_env_config_default() {
    let cfg = Config::from_toml_str(FULL, Path::new("r.toml")).unwrap();
    let env = env_of(&[("RLUN_INITIATOR_NAME", "iqn.2026-11.org.example:env")]);
    assert_eq!(
        resolve_initiator_name(Some("iqn.2026-11.org.example:cli"), &env, &cfg).unwrap(),
        "iqn.2026-11.org.example:cli"
    );
    assert_eq!(
        resolve_initiator_name(None, &env, &cfg).unwrap(),
        "iqn.2026-11.org.example:env"
    );
    assert_eq!(
        resolve_initiator_name(None, no_env(), &cfg).unwrap(),
        "iqn.2026-11.org.example:db1"
    );
    let no_file = Path::new("/nonexistent/initiatorname.iscsi");
    let dflt = resolve_initiator_name_with(None, no_env(), &Config::default(), no_file).unwrap();
    assert!(dflt.starts_with("iqn.2026-11.org.rlun:"), "{dflt}");
    assert_eq!(check_iscsi_name(&dflt), Ok(()));
}

#[test]
fn open_iscsi_name_file_is_used_after_the_config_and_before_the_default() {
    let dir = tempfile::tempdir().unwrap();
    let f = write_file(
        dir.path(),
        "initiatorname.iscsi",
        "## DO NOT EDIT\n#InitiatorName=iqn.2026-11.org.example:old\nInitiatorName=iqn.1993-08.org.debian:01:abcdef\n",
        0o644,
    );
    let cfg = Config::from_toml_str(FULL, Path::new("r.toml")).unwrap();
    assert_eq!(
        resolve_initiator_name_with(None, no_env(), &cfg, &f).unwrap(),
        "iqn.2026-11.org.example:db1"
    );
    assert_eq!(
        resolve_initiator_name_with(None, no_env(), &Config::default(), &f).unwrap(),
        "iqn.1993-08.org.debian:01:abcdef"
    );
    let missing = dir.path().join("absent");
    let dflt = resolve_initiator_name_with(None, no_env(), &Config::default(), &missing).unwrap();
    assert!(dflt.starts_with("iqn.2026-11.org.rlun:"), "{dflt}");
}

#[test]
fn bad_name_in_the_open_iscsi_file_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let f = write_file(dir.path(), "n", "InitiatorName=not a name\n", 0o644);
    let err = resolve_initiator_name_with(None, no_env(), &Config::default(), &f).unwrap_err();
    assert!(err.to_string().contains(&f.display().to_string()), "{err}");
}

#[test]
fn bad_initiator_name_from_env_is_an_error_naming_the_variable() {
    let env = env_of(&[("RLUN_INITIATOR_NAME", "not a name")]);
    let err = resolve_initiator_name(None, env, &Config::default()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "bad initiator name from RLUN_INITIATOR_NAME"
    );
}

#[test]
fn host_name_is_sanitised_into_a_valid_iqn() {
    assert_eq!(
        initiator_name_for_host("DB1_x.example"),
        "iqn.2026-11.org.rlun:db1-x.example"
    );
    assert_eq!(
        initiator_name_for_host(""),
        "iqn.2026-11.org.rlun:localhost"
    );
    let long = initiator_name_for_host(&"h".repeat(400));
    assert_eq!(long.len(), crate::url::MAX_ISCSI_NAME_LEN);
    assert_eq!(check_iscsi_name(&long), Ok(()));
}

#[test]
fn digest_pref_parses_displays_and_offers() {
    for (s, d, offer) in [
        ("none", DigestPref::None, "None"),
        ("CRC32C", DigestPref::Crc32c, "CRC32C"),
        ("prefer-crc32c", DigestPref::PreferCrc32c, "CRC32C,None"),
    ] {
        let parsed: DigestPref = s.parse().unwrap();
        assert_eq!(parsed, d);
        assert_eq!(parsed.offer(), offer);
        assert_eq!(parsed.to_string().parse::<DigestPref>(), Ok(d));
    }
    assert!("md5".parse::<DigestPref>().is_err());
}

#[test]
fn help_texts_mention_every_source_and_key() {
    for k in [
        "RLUN_CHAP_USER",
        "RLUN_CHAP_MUTUAL_SECRET",
        "LIBISCSI_CHAP_TARGET_PASSWORD",
        "--chap-file",
    ] {
        assert!(CREDENTIALS_HELP.contains(k), "{k}");
    }
    for k in [
        "initiator_name",
        "connect_timeout_secs",
        "login_timeout_secs",
        "threads",
        "chap_secret_file",
        "mutual_secret_file",
        "mutual_user",
    ] {
        assert!(CONFIG_FORMAT_HELP.contains(k), "{k}");
    }
    for k in super::settings::SETTING_KEYS {
        assert!(CONFIG_FORMAT_HELP.contains(&format!("{k} =")), "{k}");
    }
}

// ---- settings shared with the command line ----

/// Every setting key, in [defaults] and in a target entry, in the command
/// line's syntax.
const EVERY_SETTING: &str = r#"
connect_timeout = "7s"
login_timeout = "500ms"
replacement_timeout = "0"
nop_interval = "0s"
nop_timeout = "3s"
command_timeout = "2m"
max_recv_segment = "64k"
header_digest = "crc32c"
data_digest = "prefer-crc32c"
cache = "write-through"
cache_size = "64M"
readahead = "off"
writeback_delay = "250ms"
stats_interval = "1h"
multipath = "auto"
multipath_policy = "queue-length"
failback = "manual"
path_check_interval = "2s"
path_timeout = "15s"
path_fence = "lun-reset"
"#;

fn every_setting_resolved() -> Effective {
    Effective {
        connect_timeout: Duration::from_secs(7),
        login_timeout: Duration::from_millis(500),
        replacement_timeout: Duration::ZERO,
        nop_interval: Duration::ZERO,
        nop_timeout: Duration::from_secs(3),
        command_timeout: Duration::from_secs(120),
        max_recv_segment: 64 << 10,
        header_digest: Some(DigestPref::Crc32c),
        data_digest: Some(DigestPref::PreferCrc32c),
        cache: Some(CacheChoice::WriteThrough),
        cache_size: 64 << 20,
        readahead: OnOff::Off,
        writeback_delay: Duration::from_millis(250),
        stats_interval: Some(Duration::from_secs(3600)),
        multipath: crate::config::settings::MultipathMode::Auto,
        multipath_policy: crate::config::settings::MultipathPolicy::QueueLength,
        failback: crate::config::settings::Failback::Manual,
        path_check_interval: Duration::from_secs(2),
        path_timeout: Duration::from_secs(15),
        path_fence: crate::config::settings::PathFence::LunReset,
    }
}

#[test]
fn every_setting_parses_in_defaults_and_in_a_target_entry() {
    let text = format!("[defaults]\nthreads = 4\n{EVERY_SETTING}");
    let cfg = Config::from_toml_str(&text, Path::new("r.toml")).unwrap();
    assert_eq!(cfg.defaults.threads, Some(4));
    assert_eq!(cfg.settings_for(None).resolve(), every_setting_resolved());

    let text = format!("[targets.t]\nurl = \"iscsi://h/{IQN}\"\n{EVERY_SETTING}");
    let cfg = Config::from_toml_str(&text, Path::new("r.toml")).unwrap();
    assert_eq!(cfg.settings_for(None), Settings::default());
    assert_eq!(
        cfg.settings_for(cfg.target("t")).resolve(),
        every_setting_resolved()
    );
}

#[test]
fn bare_integers_mean_seconds_and_bytes_and_booleans_switch() {
    let text = "[defaults]\nconnect_timeout = 5\ncache_size = 2097152\nreadahead = false\n";
    let s = Config::from_toml_str(text, Path::new("r.toml"))
        .unwrap()
        .settings_for(None);
    assert_eq!(s.connect_timeout, Some(Duration::from_secs(5)));
    assert_eq!(s.cache_size, Some(2 << 20));
    assert_eq!(s.readahead, Some(OnOff::Off));
}

#[test]
fn a_target_entry_beats_defaults_which_beat_the_built_in_defaults() {
    let text = format!(
        "[defaults]\nconnect_timeout = \"3s\"\nnop_interval = \"1s\"\n\
         [targets.t]\nurl = \"iscsi://h/{IQN}\"\nconnect_timeout = \"4s\"\n"
    );
    let cfg = Config::from_toml_str(&text, Path::new("r.toml")).unwrap();
    let s = cfg.settings_for(cfg.target("t")).resolve();
    assert_eq!(s.connect_timeout, Duration::from_secs(4));
    assert_eq!(s.nop_interval, Duration::from_secs(1));
    assert_eq!(s.login_timeout, BUILT_IN.login_timeout);
    // The command line goes before all of them.
    let cli = Settings {
        connect_timeout: Some(Duration::from_secs(9)),
        ..Settings::default()
    };
    let s = cli.or(&cfg.settings_for(cfg.target("t"))).resolve();
    assert_eq!(s.connect_timeout, Duration::from_secs(9));
    assert_eq!(s.nop_interval, Duration::from_secs(1));
}

#[test]
fn bad_values_are_errors_naming_file_line_and_key() {
    for (key, value, why) in [
        ("connect_timeout", "\"0\"", "must be more than 0"),
        ("login_timeout", "\"0s\"", "must be more than 0"),
        ("nop_timeout", "0", "must be more than 0"),
        ("command_timeout", "\"0ms\"", "must be more than 0"),
        ("stats_interval", "\"0\"", "must be more than 0"),
        ("connect_timeout", "\"soon\"", "invalid duration"),
        ("replacement_timeout", "\"-1s\"", "invalid duration"),
        ("connect_timeout", "true", "expected a duration"),
        ("max_recv_segment", "\"100\"", "outside 512..16777215"),
        ("max_recv_segment", "\"16M\"", "outside 512..16777215"),
        ("cache_size", "\"512k\"", "at least 1M"),
        ("cache_size", "\"4x\"", "invalid size unit"),
        ("readahead", "\"maybe\"", "neither on nor off"),
        ("cache", "\"write-around\"", "unknown variant"),
        ("threads", "0", "from 1 to 1024"),
    ] {
        let text = format!("[defaults]\n\n{key} = {value}\n");
        let err = Config::from_toml_str(&text, Path::new("/etc/rlun/rlun.toml")).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!(
                "config file /etc/rlun/rlun.toml: line 3, column {}, key `defaults.{key}`: ",
                key.len() + 4
            )) && msg.contains(why),
            "{key} = {value}: {msg}"
        );
    }
    // The same in a target entry; threads is for [defaults] only.
    let text = format!("[targets.t]\nurl = \"iscsi://h/{IQN}\"\nnop_timeout = \"0\"\n");
    let msg = Config::from_toml_str(&text, Path::new("r.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("line 3, column 15, key `targets.t.nop_timeout`: ")
            && msg.contains("more than 0"),
        "{msg}"
    );
    let text = format!("[targets.t]\nurl = \"iscsi://h/{IQN}\"\nthreads = 2\n");
    let msg = Config::from_toml_str(&text, Path::new("r.toml"))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("line 3, column 1, key `targets.t.threads`: unknown field `threads`"),
        "{msg}"
    );
}

#[test]
fn zero_is_refused_or_taken_alike_on_the_command_line_and_in_the_file() {
    use super::settings::{parse_duration, parse_timeout};
    // (file key, the command line's parser, whether 0 is allowed)
    type Parser = fn(&str) -> Result<Duration, String>;
    let rules: [(&str, Parser, bool); 7] = [
        ("connect_timeout", parse_timeout, false),
        ("login_timeout", parse_timeout, false),
        ("nop_timeout", parse_timeout, false),
        ("command_timeout", parse_timeout, false),
        ("stats_interval", parse_timeout, false),
        ("replacement_timeout", parse_duration, true),
        ("nop_interval", parse_duration, true),
    ];
    for (key, cli_parse, zero_ok) in rules {
        let file = Config::from_toml_str(&format!("[defaults]\n{key} = \"0s\"\n"), Path::new("r"));
        assert_eq!(file.is_ok(), zero_ok, "{key} in the file");
        assert_eq!(
            cli_parse("0s").is_ok(),
            zero_ok,
            "{key} on the command line"
        );
    }
    // And through clap itself, for the options of that name.
    use clap::Parser as _;
    for (key, _, zero_ok) in rules {
        let flag = format!("--{}", key.replace('_', "-"));
        let parsed =
            crate::cli::Cli::try_parse_from(["rlun", "bench", "iscsi://h/iqn.x/1", &flag, "0"]);
        assert_eq!(parsed.is_ok(), zero_ok, "{flag} 0");
    }
    assert!(crate::cli::Cli::try_parse_from(["rlun", "--threads", "0", "list"]).is_err());
    assert!(Config::from_toml_str("[defaults]\nthreads = 0\n", Path::new("r")).is_err());
}

#[test]
fn the_old_integer_timeout_keys_still_work_with_a_warning() {
    let cfg = Config::from_toml_str(
        "[defaults]\nconnect_timeout_secs = 5\nlogin_timeout_secs = 20\n",
        Path::new("r.toml"),
    )
    .unwrap();
    let s = cfg.settings_for(None);
    assert_eq!(s.connect_timeout, Some(Duration::from_secs(5)));
    assert_eq!(s.login_timeout, Some(Duration::from_secs(20)));
    assert_eq!(cfg.warnings.len(), 2, "{:?}", cfg.warnings);
    assert_eq!(
        cfg.warnings[0],
        "config file r.toml: line 2, key `defaults.connect_timeout_secs` is deprecated: \
         write connect_timeout = \"5s\" instead"
    );
    let err = Config::from_toml_str(
        "[defaults]\nconnect_timeout = \"5s\"\nconnect_timeout_secs = 5\n",
        Path::new("r.toml"),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "config file r.toml: line 3, key `defaults.connect_timeout_secs`: give connect_timeout \
         or connect_timeout_secs, not both"
    );
}

#[test]
fn a_target_may_name_where_its_metrics_are_served() {
    let with = entry(
        r#"
[targets.store]
url = "iscsi://10.0.0.5/iqn.2026-11.org.example:store"
metrics_listen = "127.0.0.1:9860"
"#,
    );
    let without = entry(
        r#"
[targets.store]
url = "iscsi://10.0.0.5/iqn.2026-11.org.example:store"
"#,
    );
    let bad = Config::from_toml_str(
        r#"
[targets.store]
url = "iscsi://10.0.0.5/iqn.2026-11.org.example:store"
metrics_listen = "localhost"
"#,
        Path::new("/etc/rlun/rlun.toml"),
    );

    assert_eq!(with.metrics_listen, Some("127.0.0.1:9860".parse().unwrap()));
    assert!(!with.metrics_allow_remote);
    assert_eq!(without.metrics_listen, None);
    let err = bad.expect_err("not an address").to_string();
    assert!(err.contains("metrics_listen"), "{err}");
}
