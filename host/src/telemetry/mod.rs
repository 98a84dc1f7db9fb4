//! OpenTelemetry: a trace per run and metrics of what runs do, sent over
//! OTLP/HTTP with protobuf (what collectors take by default; JSON or gRPC
//! would add their code to every process) when the standard variables say where (`OTEL_EXPORTER_OTLP_ENDPOINT`, or
//! the `_TRACES_`/`_METRICS_` ones; `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` as the specification says).
//!
//! Off, nothing is set up: no subscriber, no exporter, no thread. Spans are
//! `tracing` spans, which cost one relaxed load of their call site's interest
//! when no subscriber listens, and everything that would build an attribute or
//! record a metric first asks [`enabled`], one more load.
//!
//! On, [`init_from_env`] installs a `tracing` subscriber that hands loopbox's
//! spans (and only those) to the OpenTelemetry SDK, and a meter provider; the
//! [`Telemetry`] it returns flushes both when the process ends. A run's trace
//! id comes from its id, so every process that works on the run (the one that
//! started it, each resume, each hook event) writes into the same trace: the
//! first writes the run's root span, each writes a [`process_span`] under it.
//! What goes out: names, counts, durations, the rule that allowed a command,
//! its program's file name and exit code, models, tokens and cost. Never a
//! prompt, a reply, an argument or a variable's value.

mod genai;
mod http;
pub mod metrics;

pub use genai::{Invocation, TurnEnd, agent_span, finish_turn};

use std::cell::Cell;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer, TracerProvider,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether OpenTelemetry is set up in this process.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// The providers while telemetry is on; shut down (flushed) when dropped.
pub struct Telemetry {
    tracer: SdkTracerProvider,
    meter: opentelemetry_sdk::metrics::SdkMeterProvider,
}

/// The root spans this process started, ended when it shuts telemetry down.
static ROOTS: Mutex<Vec<opentelemetry::global::BoxedSpan>> = Mutex::new(Vec::new());

impl Drop for Telemetry {
    fn drop(&mut self) {
        use opentelemetry::trace::Span as _;
        for mut root in ROOTS.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            root.end();
        }
        let _ = self.tracer.shutdown();
        let _ = self.meter.shutdown();
        ENABLED.store(false, Ordering::Relaxed);
    }
}

/// How long one export may take: `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds),
/// else 2 s, shorter than the specification's 10 s since a hook waits for it.
fn timeout() -> Duration {
    std::env::var("OTEL_EXPORTER_OTLP_TIMEOUT")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::from_secs(2), Duration::from_millis)
}

fn set(var: &str) -> bool {
    std::env::var_os(var).is_some_and(|v| !v.is_empty())
}

/// The protocol the variables ask for: `http/protobuf` (the default); any
/// other is refused with what to set instead.
fn protocol(signal_var: &str) -> Result<Protocol, String> {
    let value = std::env::var(signal_var)
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL").ok())
        .unwrap_or_default();
    match value.trim().to_ascii_lowercase().as_str() {
        "" | "http/protobuf" => Ok(Protocol::HttpBinary),
        other => Err(format!(
            "OTEL_EXPORTER_OTLP_PROTOCOL = `{}`: loopbox sends OTLP over HTTP with protobuf only (what collectors take by default); set it to http/protobuf",
            crate::ui::shorten(other, 40)
        )),
    }
}

