//! Refusing a copy onto itself before anything is written: a LUN named
//! twice (by URL, by config-file name, or both, after normalising the
//! host, the target name's case and the scheme) or one file named twice
//! (the same device and inode: a hard link, another path).

use std::collections::HashSet;
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use crate::cmd::context::Ctx;
use crate::cmd::error::CliError;
use crate::url::{Portal, TargetUrl};

/// How long the host names of the two URLs may take to resolve.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// A usage error when `src` and `dst` are the same local file.
pub fn refuse_same_file(src: &str, dst: &str) -> Result<(), CliError> {
    if src == "-" || dst == "-" {
        return Ok(());
    }
    let (Ok(a), Ok(b)) = (std::fs::metadata(src), std::fs::metadata(dst)) else {
        return Ok(());
    };
    if a.dev() == b.dev() && a.ino() == b.ino() {
        return Err(CliError::Usage(format!(
            "{src} and {dst} are the same file (device {}, inode {}): refusing to copy a file onto itself",
            a.dev(),
            a.ino()
        )));
    }
    Ok(())
}

/// A usage error when `src` and `dst` name the same LUN. Arguments that
/// do not resolve to a LUN URL are left for the copy to report.
pub async fn refuse_same_lun(ctx: &Ctx, src: &str, dst: &str) -> Result<(), CliError> {
    let (Ok((a, _)), Ok((b, _))) = (ctx.resolve_url(src), ctx.resolve_url(dst)) else {
        return Ok(());
    };
    if !same_lun_names(&a, &b) || !same_host(&a.portal, &b.portal).await {
        return Ok(());
    }
    let (target, lun) = (a.target.as_deref().unwrap_or(""), a.lun.unwrap_or(0));
    Err(CliError::Usage(format!(
        "source and destination are the same LUN, LUN {lun} of {target} at {}: refusing to copy a LUN onto itself",
        a.portal
    )))
}

/// Same target name (iSCSI names compare without case), LUN and port;
/// the scheme does not matter (iSER and TCP reach the same LUN).
fn same_lun_names(a: &TargetUrl, b: &TargetUrl) -> bool {
    match (&a.target, &b.target, a.lun, b.lun) {
        (Some(ta), Some(tb), Some(la), Some(lb)) => {
            la == lb && ta.eq_ignore_ascii_case(tb) && a.portal.port == b.portal.port
        }
        _ => false,
    }
}

/// The same host name (without case), or names whose addresses overlap
/// (`localhost` and `127.0.0.1`, two spellings of one IPv6 address).
async fn same_host(a: &Portal, b: &Portal) -> bool {
    if a.host.eq_ignore_ascii_case(&b.host) {
        return true;
    }
    match (addresses(a).await, addresses(b).await) {
        (Some(x), Some(y)) => !x.is_disjoint(&y),
        // A name that does not resolve fails the login with its own message.
        _ => false,
    }
}

async fn addresses(p: &Portal) -> Option<HashSet<SocketAddr>> {
    let (host, port) = p.host_port();
    let found = tokio::time::timeout(
        RESOLVE_TIMEOUT,
        tokio::net::lookup_host((host.as_str(), port)),
    )
    .await
    .ok()?
    .ok()?;
    Some(found.collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> TargetUrl {
        TargetUrl::parse(s).unwrap()
    }

    #[tokio::test]
    async fn spellings_of_one_lun_are_the_same_lun() {
        let a = url("iscsi://127.0.0.1/iqn.2026-11.org.example:t/1");
        for b in [
            "iscsi://127.0.0.1:3260/iqn.2026-11.org.example:t/1",
            "iser://127.0.0.1/IQN.2026-11.ORG.EXAMPLE:T/1",
            "iscsi://user@localhost:3260/iqn.2026-11.org.example:t/1",
        ] {
            let b = url(b);
            assert!(
                same_lun_names(&a, &b) && same_host(&a.portal, &b.portal).await,
                "{b}"
            );
        }
        let v6 = url("iscsi://[::1]/iqn.2026-11.org.example:t/1");
        let v6b = url("iscsi://[0:0::1]:3260/iqn.2026-11.org.example:t/1");
        assert!(same_host(&v6.portal, &v6b.portal).await);
    }

    #[tokio::test]
    async fn another_lun_target_or_port_is_another_lun() {
        let a = url("iscsi://127.0.0.1/iqn.2026-11.org.example:t/1");
        for b in [
            "iscsi://127.0.0.1/iqn.2026-11.org.example:t/2",
            "iscsi://127.0.0.1/iqn.2026-11.org.example:u/1",
            "iscsi://127.0.0.1:3261/iqn.2026-11.org.example:t/1",
            "iscsi://127.0.0.1/iqn.2026-11.org.example:t",
        ] {
            assert!(!same_lun_names(&a, &url(b)), "{b}");
        }
        let other = url("iscsi://192.0.2.1/iqn.2026-11.org.example:t/1");
        assert!(!same_host(&a.portal, &other.portal).await);
    }

    #[test]
    fn a_hard_link_is_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, c) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("c"),
        );
        std::fs::write(&a, b"x").unwrap();
        std::fs::hard_link(&a, &b).unwrap();
        std::fs::write(&c, b"x").unwrap();
        let s = |p: &std::path::Path| p.to_str().unwrap().to_string();

        assert!(matches!(
            refuse_same_file(&s(&a), &s(&b)),
            Err(CliError::Usage(m)) if m.contains("same file")
        ));
        assert!(refuse_same_file(&s(&a), &s(&c)).is_ok());
        assert!(refuse_same_file(&s(&a), "-").is_ok());
    }
}
