//! [`LunIdentity`]: who a logical unit is (VPD 0x80 and 0x83), to tell
//! the LU under a LUN number now from the one rlun opened.

use rlun_iscsi::scsi::vpd::{self, Association, DesignatorType};

/// Who a logical unit is: its unit serial number (VPD 0x80) and the
/// designators of the logical unit itself in its device identification
/// page (VPD 0x83, association "logical unit": NAA, EUI-64, T10 vendor ID,
/// SCSI name string, UUID), as text. Two LUs with the same LUN at
/// different times are told apart by it: a target that deletes a LUN and
/// creates another under the same number (between two looks of rlun's)
/// reports another identity, and data cached or written for the first
/// must not reach the second.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LunIdentity {
    pub serial: Option<String>,
    /// Sorted: the order of the descriptors carries no meaning.
    pub designators: Vec<String>,
}

impl LunIdentity {
    /// Nothing to compare with: the target reports neither page.
    pub fn is_unknown(&self) -> bool {
        self.serial.is_none() && self.designators.is_empty()
    }

    /// Whether `other` is certainly another logical unit: both known and
    /// different. An identity that could not be read decides nothing.
    pub fn differs_from(&self, other: &LunIdentity) -> bool {
        !self.is_unknown() && !other.is_unknown() && self != other
    }

    /// From the pages' data as the target sent them (either may be missing).
    pub fn from_pages(serial: Option<&[u8]>, identification: Option<&[u8]>) -> LunIdentity {
        let serial = serial
            .and_then(|b| vpd::UnitSerialNumber::parse(b).ok())
            .map(|s| s.serial)
            .filter(|s| !s.trim().is_empty());
        let mut designators: Vec<String> = identification
            .and_then(|b| vpd::DeviceIdentification::parse(b).ok())
            .map(|d| {
                d.designators
                    .iter()
                    .filter(|x| x.association == Association::LogicalUnit)
                    .filter(|x| {
                        matches!(
                            x.designator_type,
                            DesignatorType::T10VendorId
                                | DesignatorType::Eui64
                                | DesignatorType::Naa
                                | DesignatorType::ScsiNameString
                                | DesignatorType::Uuid
                        )
                    })
                    .map(|x| x.to_text())
                    .collect()
            })
            .unwrap_or_default();
        designators.sort();
        designators.dedup();
        LunIdentity {
            serial,
            designators,
        }
    }
}

impl std::fmt::Display for LunIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<&str> = self.designators.iter().map(String::as_str).collect();
        if let Some(s) = &self.serial {
            parts.push(s);
        }
        if parts.is_empty() {
            f.write_str("unknown")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// VPD 0x83 with one designator per (association, type, value).
    fn ident_page(designators: &[(u8, u8, &[u8])]) -> Vec<u8> {
        let mut body = Vec::new();
        for &(assoc, ty, value) in designators {
            let code_set = if ty == 3 { 1 } else { 2 };
            body.extend_from_slice(&[code_set, (assoc << 4) | ty, 0, value.len() as u8]);
            body.extend_from_slice(value);
        }
        let mut page = vec![0, 0x83, 0, body.len() as u8];
        page.extend(body);
        page
    }

    fn serial_page(serial: &str) -> Vec<u8> {
        let mut page = vec![0, 0x80, 0, serial.len() as u8];
        page.extend_from_slice(serial.as_bytes());
        page
    }

    #[test]
    fn lun_identity_is_the_logical_unit_s_designators_and_serial() {
        const NAA_A: &[u8] = &[0x60, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
        const NAA_B: &[u8] = &[0x60, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 16];
        let port = (1u8, 4u8, &[0u8, 0, 0, 1][..]); // relative target port: not the LU
        let a = LunIdentity::from_pages(
            Some(&serial_page("SN1")),
            Some(&ident_page(&[
                (0, 3, NAA_A),
                (0, 1, b"VENDOR  disk-a"),
                port,
            ])),
        );
        // The same LU seen through another port, descriptors in another order.
        let a_again = LunIdentity::from_pages(
            Some(&serial_page("SN1")),
            Some(&ident_page(&[
                (1, 4, &[0, 0, 0, 2]),
                (0, 1, b"VENDOR  disk-a"),
                (0, 3, NAA_A),
            ])),
        );
        let b = LunIdentity::from_pages(
            Some(&serial_page("SN1")),
            Some(&ident_page(&[(0, 3, NAA_B), (0, 1, b"VENDOR  disk-a")])),
        );
        let unknown = LunIdentity::from_pages(None, Some(&[0, 0x83, 0, 9]));

        assert_eq!(a.serial.as_deref(), Some("SN1"));
        assert_eq!(a.designators.len(), 2, "{a:?}");
        assert_eq!(a, a_again);
        assert!(!a.differs_from(&a_again));
        assert!(a.differs_from(&b) && b.differs_from(&a));
        assert!(unknown.is_unknown(), "{unknown:?}");
        assert!(!a.differs_from(&unknown) && !unknown.differs_from(&a));
        assert_eq!(unknown.to_string(), "unknown");
        assert!(a.to_string().contains("SN1"), "{a}");
    }
}
