//! `rlun ls`: the LUNs of a target, or of every target a portal offers.

use super::context::Ctx;
use super::error::{discovery_failed, CliError};
use crate::cli::ConnectOpts;
use crate::client::{ClientError, LoggedIn, Target};
use crate::service::human_size;
use crate::session::discover;
#[cfg(test)]
use crate::session::SessionError;
use crate::url::TargetUrl;
use rlun_iscsi::ErrorKind;

pub async fn run(ctx: &Ctx, arg: &str, opts: &ConnectOpts) -> Result<(), CliError> {
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
    out!(
        "{:<4} {:>10} {:>6} {:<8} {:<16} {:<3} URL",
        "LUN",
        "SIZE",
        "BLOCK",
        "VENDOR",
        "PRODUCT",
        "RO"
    );
    let total = targets.len();
    let mut failures: Vec<(String, CliError)> = Vec::new();
    for name in targets {
        let turl = TargetUrl {
            target: Some(name.clone()),
            lun: None,
            ..url.clone()
        };
        let cfg = ctx.session_config(&turl, entry.as_deref(), opts)?;
        let target = match LoggedIn::login(cfg).await {
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
        target
            .scope(async |target: &Target| list_luns(target, &turl).await)
            .await?;
    }
    match partly_failed(total, failures) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// One line per LUN of the logged-in `target` (whose URL is `turl`).
async fn list_luns(target: &Target, turl: &TargetUrl) -> Result<(), CliError> {
    let luns = target.report_luns().await?;
    for n in luns {
        let lurl = turl.with_lun(n);
        match target.open_lun(n).await {
            Ok(lun) => out!(
                "{:<4} {:>10} {:>6} {:<8} {:<16} {:<3} {}",
                n,
                human_size(lun.capacity_bytes()),
                lun.block_size(),
                lun.inquiry.vendor,
                lun.inquiry.product,
                if lun.write_protected() { "yes" } else { "no" },
                lurl
            ),
            Err(ClientError::NotADisk {
                device_type,
                vendor,
                ..
            }) => {
                // Keep the columns aligned: "storage array controller" is long.
                let kind: String = device_type.chars().take(16).collect();
                out!(
                    "{:<4} {:>10} {:>6} {:<8} {:<16} {:<3} {}",
                    n,
                    "-",
                    "-",
                    if vendor.is_empty() { "-" } else { &vendor },
                    kind,
                    "-",
                    lurl
                )
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
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
