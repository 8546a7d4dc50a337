//! Asymmetric logical unit access (ALUA, SPC-4 §5.16 / SPC-5 §5.15): which
//! target port group a path reaches, what state the group is in, and the
//! sense data by which a target says a path cannot carry I/O now.
//!
//! - [`AluaState`]: the asymmetric access states, ranked for choosing a path.
//! - [`report_target_port_groups`] and [`TargetPortGroups::parse`]: REPORT
//!   TARGET PORT GROUPS (SPC-5 §6.36), the states of all groups and which
//!   relative target ports belong to each.
//! - [`PortIdentity::from_page`]: the relative target port and the target
//!   port group a path reaches, from the Device Identification VPD page
//!   (0x83) read through that path.
//! - [`AluaSense::of`]: NOT READY 04/0A (transitioning), 04/0B (standby),
//!   04/0C (unavailable), UNIT ATTENTION 2A/06 (asymmetric access state
//!   changed) and 2A/07 (implicit transition failed).

use super::cdb::{Cdb, CdbError};
use super::sense::{ScsiError, SenseKey};
use super::vpd::{Association, DesignatorType, DeviceIdentification};
use super::{be16_at, be32_at, need, u8_at, ParseError};

/// An asymmetric access state (SPC-5 table 137).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AluaState {
    ActiveOptimized,
    ActiveNonOptimized,
    Standby,
    Unavailable,
    /// Logical block dependent: some blocks active, others not.
    LbaDependent,
    Offline,
    Transitioning,
    /// A reserved code.
    Reserved(u8),
}

impl AluaState {
    /// From the 4-bit ASYMMETRIC ACCESS STATE field.
    pub fn from_code(code: u8) -> AluaState {
        match code & 0x0f {
            0x0 => AluaState::ActiveOptimized,
            0x1 => AluaState::ActiveNonOptimized,
            0x2 => AluaState::Standby,
            0x3 => AluaState::Unavailable,
            0x4 => AluaState::LbaDependent,
            0xe => AluaState::Offline,
            0xf => AluaState::Transitioning,
            c => AluaState::Reserved(c),
        }
    }

    /// Whether reads and writes may be sent through a port in this state
    /// (SPC-5 §5.15.2.4: active/optimized and active/non-optimized process
    /// every command; an LBA-dependent group processes those for its
    /// blocks, which a path layer without the LBA map treats as active).
    pub fn carries_io(self) -> bool {
        matches!(
            self,
            AluaState::ActiveOptimized | AluaState::ActiveNonOptimized | AluaState::LbaDependent
        )
    }

    /// Preference when choosing a path: lower is better. The active states
    /// first, then transitioning (it may become active soon), then standby,
    /// unavailable and offline, which carry no I/O.
    pub fn rank(self) -> u8 {
        match self {
            AluaState::ActiveOptimized => 0,
            AluaState::ActiveNonOptimized => 1,
            AluaState::LbaDependent => 2,
            AluaState::Transitioning => 3,
            AluaState::Standby => 4,
            AluaState::Unavailable => 5,
            AluaState::Offline => 6,
            AluaState::Reserved(_) => 7,
        }
    }

    /// The state as `multipath -ll` and sg_rtpg write it.
    pub fn name(self) -> &'static str {
        match self {
            AluaState::ActiveOptimized => "active/optimized",
            AluaState::ActiveNonOptimized => "active/non-optimized",
            AluaState::Standby => "standby",
            AluaState::Unavailable => "unavailable",
            AluaState::LbaDependent => "lba-dependent",
            AluaState::Offline => "offline",
            AluaState::Transitioning => "transitioning",
            AluaState::Reserved(_) => "reserved",
        }
    }
}

impl std::fmt::Display for AluaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

pub use super::cdb::opcode::MAINTENANCE_IN;
/// The service action of MAINTENANCE IN for REPORT TARGET PORT GROUPS.
pub const SA_REPORT_TARGET_PORT_GROUPS: u8 = 0x0A;

