//! `rlun ls`: the LUNs of a target, or of every target a portal offers.

use super::context::Ctx;
use super::error::{discovery_failed, CliError};
use crate::cli::ConnectOpts;
use crate::client::{ClientError, LoggedIn, Target};
use crate::service::human_size;
use crate::session::{discover, SessionConfig, SessionError};
use crate::url::TargetUrl;
use rlun_iscsi::ErrorKind;
use tracing::info;

pub async fn run(ctx: &Ctx, arg: &str, as_json: bool, opts: &ConnectOpts) -> Result<(), CliError> {
    let (url, entry) = ctx.resolve_url(arg)?;
    let targets: Vec<String> = match &url.target {
        Some(t) => vec![t.clone()],
        None => {
            let portal = TargetUrl {
                target: None,
                lun: None,
                ..url.clone()
            };
            let cfg = ctx.session_config(&portal, entry.as_deref(), opts)?;
            discover(cfg)
                .await
                .map_err(discovery_failed)?
                .into_iter()
                .map(|t| t.name)
                .collect()
        }
    };
    let total = targets.len();
    let mut rows: Vec<Row> = Vec::new();
    let mut failures: Vec<(String, CliError)> = Vec::new();
    for name in targets {
        let turl = TargetUrl {
            target: Some(name.clone()),
            lun: None,
            ..url.clone()
        };
        let cfg = ctx.session_config(&turl, entry.as_deref(), opts)?;
        let mut turl = turl;
        let login = match LoggedIn::login(cfg.clone()).await {
            // Credentials given for a portal are offered to each of its
            // targets; one that takes no CHAP refuses the offer itself
            // (no secret was sent): list it without, and give its LUNs
            // URLs without the user name.
            Err(e) if url.target.is_none() && cfg.chap.is_some() && chap_not_used(&e) => {
                info!(target = %name, "the target takes no CHAP; listing it without credentials");
                turl.user = None;
                turl.mutual_user = None;
                LoggedIn::login(SessionConfig { chap: None, ..cfg }).await
            }
            other => other,
        };
        let target = match login {
            Ok(t) => t,
            Err(e) if url.target.is_none() => {
                // One target that refuses us (CHAP, ACL) or cannot be
                // reached should not hide the others: list them, then say
                // which could not be listed and why.
                failures.push((name, e.into()));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let listed = target
            .scope(async |target: &Target| list_luns(target, &name, &turl).await)
            .await?;
        rows.extend(listed);
    }
    if as_json {
        let v: Vec<serde_json::Value> = rows.iter().map(Row::json).collect();
        out!(
            "{}",
            serde_json::to_string_pretty(&v).expect("JSON of plain values")
        );
    } else {
        print_table(&rows)?;
    }
    match partly_failed(total, failures) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Whether a login failed because the target refused `AuthMethod=CHAP`.
fn chap_not_used(e: &ClientError) -> bool {
    matches!(
        e,
        ClientError::Session(SessionError::Login {
            source: rlun_iscsi::proto::login::LoginError::ChapNotAccepted,
            ..
        })
    )
}

/// One LUN of a listing.
#[derive(Debug)]
struct Row {
    target: String,
    portal: String,
    lun: u64,
    url: String,
    device_type: String,
    vendor: String,
    product: String,
    /// `None` for LUNs that are no disks.
    disk: Option<Disk>,
}

#[derive(Debug)]
struct Disk {
    bytes: u64,
    block_size: u32,
    read_only: bool,
}

impl Row {
    /// The documented fields of `rlun ls --json` (rlun-ls(8)).
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "target": self.target,
            "portal": self.portal,
            "lun": self.lun,
            "url": self.url,
            "device_type": self.device_type,
            "disk": self.disk.is_some(),
            "size_bytes": self.disk.as_ref().map(|d| d.bytes),
            "block_size": self.disk.as_ref().map(|d| d.block_size),
            "read_only": self.disk.as_ref().map(|d| d.read_only),
            "vendor": self.vendor,
            "product": self.product,
        })
    }
}

