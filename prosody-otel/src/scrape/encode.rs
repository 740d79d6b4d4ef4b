//! OpenTelemetry metrics as Prometheus text (exposition format 0.0.4),
//! after OpenTelemetry's Prometheus compatibility rules:
//!
//! - names: every character outside `[a-zA-Z0-9_:]` becomes `_`, runs of
//!   `_` become one, and a leading digit gets a `_` before it
//!   (`prosody.handler.duration` → `prosody_handler_duration`);
//! - the unit as a suffix, unless the name already ends with it: `s` →
//!   `_seconds`, `ms` → `_milliseconds`, `By` → `_bytes`, `By/s` →
//!   `_bytes_per_second`, `1` → `_ratio` (gauges only); annotations in
//!   braces (`{record}`) are dropped, and an unknown unit is appended with
//!   its non-alphanumeric characters dropped;
//! - types: a monotonic sum is a `counter` named with `_total`; a
//!   non-monotonic sum and a gauge are a `gauge`; a histogram (explicit
//!   buckets) is a `histogram` with cumulative `_bucket{le="..."}` series
//!   up to `le="+Inf"`, then `_sum` and `_count`;
//! - labels: the point's attributes, their names sanitized like metric
//!   names but without `:` (a leading digit gets `key_` before it), the
//!   values of attributes whose names collide after that joined with `;`
//!   in the order of their original names; then `otel_scope_name` and
//!   `otel_scope_version`, so one name from two scopes is one family with
//!   distinct series (an attribute of one of these names, or `le` on a
//!   histogram, is dropped);
//! - the resource's attributes as the labels of `target_info 1`.
//!
//! The output is sorted (families by name, series by labels), so two
//! scrapes diff cleanly. What cannot be written is left out with a debug
//! log: exponential histograms (the library records none, and format 0.0.4
//! has no way to write them), delta temporality (the scrape reader is
//! cumulative), a metric whose family already has another type, a series
//! already written.

use super::names::{collapse, sanitize, unit_suffix};
use super::text::{escape_help, escape_label_value, float, text};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::metrics::data::{
    AggregatedMetrics, Histogram, Metric, MetricData, ResourceMetrics, ScopeMetrics, Sum,
};
use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::fmt::Write as _;
use tracing::debug;

/// The family of the resource's attributes.
const TARGET_INFO: &str = "target_info";

/// The metrics as Prometheus text, format 0.0.4.
#[must_use]
pub fn encode(metrics: &ResourceMetrics) -> String {
    let mut families = Families::default();
    families.resource(metrics.resource());
    // Sorted before they are added, so which of two conflicting metrics
    // wins does not depend on the order the SDK reports them in.
    let mut entries: Vec<(String, Kind, &ScopeMetrics, &Metric)> = metrics
        .scope_metrics()
        .flat_map(|scope| {
            scope.metrics().filter_map(move |metric| {
                let kind = kind(metric)?;
                Some((family_name(metric, kind), kind, scope, metric))
            })
        })
        .collect();
    entries.sort_by(|(a, _, a_scope, a_metric), (b, _, b_scope, b_metric)| {
        a.cmp(b)
            .then_with(|| identity(a_scope, a_metric).cmp(&identity(b_scope, b_metric)))
    });
    for (name, kind, scope, metric) in entries {
        families.metric(name, kind, scope, metric);
    }
    families.write()
}

/// What tells two metrics of one family apart, in the order they are
/// added.
fn identity<'a>(
    scope: &'a ScopeMetrics,
    metric: &'a Metric,
) -> (&'a str, Option<&'a str>, &'a str, &'a str, &'a str) {
    (
        scope.scope().name(),
        scope.scope().version(),
        metric.name(),
        metric.unit(),
        metric.description(),
    )
}

/// The Prometheus type of a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Counter => "counter",
            Self::Gauge => "gauge",
            Self::Histogram => "histogram",
        }
    }
}

/// A sample's value as recorded, so integers stay exact.
#[derive(Clone, Copy, Debug)]
enum Number {
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A number the three value types convert to.
trait Recorded: Copy {
    fn number(self) -> Number;
}

impl Recorded for u64 {
    fn number(self) -> Number {
        Number::U64(self)
    }
}

impl Recorded for i64 {
    fn number(self) -> Number {
        Number::I64(self)
    }
}

impl Recorded for f64 {
    fn number(self) -> Number {
        Number::F64(self)
    }
}

/// One series' samples.
#[derive(Debug)]
enum Sample {
    Value(Number),
    Histogram {
        /// Upper bounds (finite) with the cumulative count at each.
        buckets: Vec<(f64, u64)>,
        /// The cumulative count of all buckets: the `+Inf` bucket.
        total: u64,
        sum: Number,
        count: u64,
    },
}

/// Label names and values, sorted by name, names unique.
type Labels = Vec<(String, String)>;

#[derive(Debug)]
struct Family {
    kind: Kind,
    help: String,
    series: BTreeMap<Labels, Sample>,
}

#[derive(Debug, Default)]
struct Families(BTreeMap<String, Family>);

impl Families {
    fn resource(&mut self, resource: &Resource) {
        if resource.is_empty() {
            return;
        }
        let labels = labels(resource.iter().map(|(key, value)| (key.as_str(), value)));
        let mut series = BTreeMap::new();
        series.insert(labels, Sample::Value(Number::U64(1)));
        self.0.insert(
            TARGET_INFO.to_owned(),
            Family {
                kind: Kind::Gauge,
                help: "Target metadata".to_owned(),
                series,
            },
        );
    }

