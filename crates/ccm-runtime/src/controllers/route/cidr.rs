//! CIDR blocks (`10.244.0.0/16`, `fd00:10:244::/48`) as the route controller needs them:
//! parsed strictly, compared by their network, and tested for containment. Written on
//! `std::net` alone; a CIDR is an address and a prefix length, and every question here is a
//! mask on a `u128`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A CIDR block: an IPv4 or IPv6 address and a prefix length.
///
/// Parsing accepts host bits (`10.0.0.1/8` is the block `10.0.0.0/8`, as Go's
/// `net.ParseCIDR` reads it) and keeps the address as written; [`network`](Self::network)
/// and [`Display`](fmt::Display) give the canonical form.
///
/// ```
/// use ccm_runtime::controllers::route::Cidr;
/// let cidr: Cidr = "10.244.0.0/16".parse().unwrap();
/// assert!(cidr.contains("10.244.3.7".parse().unwrap()));
/// assert!(!cidr.contains("10.245.0.1".parse().unwrap()));
/// assert_eq!(cidr.last().to_string(), "10.244.255.255");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix_len: u8,
}

/// Why a string is not a CIDR.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CidrError {
    /// There is no `/`.
    #[error("{0:?} is not a CIDR: no prefix length (\"/N\")")]
    NoPrefix(String),
    /// The part before `/` is not an IP address.
    #[error("{0:?} is not a CIDR: {1:?} is not an IP address")]
    BadAddress(String, String),
    /// The part after `/` is not a number of bits for that family.
    #[error("{0:?} is not a CIDR: bad prefix length {1:?} (0-{2} for this address family)")]
    BadPrefix(String, String, u8),
}

impl Cidr {
    /// Parses `a.b.c.d/n` or `x:y::z/n`. Surrounding whitespace is not accepted.
    pub fn parse(s: &str) -> Result<Self, CidrError> {
        let (addr, prefix) = s
            .split_once('/')
            .ok_or_else(|| CidrError::NoPrefix(s.to_owned()))?;
        let addr = IpAddr::from_str(addr)
            .map_err(|_| CidrError::BadAddress(s.to_owned(), addr.to_owned()))?;
        let width = width(addr);
        let bad_prefix = || CidrError::BadPrefix(s.to_owned(), prefix.to_owned(), width);
        // `u8::from_str` takes a leading `+`; a prefix length is digits only.
        if prefix.is_empty() || prefix.len() > 3 || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad_prefix());
        }
        let prefix_len: u8 = prefix.parse().map_err(|_| bad_prefix())?;
        if prefix_len > width {
            return Err(bad_prefix());
        }
        Ok(Self { addr, prefix_len })
    }

    /// The block of `addr` with `prefix_len` bits of network, or `None` when `prefix_len`
    /// is longer than the address family allows (32 for IPv4, 128 for IPv6).
    ///
    /// ```
    /// use ccm_runtime::controllers::route::Cidr;
    /// let cidr = Cidr::new("10.244.3.0".parse().unwrap(), 24).unwrap();
    /// assert_eq!(cidr.to_string(), "10.244.3.0/24");
    /// assert!(Cidr::new("10.0.0.0".parse().unwrap(), 33).is_none());
    /// ```
    pub fn new(addr: IpAddr, prefix_len: u8) -> Option<Self> {
        (prefix_len <= width(addr)).then_some(Self { addr, prefix_len })
    }

    /// The address as written (host bits included).
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    /// Whether this is an IPv4 block.
    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    /// The first address of the block (the address with the host bits cleared).
    pub fn network(&self) -> IpAddr {
        from_bits(self.addr, bits(self.addr) & self.mask())
    }

    /// The last address of the block (the address with the host bits set).
    pub fn last(&self) -> IpAddr {
        from_bits(
            self.addr,
            (bits(self.addr) & self.mask()) | (!self.mask() & full(width(self.addr))),
        )
    }

    /// Whether `ip` is inside the block. An address of the other family never is.
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.addr.is_ipv4()
            && bits(ip) & self.mask() == bits(self.addr) & self.mask()
    }

    /// Whether `other` overlaps this block at its first or last address — the test Go's
    /// route controller uses to decide that a route's destination is "inside" a cluster CIDR.
    pub fn contains_either_end_of(&self, other: &Cidr) -> bool {
        self.contains(other.network()) || self.contains(other.last())
    }

    fn mask(&self) -> u128 {
        let width = width(self.addr);
        if self.prefix_len == 0 {
            0
        } else {
            (full(width) >> (width - self.prefix_len)) << (width - self.prefix_len)
        }
    }
}

impl fmt::Display for Cidr {
    /// The canonical form: the network address and the prefix length.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network(), self.prefix_len)
    }
}

impl FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

fn width(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

fn full(width: u8) -> u128 {
    if width == 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    }
}

fn bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn from_bits(family: IpAddr, bits: u128) -> IpAddr {
    match family {
        // The bits come from an IPv4 address masked within 32 bits.
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(
            u32::try_from(bits & u128::from(u32::MAX)).unwrap_or_default(),
        )),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(bits)),
    }
}

