//! Where targets are (RFC 7143 §13.8, Appendix C): `TargetAddress` values
//! — `host[:port][,portal-group-tag]` — as a SendTargets answer lists them
//! or a login redirect names one, and the answer to `SendTargets=All`
//! read into targets with their addresses.

use super::error::NegotiationError;
use super::keys::Key;
use crate::proto::text::{self, parse_number};

/// iSCSI's well-known TCP port (RFC 7143 §13.8 default).
pub const DEFAULT_PORT: u16 = 3260;

/// A parsed `TargetAddress` value: `host[:port][,portal-group-tag]`, the host
/// a DNS name, an IPv4 address or a bracketed IPv6 address (RFC 7143 §13.8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetAddress {
    /// Host without brackets (`::1` for `[::1]`).
    pub host: String,
    /// The port, if given; see [`TargetAddress::port_or_default`].
    pub port: Option<u16>,
    pub portal_group_tag: Option<u16>,
}

/// Back to the wire form: `host[:port][,tag]`, IPv6 hosts in brackets.
impl std::fmt::Display for TargetAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]", self.host)?;
        } else {
            f.write_str(&self.host)?;
        }
        if let Some(p) = self.port {
            write!(f, ":{p}")?;
        }
        if let Some(t) = self.portal_group_tag {
            write!(f, ",{t}")?;
        }
        Ok(())
    }
}

impl TargetAddress {
    pub fn parse(value: &str) -> Result<Self, NegotiationError> {
        let bad = |reason| NegotiationError::BadTargetAddress {
            value: text::excerpt(value),
            reason,
        };
        let (hostport, tag) = match value.rsplit_once(',') {
            Some((hp, tag)) => {
                let tag = parse_number(tag)
                    .ok()
                    .and_then(|t| u16::try_from(t).ok())
                    .ok_or_else(|| bad("portal group tag is not a 16-bit number"))?;
                (hp, Some(tag))
            }
            None => (value, None),
        };
        let (host, port) = if let Some(rest) = hostport.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
            match after {
                "" => (host, None),
                _ => (
                    host,
                    Some(
                        after
                            .strip_prefix(':')
                            .ok_or_else(|| bad("junk after ']'"))?,
                    ),
                ),
            }
        } else {
            match hostport.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (hostport, None),
            }
        };
        if host.is_empty() || host.contains([',', ' ', '[', ']']) {
            return Err(bad("empty or malformed host"));
        }
        let port = match port {
            Some(p) => Some(
                Some(p)
                    .filter(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                    .and_then(|p| p.parse::<u16>().ok())
                    .filter(|p| *p != 0)
                    .ok_or_else(|| bad("port is not a number from 1 to 65535"))?,
            ),
            None => None,
        };
        Ok(TargetAddress {
            host: host.to_owned(),
            port,
            portal_group_tag: tag,
        })
    }

    /// The port, or 3260 when the address gave none.
    pub fn port_or_default(&self) -> u16 {
        self.port.unwrap_or(DEFAULT_PORT)
    }
}

/// One target of a SendTargets answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredTarget {
    pub name: String,
    /// May be empty: then the target is reached through the portal that
    /// answered (RFC 7143 Appendix C).
    pub addresses: Vec<TargetAddress>,
}

/// Reads the keys of a SendTargets Text Response (RFC 7143 §13.3,
/// Appendix C): each `TargetName` starts a target, the `TargetAddress` keys
/// after it belong to it. Other keys are ignored.
pub fn parse_send_targets(
    keys: &[(String, String)],
) -> Result<Vec<DiscoveredTarget>, NegotiationError> {
    let mut targets: Vec<DiscoveredTarget> = Vec::new();
    for (key, value) in keys {
        match Key::from_name(key) {
            Some(Key::TargetName) => targets.push(DiscoveredTarget {
                name: value.clone(),
                addresses: Vec::new(),
            }),
            Some(Key::TargetAddress) => {
                let target = targets
                    .last_mut()
                    .ok_or(NegotiationError::AddressWithoutTarget)?;
                target.addresses.push(TargetAddress::parse(value)?);
            }
            _ => {}
        }
    }
    Ok(targets)
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::*;

    #[test]
    fn target_address_displays_in_its_wire_form() {
        for v in [
            "10.0.0.5:3261,1",
            "[fe80::1]:3262,2",
            "[::1]",
            "host.example",
        ] {
            assert_eq!(TargetAddress::parse(v).unwrap().to_string(), v);
        }
    }

    #[test]
    fn target_addresses_parse_ipv4_ipv6_and_names() {
        assert_eq!(
            TargetAddress::parse("10.0.0.5:3260,1").unwrap(),
            TargetAddress {
                host: "10.0.0.5".into(),
                port: Some(3260),
                portal_group_tag: Some(1)
            }
        );
        assert_eq!(
            TargetAddress::parse("[fe80::1]:3261,2").unwrap(),
            TargetAddress {
                host: "fe80::1".into(),
                port: Some(3261),
                portal_group_tag: Some(2)
            }
        );
        let bare = TargetAddress::parse("storage.example.com").unwrap();
        assert_eq!((bare.port, bare.portal_group_tag), (None, None));
        assert_eq!(bare.port_or_default(), 3260);
        assert_eq!(TargetAddress::parse("[::1]").unwrap().host, "::1");
        for bad in [
            "",
            ":3260",
            "host:",
            "host:99999",
            "host:0",
            "[::1",
            "[::1]x",
            "h,x",
            "a b:1",
        ] {
            assert!(TargetAddress::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn send_targets_response_groups_addresses_by_target() {
        // Arrange: a tgtd SendTargets=All answer for two targets.
        let keys = kv(&[
            ("TargetName", "iqn.2026-11.org.example:disk1"),
            ("TargetAddress", "127.0.0.1:3260,1"),
            ("TargetAddress", "[::1]:3260,1"),
            ("TargetName", "iqn.2026-11.org.example:disk2"),
        ]);
        // Act
        let targets = parse_send_targets(&keys).unwrap();
        // Assert
        assert_eq!(targets.len(), 2);
        assert_eq!(targets[0].name, "iqn.2026-11.org.example:disk1");
        assert_eq!(targets[0].addresses.len(), 2);
        assert_eq!(targets[0].addresses[1].host, "::1");
        assert!(targets[1].addresses.is_empty());
        assert_eq!(
            parse_send_targets(&kv(&[("TargetAddress", "1.2.3.4")])),
            Err(NegotiationError::AddressWithoutTarget)
        );
    }
}
