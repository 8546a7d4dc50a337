//! Finding rlun's mounts in `/proc/self/mountinfo` (proc(5)): what `rlun
//! umount` and the readiness checks use to tell whether a path is one of
//! rlun's FUSE mounts.

/// One line of `/proc/self/mountinfo` (proc(5)), the fields rlun uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// `major:minor` of the filesystem (for FUSE, minor = connection number).
    pub major: u32,
    pub minor: u32,
    /// The mount point, with `\040`-style escapes decoded.
    pub mount_point: String,
    /// Filesystem type, e.g. `fuse.rlun`.
    pub fstype: String,
    /// Mount source, e.g. `rlun:iqn.2026-11.org.example:disk1`.
    pub source: String,
}

/// Decode the octal escapes (`\040` for space…) the kernel uses in mountinfo.
fn unescape_mount_field(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .map(|d| d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0')));
        match octal {
            Some(v) if v <= 0xff => {
                out.push(v as u8);
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse one mountinfo line: `id parent major:minor root mountpoint
/// options [optional fields...] - fstype source superoptions`.
pub fn parse_mountinfo_line(line: &str) -> Option<MountEntry> {
    let (left, right) = line.split_once(" - ")?;
    let l: Vec<&str> = left.split(' ').collect();
    let r: Vec<&str> = right.split(' ').collect();
    let (major, minor) = l.get(2)?.split_once(':')?;
    Some(MountEntry {
        major: major.parse().ok()?,
        minor: minor.parse().ok()?,
        mount_point: unescape_mount_field(l.get(4)?),
        fstype: (*r.first()?).to_string(),
        source: unescape_mount_field(r.get(1)?),
    })
}

/// The last (topmost) mount at `path` in mountinfo text.
pub fn find_mount(mountinfo: &str, path: &str) -> Option<MountEntry> {
    mountinfo
        .lines()
        .filter_map(parse_mountinfo_line)
        .rfind(|m| m.mount_point == path)
}

/// Whether a mount entry is one of rlun's FUSE mounts.
pub fn is_rlun_mount(m: &MountEntry) -> bool {
    m.fstype == "fuse.rlun" || (m.fstype.starts_with("fuse") && m.source.starts_with("rlun:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_parse_with_optional_fields_and_escapes() {
        let text = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
98 22 0:55 / /tmp/my\\040mnt rw,nosuid,nodev shared:5 master:1 - fuse.rlun rlun:iqn.2026-11.org.example:disk1 rw,user_id=0,group_id=0
";
        let m = find_mount(text, "/tmp/my mnt").expect("found");

        assert_eq!((m.major, m.minor), (0, 55));
        assert_eq!(m.fstype, "fuse.rlun");
        assert_eq!(m.source, "rlun:iqn.2026-11.org.example:disk1");
        assert!(is_rlun_mount(&m));
        assert!(!is_rlun_mount(&find_mount(text, "/proc").unwrap()));
        assert!(find_mount(text, "/nowhere").is_none());
        assert!(parse_mountinfo_line("garbage").is_none());
    }
}