/// REPORT TARGET PORT GROUPS (SPC-5 §6.36): MAINTENANCE IN, service action
/// 0x0A, parameter data in the length-only format, allocation length in
/// bytes 6..10 (at least 4, the header).
pub fn report_target_port_groups(alloc_len: u32) -> Result<Cdb, CdbError> {
    if alloc_len < 4 {
        return Err(CdbError::AllocationTooSmall {
            command: "REPORT TARGET PORT GROUPS",
            min: 4,
            got: alloc_len,
        });
    }
    let a = alloc_len.to_be_bytes();
    let mut raw = [0u8; 12];
    raw[0] = MAINTENANCE_IN;
    raw[1] = SA_REPORT_TARGET_PORT_GROUPS;
    raw[6..10].copy_from_slice(&a);
    Cdb::from_bytes(&raw, super::DataDirection::Read, alloc_len)
}

/// One target port group descriptor of REPORT TARGET PORT GROUPS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortGroup {
    /// TARGET PORT GROUP.
    pub id: u16,
    pub state: AluaState,
    /// PREF: the preferred group for this logical unit.
    pub preferred: bool,
    /// The relative target port identifiers of the group's ports.
    pub ports: Vec<u16>,
}

/// The parameter data of REPORT TARGET PORT GROUPS.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TargetPortGroups {
    pub groups: Vec<PortGroup>,
}

impl TargetPortGroups {
    /// Parse the data in either header format (SPC-5 §6.36.2: the length-only
    /// header is 4 bytes; the extended one, FORMAT TYPE 001b in byte 4 bits
    /// 6..4, 8). A truncated answer is [`ParseError::Truncated`] with the
    /// whole length, to ask again with a larger allocation.
    pub fn parse(buf: &[u8]) -> Result<TargetPortGroups, ParseError> {
        const WHAT: &str = "REPORT TARGET PORT GROUPS data";
        need(buf, 4, WHAT)?;
        let len = be32_at(buf, 0) as usize;
        let total = len.checked_add(4).ok_or(ParseError::Malformed {
            what: WHAT,
            reason: "return data length overflows",
        })?;
        need(buf, total, WHAT)?;
        let extended = buf.len() >= 8 && (u8_at(buf, 4) >> 4) & 0x07 == 1;
        let mut at = if extended { 8 } else { 4 };
        let mut groups = Vec::new();
        while at < total {
            need(buf, at + 8, WHAT)?;
            let d = &buf[at..total];
            let count = u8_at(d, 7) as usize;
            let end = 8 + count * 4;
            if d.len() < end {
                return Err(ParseError::Malformed {
                    what: WHAT,
                    reason: "a port group descriptor runs past the data",
                });
            }
            groups.push(PortGroup {
                id: be16_at(d, 2),
                state: AluaState::from_code(d[0]),
                preferred: d[0] & 0x80 != 0,
                ports: (0..count).map(|i| be16_at(d, 8 + i * 4 + 2)).collect(),
            });
            at += end;
        }
        Ok(TargetPortGroups { groups })
    }

    /// The group a relative target port belongs to.
    pub fn group_of_port(&self, port: u16) -> Option<&PortGroup> {
        self.groups.iter().find(|g| g.ports.contains(&port))
    }

    /// The group with this id.
    pub fn group(&self, id: u16) -> Option<&PortGroup> {
        self.groups.iter().find(|g| g.id == id)
    }
}

/// Which target port a path reaches: the target-port designators of the
/// Device Identification page read through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortIdentity {
    /// RELATIVE TARGET PORT IDENTIFIER (designator type 4).
    pub relative_port: Option<u16>,
    /// TARGET PORT GROUP (designator type 5).
    pub port_group: Option<u16>,
}

