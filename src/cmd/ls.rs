//! `rlun ls`: the LUNs of a target, or of every target a portal offers.

use super::{human_size, CliError, Ctx};
use crate::cli::ConnectOpts;
use crate::client::{ClientError, Target};
use crate::session::discover;
use crate::url::TargetUrl;

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
            discover(cfg).await?.into_iter().map(|t| t.name).collect()
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
    let mut failures = 0;
    for name in targets {
        let turl = TargetUrl {
            target: Some(name.clone()),
            lun: None,
            ..url.clone()
        };
        let cfg = ctx.session_config(&turl, entry.as_deref(), opts)?;
        let target = match Target::login(cfg).await {
            Ok(t) => t,
            Err(e) if url.target.is_none() => {
                // One unreachable target should not hide the others.
                eprintln!("rlun: {name}: {}", crate::session::error_chain(&e));
                failures += 1;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
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
                Err(ClientError::NotADisk { device_type, .. }) => {
                    // Keep the columns aligned: "storage array controller" is long.
                    let kind: String = device_type.chars().take(16).collect();
                    out!(
                        "{:<4} {:>10} {:>6} {:<8} {:<16} {:<3} {}",
                        n,
                        "-",
                        "-",
                        "-",
                        kind,
                        "-",
                        lurl
                    )
                }
                Err(e) => return Err(e.into()),
            }
        }
        let _ = target.logout().await;
    }
    if failures > 0 {
        return Err(CliError::Other(format!(
            "{failures} target(s) could not be listed"
        )));
    }
    Ok(())
}
