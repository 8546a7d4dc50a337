//! `rlun discover`: the targets a portal offers (SendTargets), as text
//! (`iscsiadm -m discovery` style) or JSON.

use super::context::Ctx;
use super::error::{discovery_failed, CliError};
use crate::cli::ConnectOpts;
use crate::session::discover;
use crate::url::TargetUrl;

pub async fn run(ctx: &Ctx, arg: &str, as_json: bool, opts: &ConnectOpts) -> Result<(), CliError> {
    let (url, entry) = ctx.resolve_url(arg)?;
    let portal_url = TargetUrl {
        target: None,
        lun: None,
        ..url
    };
    let cfg = ctx.session_config(&portal_url, entry.as_deref(), opts)?;
    let targets = discover(cfg).await.map_err(discovery_failed)?;
    if targets.is_empty() {
        eprintln!(
            "portal {} offers no targets to this initiator",
            portal_url.portal
        );
    }
    if as_json {
        // The documented fields of `rlun discover --json` (rlun-discover(8)).
        let v: Vec<serde_json::Value> = targets
            .iter()
            .map(|t| {
                let addresses: Vec<serde_json::Value> = t
                    .addresses
                    .iter()
                    .map(|a| {
                        serde_json::json!({
                            "address": a.to_string(),
                            "host": a.host,
                            "port": a.port_or_default(),
                            "portal_group_tag": a.portal_group_tag,
                        })
                    })
                    .collect();
                serde_json::json!({
                    "target": t.name,
                    "url": TargetUrl {
                        target: Some(t.name.clone()),
                        ..portal_url.clone()
                    }
                    .to_string(),
                    "addresses": addresses,
                })
            })
            .collect();
        out!(
            "{}",
            serde_json::to_string_pretty(&v).expect("JSON of plain values")
        );
        return Ok(());
    }
    for t in targets {
        let addrs: Vec<String> = t.addresses.iter().map(|a| a.to_string()).collect();
        out!("{} {}", t.name, addrs.join(" "));
    }
    Ok(())
}
