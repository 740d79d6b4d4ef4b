//! The text of a sample: values and label values as the format writes
//! them, escaped so that a parser reads back exactly what was recorded.

use opentelemetry::{Array, StringValue, Value};

/// An attribute's value as a label value; an array of strings as JSON.
pub(super) fn text(value: &Value) -> String {
    match value {
        Value::Array(Array::String(values)) => {
            let values: Vec<&str> = values.iter().map(StringValue::as_str).collect();
            serde_json::to_string(&values).unwrap_or_else(|_| value.to_string())
        }
        other => other.as_str().into_owned(),
    }
}

/// A float as the format's parser reads it back exactly: `+Inf`, `-Inf`,
/// `NaN`, else the shortest decimal that round-trips (with an exponent
/// when very large or small).
pub(super) fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".to_owned()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else if v != 0.0 && !(1e-7..1e21).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// A label value with `\`, `"` and line feeds escaped.
pub(super) fn escape_label_value(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Help text with `\` and line feeds escaped.
pub(super) fn escape_help(help: &str) -> String {
    help.replace('\\', "\\\\").replace('\n', "\\n")
}
