//! Prometheus names of OpenTelemetry names and units (the rules are listed
//! in [`mod@super::encode`]).

/// The suffix a unit adds to a name; `None` for no suffix.
pub(super) fn unit_suffix(unit: &str, gauge: bool) -> Option<String> {
    // Annotations (`{record}`) are dropped.
    let mut plain = String::new();
    let mut depth = 0usize;
    for c in unit.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            c if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    let plain = plain.trim();
    if plain == "1" {
        return gauge.then(|| "ratio".to_owned());
    }
    let (main, per) = match plain.split_once('/') {
        Some((main, per)) => (main.trim(), per.trim()),
        None => (plain, ""),
    };
    let main = unit_word(main, false);
    let per = unit_word(per, true);
    match (main.is_empty(), per.is_empty()) {
        (true, true) => None,
        (false, true) => Some(main),
        (true, false) => Some(format!("per_{per}")),
        (false, false) => Some(format!("{main}_per_{per}")),
    }
}

/// A unit's word: a known UCUM unit's name (singular after `per`), else
/// its alphanumeric characters.
fn unit_word(unit: &str, per: bool) -> String {
    const KNOWN: &[(&str, &str, &str)] = &[
        ("d", "days", "day"),
        ("h", "hours", "hour"),
        ("min", "minutes", "minute"),
        ("s", "seconds", "second"),
        ("ms", "milliseconds", "millisecond"),
        ("us", "microseconds", "microsecond"),
        ("ns", "nanoseconds", "nanosecond"),
        ("w", "weeks", "week"),
        ("mo", "months", "month"),
        ("y", "years", "year"),
        ("By", "bytes", "byte"),
        ("KiBy", "kibibytes", "kibibyte"),
        ("MiBy", "mebibytes", "mebibyte"),
        ("GiBy", "gibibytes", "gibibyte"),
        ("TiBy", "tebibytes", "tebibyte"),
        ("KBy", "kilobytes", "kilobyte"),
        ("MBy", "megabytes", "megabyte"),
        ("GBy", "gigabytes", "gigabyte"),
        ("TBy", "terabytes", "terabyte"),
        ("m", "meters", "meter"),
        ("V", "volts", "volt"),
        ("A", "amperes", "ampere"),
        ("J", "joules", "joule"),
        ("W", "watts", "watt"),
        ("g", "grams", "gram"),
        ("Cel", "celsius", "celsius"),
        ("Hz", "hertz", "hertz"),
        ("%", "percent", "percent"),
    ];
    match KNOWN.iter().find(|(ucum, _, _)| *ucum == unit) {
        Some((_, plural, singular)) => if per { singular } else { plural }.to_string(),
        None => unit.chars().filter(char::is_ascii_alphanumeric).collect(),
    }
}

/// A metric name (`metric`) or label name: characters outside
/// `[a-zA-Z0-9_]` (and `:` in a metric name) become `_`, runs of `_`
/// become one; a leading digit gets `_` (metric) or `key_` (label) before
/// it. So no label name starts with `__`, which Prometheus reserves.
pub(super) fn sanitize(name: &str, metric: bool) -> String {
    let replaced: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || (metric && c == ':') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut out = collapse(&replaced);
    if out.is_empty() {
        out.push('_');
    } else if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, if metric { "_" } else { "key_" });
    }
    out
}

/// Runs of `_` as one.
pub(super) fn collapse(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    out
}