/// The key two CIDR strings are matched by: the canonical form when `s` parses (so
/// `fd00:0:0::/64` and `fd00::/64` are one route), else `s` itself.
pub(crate) fn match_key(s: &str) -> String {
    Cidr::parse(s).map_or_else(|_| s.to_owned(), |c| c.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(s: &str) -> Cidr {
        s.parse().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_ipv4_and_ipv6() {
        let c = cidr("10.244.0.0/16");
        assert!(c.is_ipv4());
        assert_eq!(c.prefix_len(), 16);
        assert_eq!(c.addr(), ip("10.244.0.0"));
        let c = cidr("fd00:10:244::/48");
        assert!(!c.is_ipv4());
        assert_eq!(c.prefix_len(), 48);
        assert_eq!(cidr("0.0.0.0/0").prefix_len(), 0);
        assert_eq!(cidr("::/0").prefix_len(), 0);
        assert_eq!(cidr("10.0.0.1/32").prefix_len(), 32);
        assert_eq!(cidr("::1/128").prefix_len(), 128);
    }

    #[test]
    fn rejects_malformed_input() {
        for bad in [
            "",
            "10.0.0.0",
            "10.0.0.0/",
            "10.0.0.0/33",
            "10.0.0.0/+8",
            "10.0.0.0/-1",
            "10.0.0.0/8/8",
            "10.0.0/8",
            "10.0.0.256/8",
            " 10.0.0.0/8",
            "10.0.0.0/8 ",
            "fd00::/129",
            "fd00::/0128",
            "fd00:::/64",
            "example.com/24",
            "/24",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad:?} parsed");
        }
        assert_eq!(
            Cidr::parse("10.0.0.0/33").unwrap_err().to_string(),
            "\"10.0.0.0/33\" is not a CIDR: bad prefix length \"33\" (0-32 for this address family)"
        );
        assert!(matches!(
            Cidr::parse("10.1/8"),
            Err(CidrError::BadAddress(_, a)) if a == "10.1"
        ));
        assert!(matches!(
            Cidr::parse("10.0.0.0"),
            Err(CidrError::NoPrefix(_))
        ));
    }

    #[test]
    fn host_bits_are_masked_in_the_canonical_form() {
        let c = cidr("10.0.0.1/8");
        assert_eq!(c.network(), ip("10.0.0.0"));
        assert_eq!(c.to_string(), "10.0.0.0/8");
        assert_eq!(cidr("fd00:0:0:0::1/64").to_string(), "fd00::/64");
        assert_eq!(match_key("fd00:0000::/64"), "fd00::/64");
        assert_eq!(match_key("not a cidr"), "not a cidr");
    }

    #[test]
    fn first_and_last_addresses() {
        let c = cidr("10.244.3.0/24");
        assert_eq!(c.network(), ip("10.244.3.0"));
        assert_eq!(c.last(), ip("10.244.3.255"));
        assert_eq!(cidr("0.0.0.0/0").last(), ip("255.255.255.255"));
        assert_eq!(cidr("10.1.2.3/32").last(), ip("10.1.2.3"));
        let c = cidr("fd00:10:244:3::/64");
        assert_eq!(c.last(), ip("fd00:10:244:3:ffff:ffff:ffff:ffff"));
        assert_eq!(
            cidr("::/0").last(),
            ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
        );
        assert_eq!(cidr("fd00::1/128").last(), ip("fd00::1"));
    }

    #[test]
    fn ipv4_containment() {
        let c = cidr("10.244.0.0/16");
        assert!(c.contains(ip("10.244.0.0")));
        assert!(c.contains(ip("10.244.255.255")));
        assert!(!c.contains(ip("10.243.255.255")));
        assert!(!c.contains(ip("10.245.0.0")));
        assert!(cidr("0.0.0.0/0").contains(ip("203.0.113.9")));
        assert!(cidr("10.1.2.3/32").contains(ip("10.1.2.3")));
        assert!(!cidr("10.1.2.3/32").contains(ip("10.1.2.4")));
        // An odd prefix length splits an octet.
        let c = cidr("10.0.0.0/9");
        assert!(c.contains(ip("10.127.255.255")));
        assert!(!c.contains(ip("10.128.0.0")));
    }

    #[test]
    fn ipv6_containment() {
        let c = cidr("fd00:10:244::/48");
        assert!(c.contains(ip("fd00:10:244::")));
        assert!(c.contains(ip("fd00:10:244:ffff:ffff:ffff:ffff:ffff")));
        assert!(!c.contains(ip("fd00:10:245::")));
        assert!(!c.contains(ip("fd00:10:243:ffff::1")));
        assert!(cidr("::/0").contains(ip("2001:db8::1")));
        let c = cidr("2001:db8::/33");
        assert!(c.contains(ip("2001:db8:7fff::1")));
        assert!(!c.contains(ip("2001:db8:8000::")));
    }

    #[test]
    fn families_never_contain_each_other() {
        assert!(!cidr("0.0.0.0/0").contains(ip("::")));
        assert!(!cidr("::/0").contains(ip("10.0.0.1")));
        // IPv4-mapped IPv6 addresses are IPv6 addresses here.
        assert!(!cidr("10.0.0.0/8").contains(ip("::ffff:10.0.0.1")));
    }

    #[test]
    fn either_end_overlap() {
        let cluster = cidr("10.244.0.0/16");
        assert!(cluster.contains_either_end_of(&cidr("10.244.3.0/24")));
        // Wider than the cluster CIDR but starting inside: Go counts it.
        assert!(cluster.contains_either_end_of(&cidr("10.244.0.0/15")));
        // Ends inside.
        assert!(cidr("10.244.128.0/17").contains_either_end_of(&cidr("10.244.0.0/16")));
        assert!(!cluster.contains_either_end_of(&cidr("192.168.0.0/24")));
        assert!(!cluster.contains_either_end_of(&cidr("10.0.0.0/8")));
        let cluster6 = cidr("fd00:10:244::/48");
        assert!(cluster6.contains_either_end_of(&cidr("fd00:10:244:3::/64")));
        assert!(!cluster6.contains_either_end_of(&cidr("fd00:10:245::/64")));
        assert!(!cluster.contains_either_end_of(&cidr("fd00:10:244:3::/64")));
    }
}