impl PortIdentity {
    /// From the parsed page 0x83.
    pub fn from_page(page: &DeviceIdentification) -> PortIdentity {
        let find = |t: DesignatorType| {
            page.designators
                .iter()
                .find(|d| d.association == Association::TargetPort && d.designator_type == t)
                .filter(|d| d.value.len() >= 4)
                .map(|d| be16_at(&d.value, 2))
        };
        PortIdentity {
            relative_port: find(DesignatorType::RelativeTargetPort),
            port_group: find(DesignatorType::TargetPortGroup),
        }
    }
}

/// What sense data says about the path a command took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AluaSense {
    /// NOT READY 04/0A: the group is changing state; try again later, or
    /// through another group.
    Transitioning,
    /// NOT READY 04/0B: the port is in standby.
    Standby,
    /// NOT READY 04/0C: the port is unavailable.
    Unavailable,
    /// UNIT ATTENTION 2A/06: some group's state changed; read the groups
    /// again.
    StateChanged,
    /// UNIT ATTENTION 2A/07: an implicit transition failed; read again.
    TransitionFailed,
}

impl AluaSense {
    /// The ALUA condition this error reports, if any.
    pub fn of(err: &ScsiError) -> Option<AluaSense> {
        let (asc, ascq) = err.asc_ascq()?;
        match (err.sense_key()?, asc, ascq) {
            (SenseKey::NotReady, 0x04, 0x0a) => Some(AluaSense::Transitioning),
            (SenseKey::NotReady, 0x04, 0x0b) => Some(AluaSense::Standby),
            (SenseKey::NotReady, 0x04, 0x0c) => Some(AluaSense::Unavailable),
            (SenseKey::UnitAttention, 0x2a, 0x06) => Some(AluaSense::StateChanged),
            (SenseKey::UnitAttention, 0x2a, 0x07) => Some(AluaSense::TransitionFailed),
            _ => None,
        }
    }

    /// The state the condition implies for the port that answered, when
    /// it implies one.
    pub fn implied_state(self) -> Option<AluaState> {
        match self {
            AluaSense::Transitioning => Some(AluaState::Transitioning),
            AluaSense::Standby => Some(AluaState::Standby),
            AluaSense::Unavailable => Some(AluaState::Unavailable),
            AluaSense::StateChanged | AluaSense::TransitionFailed => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scsi::sense::{Sense, Status};

    /// A length-only RTPG answer: group 1 active/optimized and preferred
    /// with port 1, group 2 standby with ports 2 and 3.
    fn two_groups() -> Vec<u8> {
        let mut b = vec![0u8; 4];
        b.extend_from_slice(&[0x80, 0x8f, 0, 1, 0, 0, 0, 1]);
        b.extend_from_slice(&[0, 0, 0, 1]);
        b.extend_from_slice(&[0x02, 0x8f, 0, 2, 0, 0, 0, 2]);
        b.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 3]);
        let len = (b.len() - 4) as u32;
        b[..4].copy_from_slice(&len.to_be_bytes());
        b
    }

    #[test]
    fn report_target_port_groups_parses_states_ports_and_preference() {
        let g = TargetPortGroups::parse(&two_groups()).unwrap();
        assert_eq!(g.groups.len(), 2);
        assert_eq!(g.groups[0].id, 1);
        assert_eq!(g.groups[0].state, AluaState::ActiveOptimized);
        assert!(g.groups[0].preferred);
        assert_eq!(g.groups[0].ports, vec![1]);
        assert_eq!(g.groups[1].state, AluaState::Standby);
        assert!(!g.groups[1].preferred);
        assert_eq!(g.group_of_port(3).map(|g| g.id), Some(2));
        assert_eq!(g.group_of_port(9), None);
    }

    #[test]
    fn the_extended_header_is_skipped() {
        let plain = two_groups();
        let mut b = plain[..4].to_vec();
        let len = be32_at(&plain, 0) + 4;
        b[..4].copy_from_slice(&len.to_be_bytes());
        b.extend_from_slice(&[0x10, 5, 0, 0]);
        b.extend_from_slice(&plain[4..]);
        assert_eq!(
            TargetPortGroups::parse(&b).unwrap(),
            TargetPortGroups::parse(&plain).unwrap()
        );
    }