/// Set telemetry up when the `OTEL_EXPORTER_OTLP_*` variables name an
/// endpoint (and `OTEL_SDK_DISABLED` is not `true`); `Ok(None)` when they do
/// not. `Err` says which variable is wrong; the caller goes on without it.
pub fn init_from_env() -> Result<Option<Telemetry>, String> {
    if std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let traces = set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
    let metrics = set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT");
    if !traces && !metrics {
        return Ok(None);
    }
    let client = http::UreqClient::new(timeout());
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(
            std::env::var("OTEL_SERVICE_NAME")
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "loopbox".into()),
        )
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let mut tracer_provider = SdkTracerProvider::builder()
        .with_id_generator(RunIds)
        .with_resource(resource.clone());
    if traces {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client.clone())
            .with_protocol(protocol("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")?)
            .with_timeout(timeout())
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .build()
            .map_err(|e| format!("cannot set up the OTLP trace exporter: {e}"))?;
        tracer_provider = tracer_provider.with_batch_exporter(exporter);
    }
    let tracer_provider = tracer_provider.build();
    opentelemetry::global::set_tracer_provider(tracer_provider.clone());
    let mut meter_provider =
        opentelemetry_sdk::metrics::SdkMeterProvider::builder().with_resource(resource);
    if metrics {
        let exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(protocol("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")?)
            .with_timeout(timeout())
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .build()
            .map_err(|e| format!("cannot set up the OTLP metric exporter: {e}"))?;
        meter_provider = meter_provider.with_periodic_exporter(exporter);
    }
    let meter_provider = meter_provider.build();
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer_provider.tracer("loopbox"))
        .with_threads(false)
        .with_level(false)
        .with_target(false)
        .with_location(false)
        .with_tracked_inactivity(false);
    // Only loopbox's own spans: wasmtime and the HTTP stack have spans of their own.
    let filter =
        tracing_subscriber::filter::Targets::new().with_target("loopbox", tracing::Level::TRACE);
    let subscriber =
        tracing_subscriber::registry().with(tracing_subscriber::Layer::with_filter(layer, filter));
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|e| format!("cannot install the tracing subscriber: {e}"))?;
    metrics::install(&meter_provider);
    ENABLED.store(true, Ordering::Relaxed);
    Ok(Some(Telemetry {
        tracer: tracer_provider,
        meter: meter_provider,
    }))
}

/// The ids of run `id`'s trace and of its root span: the same in every process.
pub fn run_ids(id: &str) -> (TraceId, SpanId) {
    let h = blake3::hash(format!("loopbox-trace\0{id}").as_bytes());
    let b = h.as_bytes();
    let mut t = [0u8; 16];
    t.copy_from_slice(&b[..16]);
    let mut s = [0u8; 8];
    s.copy_from_slice(&b[16..24]);
    (TraceId::from_bytes(t), SpanId::from_bytes(s))
}

thread_local! {
    /// Ids the next span built on this thread takes (a run's root span).
    static NEXT_IDS: Cell<Option<(TraceId, SpanId)>> = const { Cell::new(None) };
}

/// Random ids, except for a run's root span, which takes the ids its run's id
/// gives (see [`run_ids`]) so that later processes can name it as their parent.
#[derive(Debug)]
struct RunIds;

impl IdGenerator for RunIds {
    fn new_trace_id(&self) -> TraceId {
        NEXT_IDS
            .with(Cell::get)
            .map_or_else(|| RandomIdGenerator::default().new_trace_id(), |(t, _)| t)
    }

    fn new_span_id(&self) -> SpanId {
        NEXT_IDS
            .with(Cell::get)
            .map_or_else(|| RandomIdGenerator::default().new_span_id(), |(_, s)| s)
    }
}

/// This process's span of run `id`, named `what` (`loopbox run`, `loopbox
/// hook Stop`), in the run's trace: under the run's root span, which the
/// process that starts the run (`first`) writes, named after the policy.
/// `Span::none()` when telemetry is off.
pub fn process_span(id: &str, policy: &str, first: bool, what: &str) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    let (trace_id, root_id) = run_ids(id);
    let policy = crate::ui::shorten(policy, 200);
    if first {
        let tracer = opentelemetry::global::tracer("loopbox");
        NEXT_IDS.with(|n| n.set(Some((trace_id, root_id))));
        let root = tracer
            .span_builder(format!("loopbox run {policy}"))
            .with_attributes([
                KeyValue::new("loopbox.run.id", id.to_string()),
                KeyValue::new("loopbox.policy", policy.clone()),
            ])
            .start_with_context(&tracer, &Context::new());
        NEXT_IDS.with(|n| n.set(None));
        ROOTS.lock().unwrap_or_else(|p| p.into_inner()).push(root);
    }
    let name = crate::ui::shorten(what, 80);
    let span = tracing::info_span!(
        target: "loopbox",
        "process",
        otel.name = %name,
        loopbox.run.id = %id,
        loopbox.policy = %policy,
    );
    let _ = span.set_parent(under_root(trace_id, root_id));
    span
}