    fn metric(&mut self, name: String, kind: Kind, scope: &ScopeMetrics, metric: &Metric) {
        if name == TARGET_INFO {
            debug!(
                metric = metric.name(),
                "scrape: the name target_info is the resource's; metric left out"
            );
            return;
        }
        let family = match self.0.entry(name) {
            Entry::Vacant(vacant) => vacant.insert(Family {
                kind,
                help: metric.description().to_owned(),
                series: BTreeMap::new(),
            }),
            Entry::Occupied(occupied) => {
                let family = occupied.into_mut();
                if family.kind != kind {
                    debug!(
                        metric = metric.name(),
                        scope = scope.scope().name(),
                        "scrape: its family has another type; metric left out"
                    );
                    return;
                }
                if family.help.is_empty() {
                    metric.description().clone_into(&mut family.help);
                }
                family
            }
        };
        let scope_labels = [
            ("otel_scope_name", scope.scope().name()),
            ("otel_scope_version", scope.scope().version().unwrap_or("")),
        ];
        let mut add = |attributes: &mut dyn Iterator<Item = &KeyValue>, sample: Sample| {
            let mut labels = labels(attributes.map(|kv| (kv.key.as_str(), &kv.value)));
            if kind == Kind::Histogram {
                // `le` is the bucket's.
                labels.retain(|(name, _)| name != "le");
            }
            for (name, value) in scope_labels {
                // The scope's labels win over attributes of their names.
                labels.retain(|(existing, _)| existing != name);
                labels.push((name.to_owned(), value.to_owned()));
            }
            labels.sort();
            match family.series.entry(labels) {
                Entry::Vacant(vacant) => {
                    vacant.insert(sample);
                }
                Entry::Occupied(_) => debug!(
                    metric = metric.name(),
                    "scrape: a series of these labels is already written; left out"
                ),
            }
        };
        match metric.data() {
            AggregatedMetrics::U64(data) => points(data, &mut add),
            AggregatedMetrics::I64(data) => points(data, &mut add),
            AggregatedMetrics::F64(data) => points(data, &mut add),
        }
    }

