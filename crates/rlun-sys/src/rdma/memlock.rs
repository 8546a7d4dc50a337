//! `RLIMIT_MEMLOCK`, the limit on pinned memory that every RDMA memory
//! registration counts against: read it (to say which limit to raise when a
//! registration fails, [`super::RdmaError::Register`]) and raise the soft
//! limit to the hard one.

use std::fmt;
use std::io;

/// One value of a resource limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    Bytes(u64),
    Unlimited,
}

impl Limit {
    fn from_raw(v: libc::rlim_t) -> Limit {
        if v == libc::RLIM_INFINITY {
            Limit::Unlimited
        } else {
            Limit::Bytes(v)
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Bytes(n) => write!(f, "{n} bytes"),
            Limit::Unlimited => f.write_str("unlimited"),
        }
    }
}

/// The soft and hard limits of a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub soft: Limit,
    pub hard: Limit,
}

fn get_memlock() -> io::Result<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `struct rlimit` into the valid, exclusive
    // reference we pass and keeps no pointer to it.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(lim)
}

/// The process's `RLIMIT_MEMLOCK`.
pub fn limits() -> io::Result<Limits> {
    let lim = get_memlock()?;
    Ok(Limits {
        soft: Limit::from_raw(lim.rlim_cur),
        hard: Limit::from_raw(lim.rlim_max),
    })
}

/// Raise the soft `RLIMIT_MEMLOCK` to the hard limit. Returns the limits
/// before and after when it raised them, `None` when the soft limit was
/// the hard one already.
pub fn raise_to_hard() -> io::Result<Option<(Limit, Limit)>> {
    let mut lim = get_memlock()?;
    // RLIM_INFINITY is the largest value, so this also covers "unlimited".
    if lim.rlim_cur >= lim.rlim_max {
        return Ok(None);
    }
    let old = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    // SAFETY: setrlimit reads one `struct rlimit` from the valid reference
    // we pass and keeps no pointer to it.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Some((Limit::from_raw(old), Limit::from_raw(lim.rlim_max))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memlock_soft_limit_is_at_most_the_hard_limit() {
        let l = limits().unwrap();
        match (l.soft, l.hard) {
            (Limit::Bytes(s), Limit::Bytes(h)) => assert!(s <= h),
            (Limit::Unlimited, h) => assert_eq!(h, Limit::Unlimited),
            (Limit::Bytes(_), Limit::Unlimited) => {}
        }
    }

    #[test]
    fn raising_memlock_leaves_the_soft_limit_at_the_hard_limit() {
        raise_to_hard().unwrap();
        let l = limits().unwrap();
        assert_eq!(l.soft, l.hard);
        assert_eq!(raise_to_hard().unwrap(), None, "nothing left to raise");
    }

    #[test]
    fn limits_display_as_the_memlock_message_says_them() {
        assert_eq!(Limit::Bytes(65536).to_string(), "65536 bytes");
        assert_eq!(Limit::Unlimited.to_string(), "unlimited");
    }
}
