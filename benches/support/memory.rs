//! The process's memory and CPU time as Linux reports them, for the
//! benches.

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

/// CPU seconds (user and system) this process has used so far.
#[allow(dead_code, reason = "not every bench reads CPU time")]
pub fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the
    // 12th and 13th of them, in clock ticks of 1/100 s.
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: f64 = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|field| field.parse::<f64>().ok())
        .sum();
    ticks / 100.0
}

/// The CPU a case used from its first record to its last, printed under
/// its rate: the cores busy meanwhile and the CPU time per record (what
/// the rate costs, whatever the machine's spare cores).
#[allow(dead_code, reason = "not every bench reads CPU time")]
pub fn cpu_line(cpu: f64, wall: f64, records: usize) -> String {
    format!(
        "CPU busy {:.2} cores, {:.2} us per record",
        cpu / wall,
        cpu * 1e6 / records as f64
    )
}