/// A context whose parent is a run's root span (its ids from [`run_ids`]),
/// which another process may have written.
fn under_root(trace_id: TraceId, root_id: SpanId) -> Context {
    let parent = SpanContext::new(
        trace_id,
        root_id,
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    );
    Context::new().with_remote_span_context(parent)
}

/// A span for one connection through the egress proxy, under run `id`'s root
/// span: its destination, the decision and its rule, bytes each way, and its
/// time (`server.address`, `server.port` as the OpenTelemetry conventions
/// name them). Never a path, a header or a body. Nothing when telemetry is off.
pub fn connection(id: &str, c: &crate::db::network::Connection) {
    if !enabled() {
        return;
    }
    use opentelemetry::trace::{Span as _, Status, Tracer as _};
    let (trace_id, root_id) = run_ids(id);
    let tracer = opentelemetry::global::tracer("loopbox");
    let start = std::time::UNIX_EPOCH + Duration::from_millis(c.at_ms.max(0) as u64);
    let mut span = tracer
        .span_builder(format!("connect {}:{}", c.host, c.port))
        .with_kind(opentelemetry::trace::SpanKind::Client)
        .with_start_time(start)
        .with_attributes([
            KeyValue::new("loopbox.run.id", id.to_string()),
            KeyValue::new("loopbox.network.side", c.side.clone()),
            KeyValue::new("server.address", c.host.clone()),
            KeyValue::new("server.port", i64::from(c.port)),
            KeyValue::new(
                "network.peer.address",
                c.address.clone().unwrap_or_default(),
            ),
            KeyValue::new("loopbox.network.allowed", c.allowed),
            KeyValue::new("loopbox.rule", crate::ui::shorten(&c.rule, 200)),
            KeyValue::new("loopbox.network.bytes_out", c.bytes_out as i64),
            KeyValue::new("loopbox.network.bytes_in", c.bytes_in as i64),
        ])
        .start_with_context(&tracer, &under_root(trace_id, root_id));
    if !c.allowed {
        span.set_status(Status::error(crate::ui::shorten(&c.rule, 200)));
    }
    span.end_with_timestamp(start + Duration::from_millis(c.ms));
}

/// How run `id` ended in this process (`status`, as stored): on this
/// process's span of it, and on its root span when this process started the
/// run, `loopbox.run.status`, and an error status with the summary when it
/// failed (a span left unset reads as a success in most back ends).
pub fn note_run_end(span: &tracing::Span, id: &str, status: &str, failed: Option<&str>) {
    if !enabled() {
        return;
    }
    use opentelemetry::trace::{Span as _, Status};
    span.set_attribute("loopbox.run.status", status.to_string());
    let why = failed.map(|w| crate::ui::shorten(w, 200));
    if let Some(w) = &why {
        span.set_status(Status::error(w.clone()));
    }
    let (_, root_id) = run_ids(id);
    let mut roots = ROOTS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(root) = roots
        .iter_mut()
        .find(|r| r.span_context().span_id() == root_id)
    {
        root.set_attribute(KeyValue::new("loopbox.run.status", status.to_string()));
        if let Some(w) = why {
            root.set_status(Status::error(w));
        }
    }
}

/// An event's span, once it is committed: its number and the decision.
pub fn note_event(span: &tracing::Span, seq: i64, decision: &'static str) {
    span.set_attribute("loopbox.event.seq", seq);
    span.set_attribute("loopbox.decision", decision);
}

/// How a command ended, for its span: its exit code (none: killed by a
/// signal), whether it timed out, how long it took.
pub struct Ran {
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub took: Duration,
}

/// A command's span once it ran (`ran` none: it could not start), and its duration metric.
pub fn note_process(span: &tracing::Span, kind: &'static str, ran: Option<Ran>) {
    let outcome = match &ran {
        None => "not-started",
        Some(r) if r.timed_out => "timed-out",
        Some(r) if r.exit_code == Some(0) => "ok",
        Some(_) => "failed",
    };
    if let Some(r) = ran {
        if let Some(code) = r.exit_code {
            span.set_attribute("process.exit.code", i64::from(code));
        }
        metrics::action(r.took, kind, outcome);
    }
    span.set_attribute("loopbox.action.outcome", outcome);
}