    fn write(self) -> String {
        let mut out = String::new();
        for (name, family) in self.0 {
            if family.series.is_empty() {
                continue;
            }
            if !family.help.is_empty() {
                let _ = writeln!(out, "# HELP {name} {}", escape_help(&family.help));
            }
            let _ = writeln!(out, "# TYPE {name} {}", family.kind.as_str());
            for (labels, sample) in family.series {
                match sample {
                    Sample::Value(value) => line(&mut out, &name, "", &labels, None, value),
                    Sample::Histogram {
                        buckets,
                        total,
                        sum,
                        count,
                    } => {
                        for (bound, cumulative) in buckets {
                            let le = float(bound);
                            let value = Number::U64(cumulative);
                            line(&mut out, &name, "_bucket", &labels, Some(&le), value);
                        }
                        let value = Number::U64(total);
                        line(&mut out, &name, "_bucket", &labels, Some("+Inf"), value);
                        line(&mut out, &name, "_sum", &labels, None, sum);
                        line(&mut out, &name, "_count", &labels, None, Number::U64(count));
                    }
                }
            }
        }
        out
    }
}

/// The metric's Prometheus type; `None` (logged) for what is left out.
fn kind(metric: &Metric) -> Option<Kind> {
    fn of<T>(metric: &Metric, data: &MetricData<T>) -> Option<Kind> {
        match data {
            MetricData::Sum(sum) if sum.temporality() != Temporality::Cumulative => {
                debug!(metric = metric.name(), "scrape: a delta sum; left out");
                None
            }
            MetricData::Sum(sum) if sum.is_monotonic() => Some(Kind::Counter),
            MetricData::Gauge(_) | MetricData::Sum(_) => Some(Kind::Gauge),
            MetricData::Histogram(histogram)
                if histogram.temporality() != Temporality::Cumulative =>
            {
                debug!(
                    metric = metric.name(),
                    "scrape: a delta histogram; left out"
                );
                None
            }
            MetricData::Histogram(_) => Some(Kind::Histogram),
            // The library makes none, and format 0.0.4 cannot write them.
            MetricData::ExponentialHistogram(_) => {
                debug!(
                    metric = metric.name(),
                    "scrape: an exponential histogram; left out"
                );
                None
            }
        }
    }
    match metric.data() {
        AggregatedMetrics::U64(data) => of(metric, data),
        AggregatedMetrics::I64(data) => of(metric, data),
        AggregatedMetrics::F64(data) => of(metric, data),
    }
}

/// Hands each point of `data` to `add` with its attributes.
fn points<T: Recorded>(
    data: &MetricData<T>,
    add: &mut dyn FnMut(&mut dyn Iterator<Item = &KeyValue>, Sample),
) {
    match data {
        MetricData::Gauge(gauge) => {
            for point in gauge.data_points() {
                add(
                    &mut point.attributes(),
                    Sample::Value(point.value().number()),
                );
            }
        }
        MetricData::Sum(sum) => sum_points(sum, add),
        MetricData::Histogram(histogram) => histogram_points(histogram, add),
        MetricData::ExponentialHistogram(_) => {}
    }
}

fn sum_points<T: Recorded>(
    sum: &Sum<T>,
    add: &mut dyn FnMut(&mut dyn Iterator<Item = &KeyValue>, Sample),
) {
    for point in sum.data_points() {
        add(
            &mut point.attributes(),
            Sample::Value(point.value().number()),
        );
    }
}

fn histogram_points<T: Recorded>(
    histogram: &Histogram<T>,
    add: &mut dyn FnMut(&mut dyn Iterator<Item = &KeyValue>, Sample),
) {
    for point in histogram.data_points() {
        let mut cumulative = 0u64;
        let mut buckets = Vec::new();
        let mut counts = point.bucket_counts();
        for bound in point.bounds() {
            cumulative = cumulative.saturating_add(counts.next().unwrap_or(0));
            // An infinite bound is the `+Inf` bucket, written last.
            if bound.is_finite() {
                buckets.push((bound, cumulative));
            }
        }
        // The overflow bucket, above the last bound.
        let total = counts.fold(cumulative, u64::saturating_add);
        let sample = Sample::Histogram {
            buckets,
            total,
            sum: point.sum().number(),
            count: point.count(),
        };
        add(&mut point.attributes(), sample);
    }
}

/// The family name of a metric of `kind`: sanitized, with its unit and
/// type suffixes.
fn family_name(metric: &Metric, kind: Kind) -> String {
    let gauge = matches!(
        metric.data(),
        AggregatedMetrics::U64(MetricData::Gauge(_))
            | AggregatedMetrics::I64(MetricData::Gauge(_))
            | AggregatedMetrics::F64(MetricData::Gauge(_))
    );
    let mut name = sanitize(metric.name(), true);
    if kind == Kind::Counter
        && name.len() > "_total".len()
        && let Some(stripped) = name.strip_suffix("_total")
    {
        name.truncate(stripped.len());
    }
    if let Some(unit) = unit_suffix(metric.unit(), gauge)
        && !name.ends_with(&format!("_{unit}"))
        && name != unit
    {
        name.push('_');
        name.push_str(&unit);
    }
    if kind == Kind::Counter {
        name.push_str("_total");
    }
    collapse(&name)
}

/// Attributes as labels: names sanitized, the values of names that
/// collide joined with `;` in the order of their original names.
fn labels<'a>(attributes: impl Iterator<Item = (&'a str, &'a Value)>) -> Labels {
    let mut by_name: BTreeMap<String, Vec<(&str, String)>> = BTreeMap::new();
    for (key, value) in attributes {
        by_name
            .entry(sanitize(key, false))
            .or_default()
            .push((key, text(value)));
    }
    by_name
        .into_iter()
        .map(|(name, mut values)| {
            values.sort();
            let joined = values
                .into_iter()
                .map(|(_, value)| value)
                .collect::<Vec<_>>()
                .join(";");
            (name, joined)
        })
        .collect()
}

/// One sample line.
fn line(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &Labels,
    le: Option<&str>,
    value: Number,
) {
    out.push_str(name);
    out.push_str(suffix);
    let extra = le.map(|le| ("le", le));
    let mut all = labels
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .chain(extra)
        .peekable();
    if all.peek().is_some() {
        out.push('{');
        for (i, (name, value)) in all.enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(name);
            out.push_str("=\"");
            escape_label_value(out, value);
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    match value {
        Number::U64(v) => {
            let _ = write!(out, "{v}");
        }
        Number::I64(v) => {
            let _ = write!(out, "{v}");
        }
        Number::F64(v) => out.push_str(&float(v)),
    }
    out.push('\n');
}
