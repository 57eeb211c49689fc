//! The `process_*` metrics every Go component exports (Prometheus' Go client's process
//! collector): CPU seconds, resident and virtual memory, open and maximum file descriptors,
//! start time. Read from `/proc/self` at scrape time, as the Go collector reads them (with
//! its fixed 100 ticks a second); on a system without `/proc` nothing is exported.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

/// The kernel's `USER_HZ` on every architecture Kubernetes runs on; Go's `procfs` fixes it
/// the same way.
const TICKS_PER_SECOND: f64 = 100.0;

/// One reading of `/proc/self`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: f64,
    pub virtual_bytes: f64,
    pub open_fds: f64,
    pub max_fds: f64,
    pub start_time_seconds: f64,
}

impl ProcessStats {
    /// Reads `/proc/self`; `None` where there is none.
    pub(crate) fn read() -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
        let boot = std::fs::read_to_string("/proc/stat").ok()?;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count();
        Self::parse(&stat, &status, &limits, &boot, open_fds)
    }

    /// The stats from the text of `/proc/self/stat`, `/proc/self/status`,
    /// `/proc/self/limits`, `/proc/stat` and the number of entries of `/proc/self/fd`.
    pub(crate) fn parse(
        stat: &str,
        status: &str,
        limits: &str,
        boot: &str,
        open_fds: usize,
    ) -> Option<Self> {
        // The command name, in parentheses, may hold spaces: fields start after the last ')'.
        let fields: Vec<&str> = stat
            .get(stat.rfind(')')? + 1..)?
            .split_whitespace()
            .collect();
        // Fields counted from 1 in proc(5), the first here being field 3 (state).
        let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
        let (utime, stime, start_ticks) = (field(14)?, field(15)?, field(22)?);
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))?
                .split_whitespace()
                .next()?
                .parse::<f64>()
                .ok()
                .map(|v| v * 1024.0)
        };
        let max_fds = limits
            .lines()
            .find_map(|l| l.strip_prefix("Max open files"))?
            .split_whitespace()
            .next()
            .map(|soft| soft.parse::<f64>().unwrap_or(f64::INFINITY))?;
        let boot_time: f64 = boot
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()?;
        Some(Self {
            cpu_seconds: (utime + stime) / TICKS_PER_SECOND,
            resident_bytes: kib("VmRSS:")?,
            virtual_bytes: kib("VmSize:")?,
            open_fds: open_fds.saturating_sub(1) as f64, // the directory read itself
            max_fds,
            start_time_seconds: boot_time + start_ticks / TICKS_PER_SECOND,
        })
    }
}

/// The collector; see the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), fmt::Error> {
        let Some(stats) = ProcessStats::read() else {
            return Ok(());
        };
        let metrics = [
            (
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds.",
                MetricType::Counter,
                stats.cpu_seconds,
            ),
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                MetricType::Gauge,
                stats.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
                MetricType::Gauge,
                stats.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors.",
                MetricType::Gauge,
                stats.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors.",
                MetricType::Gauge,
                stats.max_fds,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds.",
                MetricType::Gauge,
                stats.start_time_seconds,
            ),
        ];
        for (name, help, kind, value) in metrics {
            let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
            match kind {
                MetricType::Counter => {
                    metric.encode_counter::<NoLabelSet, _, f64>(&value, None)?;
                }
                _ => metric.encode_gauge(&value)?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_are_read_as_go_reads_them() {
        let stat = "4242 (my (odd) ccm) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 \
                    9 0 12345 100000000 2000 18446744073709551615";
        let status = "Name:\tccm\nVmSize:\t  200000 kB\nVmRSS:\t   19000 kB\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1048576              1048576              files\n";
        let boot = "cpu  1 2 3\nbtime 1764633600\n";
        let s = ProcessStats::parse(stat, status, limits, boot, 12).unwrap();
        assert_eq!(s.cpu_seconds, 3.0, "(250 + 50) ticks");
        assert_eq!(s.resident_bytes, 19000.0 * 1024.0);
        assert_eq!(s.virtual_bytes, 200000.0 * 1024.0);
        assert_eq!(s.open_fds, 11.0);
        assert_eq!(s.max_fds, 1048576.0);
        assert_eq!(s.start_time_seconds, 1764633600.0 + 123.45);
        let unlimited = limits.replace("1048576              1048576", "unlimited unlimited");
        let s = ProcessStats::parse(stat, status, &unlimited, boot, 12).unwrap();
        assert_eq!(s.max_fds, f64::INFINITY);
        assert_eq!(
            ProcessStats::parse("garbage", status, limits, boot, 1),
            None
        );
    }

    #[test]
    fn this_process_reads() {
        let s = ProcessStats::read().expect("/proc on Linux");
        assert!(
            s.resident_bytes > 0.0 && s.virtual_bytes >= s.resident_bytes,
            "{s:?}"
        );
        assert!(s.open_fds >= 3.0 && s.max_fds >= s.open_fds, "{s:?}");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(s.start_time_seconds <= now + 1.0 && s.start_time_seconds > now - 86400.0 * 365.0);
    }
}
