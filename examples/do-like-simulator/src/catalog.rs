//! What the simulator knows of DigitalOcean's catalogue, to fill its answers the way the
//! real API does: a few regions (slug, name, features) and droplet sizes (memory, vCPUs,
//! disk, prices), each VPC's ID and addresses, and RFC 3339 timestamps. The figures follow
//! DigitalOcean's published catalogue in shape; prices are illustrative.

use ccm_do_like_cloud::api::{Region, Size};

/// The regions the simulator serves: `(slug, name)`.
pub const REGIONS: [(&str, &str); 10] = [
    ("ams3", "Amsterdam 3"),
    ("blr1", "Bangalore 1"),
    ("fra1", "Frankfurt 1"),
    ("lon1", "London 1"),
    ("nyc1", "New York 1"),
    ("nyc3", "New York 3"),
    ("sfo3", "San Francisco 3"),
    ("sgp1", "Singapore 1"),
    ("syd1", "Sydney 1"),
    ("tor1", "Toronto 1"),
];

/// The droplet sizes: `(slug, memory MiB, vCPUs, disk GiB, transfer TiB, $/month)`.
const SIZES: [(&str, u64, u32, u64, f64, f64); 6] = [
    ("s-1vcpu-1gb", 1024, 1, 25, 1.0, 6.0),
    ("s-1vcpu-2gb", 2048, 1, 50, 2.0, 12.0),
    ("s-2vcpu-2gb", 2048, 2, 60, 3.0, 18.0),
    ("s-2vcpu-4gb", 4096, 2, 80, 4.0, 24.0),
    ("s-4vcpu-8gb", 8192, 4, 160, 5.0, 48.0),
    ("s-8vcpu-16gb", 16384, 8, 320, 6.0, 96.0),
];

/// The region `slug`, as answers embed it; `None` when the simulator does not serve it.
pub fn region(slug: &str) -> Option<Region> {
    let (slug, name) = REGIONS.iter().find(|(s, _)| *s == slug)?;
    Some(Region {
        slug: (*slug).to_owned(),
        name: (*name).to_owned(),
        sizes: SIZES.iter().map(|s| s.0.to_owned()).collect(),
        available: true,
        features: [
            "backups",
            "ipv6",
            "metadata",
            "install_agent",
            "storage",
            "image_transfer",
        ]
        .iter()
        .map(|f| (*f).to_owned())
        .collect(),
    })
}

/// The size `slug`; `None` when the simulator does not know it.
pub fn size(slug: &str) -> Option<Size> {
    let &(slug, memory, vcpus, disk, transfer, monthly) = SIZES.iter().find(|s| s.0 == slug)?;
    Some(Size {
        slug: slug.to_owned(),
        memory,
        vcpus,
        disk,
        transfer,
        price_monthly: monthly,
        // DigitalOcean bills 672 hours a month.
        price_hourly: (monthly / 672.0 * 100_000.0).round() / 100_000.0,
        regions: REGIONS.iter().map(|r| r.0.to_owned()).collect(),
        available: true,
        description: "Basic".into(),
    })
}

/// The simulator's one account, in the shape of DigitalOcean's `GET /v2/account`: active,
/// with DigitalOcean's default limits, on a team.
pub fn account() -> serde_json::Value {
    serde_json::json!({
        "droplet_limit": 25,
        "floating_ip_limit": 3,
        "reserved_ip_limit": 3,
        "volume_limit": 100,
        "email": "sammy@do-like.example.com",
        "name": "Sammy the Shark",
        "uuid": "b6fc48dbf6d9906cace5f3c78dc9851e757381ef",
        "email_verified": true,
        "status": "active",
        "status_message": "",
        "team": {"uuid": "5df3e3004a17e242b7c20ca6c9fc25b701a47ece", "name": "Simulated team"},
    })
}

/// The slugs of the known sizes.
pub fn size_slugs() -> impl Iterator<Item = &'static str> {
    SIZES.iter().map(|s| s.0)
}

/// The ID of region `slug`'s default VPC: stable, UUID-shaped.
pub fn vpc_uuid(slug: &str) -> String {
    let n = REGIONS
        .iter()
        .position(|r| r.0 == slug)
        .map_or(0xff, |i| i as u64 + 1);
    format!("5a4981aa-9653-4bd1-bef5-d6bff52042{n:02x}")
}

/// `unix_ms` as RFC 3339 in UTC, to the second (`2026-11-30T20:43:50Z`).
pub fn rfc3339(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // H. Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(784_111_777_000), "1994-11-06T08:49:37Z");
        assert_eq!(rfc3339(1_835_438_400_999), "2028-02-29T12:00:00Z");
    }

    #[test]
    fn the_catalogue_is_consistent() {
        for (slug, _) in REGIONS {
            let r = region(slug).unwrap();
            for s in &r.sizes {
                assert!(size(s).unwrap().regions.contains(&r.slug));
            }
        }
        assert!(region("xyz1").is_none());
        assert_eq!(size("s-2vcpu-4gb").unwrap().price_hourly, 0.03571);
        assert_ne!(vpc_uuid("nyc1"), vpc_uuid("ams3"));
    }
}
