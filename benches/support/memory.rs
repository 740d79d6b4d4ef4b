//! The process's memory as Linux reports it, for the benches.

/// A `/proc/self/status` figure (such as `VmRSS` or `VmHWM`), in MiB; NaN
/// where it cannot be read.
pub fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<f64>()
                .ok()
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

/// Sets the peak (`VmHWM`) back to the resident set now, so the next
/// reading is the peak of what ran since (Linux's `clear_refs` 5).
#[allow(dead_code, reason = "not every bench reads per-case peaks")]
pub fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}