    #[test]
    fn a_truncated_answer_says_how_long_the_whole_is() {
        let b = two_groups();
        let e = TargetPortGroups::parse(&b[..10]).unwrap_err();
        assert_eq!(e.needed(), Some(b.len()));
        let mut bad = b.clone();
        bad[11] = 9; // port count past the data
        assert!(TargetPortGroups::parse(&bad).is_err());
    }

    #[test]
    fn the_cdb_is_maintenance_in_with_its_service_action() {
        let c = report_target_port_groups(1024).unwrap();
        let p = c.padded();
        assert_eq!(&p[..2], &[0xA3, 0x0A]);
        assert_eq!(&p[6..10], &1024u32.to_be_bytes());
        assert_eq!(c.expected_transfer_len(), 1024);
        assert!(report_target_port_groups(2).is_err());
    }

    #[test]
    fn states_rank_active_first_and_only_active_ones_carry_io() {
        let order = [0x0, 0x1, 0x4, 0xf, 0x2, 0x3, 0xe].map(AluaState::from_code);
        assert!(order.windows(2).all(|w| w[0].rank() < w[1].rank()));
        assert!(order[..3].iter().all(|s| s.carries_io()));
        assert!(order[3..].iter().all(|s| !s.carries_io()));
        assert_eq!(AluaState::from_code(0x5), AluaState::Reserved(5));
    }

    #[test]
    fn the_path_reports_its_port_and_group_through_page_0x83() {
        // NAA of the LU, then relative target port 2 and target port group 7.
        let mut p = vec![0x00, 0x83, 0, 0];
        p.extend_from_slice(&[0x01, 0x03, 0, 8, 0x60, 1, 2, 3, 4, 5, 6, 7]);
        p.extend_from_slice(&[0x61, 0x94, 0, 4, 0, 0, 0, 2]);
        p.extend_from_slice(&[0x61, 0x95, 0, 4, 0, 0, 0, 7]);
        let n = (p.len() - 4) as u16;
        p[2..4].copy_from_slice(&n.to_be_bytes());
        let page = DeviceIdentification::parse(&p).unwrap();
        let id = PortIdentity::from_page(&page);
        assert_eq!(id.relative_port, Some(2));
        assert_eq!(id.port_group, Some(7));
    }

    fn error(key: SenseKey, asc: u8, ascq: u8) -> ScsiError {
        let mut raw = [0u8; 18];
        raw[0] = 0x70;
        raw[2] = key.as_u8();
        raw[7] = 10;
        raw[12] = asc;
        raw[13] = ascq;
        ScsiError::new(Status::CheckCondition, Some(Sense::parse(&raw).unwrap()))
    }

    #[test]
    fn alua_sense_is_recognised_and_others_are_not() {
        let of = |k, a, q| AluaSense::of(&error(k, a, q));
        assert_eq!(
            of(SenseKey::NotReady, 4, 0x0a),
            Some(AluaSense::Transitioning)
        );
        assert_eq!(of(SenseKey::NotReady, 4, 0x0b), Some(AluaSense::Standby));
        assert_eq!(
            of(SenseKey::NotReady, 4, 0x0c),
            Some(AluaSense::Unavailable)
        );
        assert_eq!(
            of(SenseKey::UnitAttention, 0x2a, 6),
            Some(AluaSense::StateChanged)
        );
        assert_eq!(of(SenseKey::NotReady, 4, 0x01), None);
        assert_eq!(of(SenseKey::UnitAttention, 0x2a, 9), None);
        assert_eq!(AluaSense::Standby.implied_state(), Some(AluaState::Standby));
        assert_eq!(AluaSense::StateChanged.implied_state(), None);
    }
}