fn print_table(rows: &[Row]) -> Result<(), CliError> {
    out!(
        "{:<4} {:>9} {:>6} {:<8} {:<16} {:<3} URL",
        "LUN",
        "SIZE",
        "BLOCK",
        "VENDOR",
        "PRODUCT",
        "RO"
    );
    for r in rows {
        // Keep the columns aligned: "storage array controller" is long.
        let (size, block, ro, product) = match &r.disk {
            Some(d) => (
                compact_size(d.bytes),
                d.block_size.to_string(),
                if d.read_only { "yes" } else { "no" },
                r.product.clone(),
            ),
            None => (
                "-".into(),
                "-".into(),
                "-",
                r.device_type.chars().take(16).collect(),
            ),
        };
        let vendor = if r.vendor.is_empty() { "-" } else { &r.vendor };
        out!(
            "{:<4} {:>9} {:>6} {:<8} {:<16} {:<3} {}",
            r.lun,
            size,
            block,
            vendor,
            product,
            ro,
            r.url
        );
    }
    Ok(())
}

/// A size for a table column, with no space inside: `64.0MiB`, `512B`.
fn compact_size(bytes: u64) -> String {
    human_size(bytes).replace(' ', "")
}

/// The LUNs of the logged-in `target` (named `name`, at `turl`).
async fn list_luns(target: &Target, name: &str, turl: &TargetUrl) -> Result<Vec<Row>, CliError> {
    let luns = target.report_luns().await?;
    let mut rows = Vec::with_capacity(luns.len());
    for n in luns {
        let row = |device_type: &str, vendor: &str, product: &str, disk| Row {
            target: name.to_string(),
            portal: turl.portal.to_string(),
            lun: n,
            url: turl.with_lun(n).to_string(),
            device_type: device_type.to_string(),
            vendor: vendor.to_string(),
            product: product.to_string(),
            disk,
        };
        match target.open_lun(n).await {
            Ok(lun) => rows.push(row(
                lun.inquiry.device_type.name(),
                &lun.inquiry.vendor,
                &lun.inquiry.product,
                Some(Disk {
                    bytes: lun.capacity_bytes(),
                    block_size: lun.block_size(),
                    read_only: lun.write_protected(),
                }),
            )),
            Err(ClientError::NotADisk {
                device_type,
                vendor,
                product,
                ..
            }) => rows.push(row(&device_type, &vendor, &product, None)),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(rows)
}

/// The error of `rlun ls PORTAL` when some of its `total` targets could not
/// be listed: one message naming each with its cause, and their kind (so
/// the exit code) when they all agree — a portal whose targets all want
/// CHAP exits with the authentication code — else a plain failure.
fn partly_failed(total: usize, failures: Vec<(String, CliError)>) -> Option<CliError> {
    let first_kind = failures.first()?.1.kind();
    let kind = if failures.iter().all(|(_, e)| e.kind() == first_kind) {
        first_kind
    } else {
        ErrorKind::Failure
    };
    let what = |name: &str, e: &CliError| format!("{name}: {}", rlun_iscsi::error_chain(e));
    let head = format!("{} of {total} targets could not be listed", failures.len());
    let message = match failures.as_slice() {
        [(name, e)] => format!("{head}: {}", what(name, e)),
        many => many.iter().fold(format!("{head}:"), |mut m, (name, e)| {
            m.push_str("\n  ");
            m.push_str(&what(name, e));
            m
        }),
    };
    Some(CliError::Described { message, kind })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_targets_are_named_with_their_kind_when_they_agree() {
        let auth = || {
            CliError::Client(ClientError::Session(SessionError::Login {
                portal: "p".into(),
                source: rlun_iscsi::proto::login::LoginError::AuthenticationFailed,
            }))
        };
        assert!(partly_failed(3, vec![]).is_none());

        let one = partly_failed(2, vec![("iqn.a".into(), auth())]).unwrap();
        let two = partly_failed(
            3,
            vec![
                ("iqn.a".into(), auth()),
                ("iqn.b".into(), CliError::Other("x".into())),
            ],
        )
        .unwrap();

        assert_eq!(one.kind(), ErrorKind::Auth);
        let one_text = one.to_string();
        assert!(
            one_text.starts_with("1 of 2 targets could not be listed: iqn.a: "),
            "{one_text}"
        );
        assert!(!one_text.contains('\n'), "{one_text}");
        assert_eq!(two.kind(), ErrorKind::Failure);
        assert_eq!(
            two.to_string().lines().collect::<Vec<_>>()[1..],
            [
                "  iqn.a: ".to_string() + &rlun_iscsi::error_chain(&auth()),
                "  iqn.b: x".into()
            ]
        );
    }
}
