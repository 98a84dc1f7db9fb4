//! Per-event decision latency of the Ralph loop, the same logic every way a
//! user might run it today, side by side in one process:
//!
//! - a plain Rust function (the floor: no isolation at all);
//! - loopbox with the Rust, Python and JavaScript components, a fresh instance
//!   per event (state read through the `state` capability from the store);
//! - a Lua handler through mlua (the Crucible approach), with a fresh Lua state
//!   per event (the same isolation) and with one reused state;
//! - an Extism plugin (the `extism` crate as host, the logic built with its Rust
//!   PDK), created fresh per event from a compiled plugin and reused.
//!
//! `cargo bench -p loopbox-bench --bench decisions` prints one table; samples of
//! every row are interleaved so machine noise hits each alike.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use loopbox::bindings::{Event, Turn};
use loopbox::config::Config;
use loopbox::db::Db;
use loopbox::journal::Journal;
use loopbox::limits::meter::Meter;
use loopbox::run::RunContext;
use loopbox::ui::Ui;
use loopbox::wasm::policy::{Call, Policy, PolicySource};
use loopbox::wasm::runtime::Runtime;
use loopbox_bench::{Variant, full_run, interleave_blocks, only, rounds, table};
use mlua::{Function, Lua, LuaOptions, StdLib, Table};

const RESPONSE: &str =
    "I changed the parser and reran the tests; two still fail. <promise>NOT YET</promise>";
const INPUT: &str = r#"{"prompt": "fix the parser", "completion_promise": "DONE"}"#;
const PROGRESS: &str = r#"{"config":{"prompt":"fix the parser","completion_promise":"DONE","max_iterations":0},"iteration":1}"#;

/// The floor: Ralph's logic with its progress as JSON, as every guest keeps it.
fn plain(progress: &str) -> ralph::Next {
    let progress = serde_json::from_str(progress).unwrap();
    let (progress, next) = ralph::decide(
        Some(progress),
        ralph::Input::Turn {
            response: black_box(RESPONSE),
        },
    )
    .unwrap();
    black_box(serde_json::to_string(&progress.unwrap()).unwrap());
    next
}

/// A policy in loopbox's runtime, with a run whose `start` is committed.
struct Loopbox {
    tokio: tokio::runtime::Runtime,
    policy: Policy,
    ctx: RunContext,
}

impl Loopbox {
    fn new(runtime: &Runtime, source: PolicySource, id: &str) -> Loopbox {
        let policy = runtime
            .load(&source)
            .unwrap_or_else(|e| panic!("load {source}: {e:#}"));
        let db = Db::open(Path::new(":memory:")).unwrap();
        db.create_run(id, &source.to_string(), &policy.digest, "{}")
            .unwrap();
        let ctx = RunContext::new(
            id.into(),
            Arc::new(Config::default()),
            db,
            &std::env::temp_dir(),
            Ui::quiet(),
        )
        .unwrap();
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio
            .block_on(ctx.deliver(&policy, &Event::Start(INPUT.into())))
            .unwrap()
            .unwrap();
        Loopbox { tokio, policy, ctx }
    }

    /// One call on a fresh instance; state read from the store, nothing committed.
    fn call(&self, call: Call) {
        self.tokio.block_on(async {
            let meter = Arc::new(Meter::new(&self.ctx.config.limits));
            let journal = Journal::live(self.ctx.db.clone(), &self.ctx.id, String::new(), true);
            let data = self.ctx.instance_state(meter.clone(), &journal, 1).unwrap();
            let (r, _) = self
                .policy
                .call(data, meter, &self.ctx.config.limits, call)
                .await;
            black_box(r.unwrap());
        })
    }
}

/// Ralph in Lua, as a Crucible-style handler: `handle(state, response)` returns a decision table.
const RALPH_LUA: &str = r#"
local function find_promise(text)
  local s = string.find(text, "<promise>", 1, true)
  if not s then return nil end
  local from = s + 9
  local e = string.find(text, "</promise>", from, true)
  if not e then return nil end
  return (string.sub(text, from, e - 1):gsub("^%s+", ""):gsub("%s+$", ""))
end

local function prompt(config, n)
  if config.max_iterations > 0 then
    return string.format("%s\n\n[ralph iteration %d of %d]", config.prompt, n, config.max_iterations)
  end
  return string.format("%s\n\n[ralph iteration %d]", config.prompt, n)
end

function handle(state, response)
  local config = state.config
  if config.completion_promise ~= nil and config.completion_promise == find_promise(response) then
    return { kind = "done", success = true, summary = "completion promise found after " .. state.iteration .. " iteration(s)" }
  end
  if config.max_iterations > 0 and state.iteration >= config.max_iterations then
    return { kind = "done", success = false, summary = "max_iterations reached" }
  end
  state.iteration = state.iteration + 1
  return { kind = "inject", text = prompt(config, state.iteration) }
end
"#;

/// A Lua state that can run the handler: only the string, table and math libraries.
fn lua_state() -> (Lua, Function) {
    let lua = Lua::new_with(
        StdLib::STRING | StdLib::TABLE | StdLib::MATH,
        LuaOptions::default(),
    )
    .unwrap();
    lua.load(RALPH_LUA).exec().unwrap();
    let handle: Function = lua.globals().get("handle").unwrap();
    (lua, handle)
}

/// One decision in `lua`: the session state handed in as tables, the decision read back.
fn lua_decide(lua: &Lua, handle: &Function) {
    let config = lua.create_table().unwrap();
    config.set("prompt", "fix the parser").unwrap();
    config.set("completion_promise", "DONE").unwrap();
    config.set("max_iterations", 0).unwrap();
    let state = lua.create_table().unwrap();
    state.set("config", config).unwrap();
    state.set("iteration", 1).unwrap();
    let decision: Table = handle.call((state, RESPONSE)).unwrap();
    let kind: String = decision.get("kind").unwrap();
    assert_eq!(kind, "inject");
    black_box(decision.get::<String>("text").unwrap());
}

fn extism_input() -> String {
    format!(
        r#"{{"progress": {PROGRESS}, "response": {}}}"#,
        serde_json::to_string(RESPONSE).unwrap()
    )
}

fn extism_decide(plugin: &mut extism::Plugin, input: &str) {
    let out = plugin.call::<&str, String>("handle", input).unwrap();
    assert!(out.contains("\"inject\""), "{out}");
    black_box(out);
}

fn main() {
    let full = full_run();
    let cache = std::env::temp_dir().join("loopbox-bench-cache");
    let runtime = Runtime::new(cache).unwrap();
    let turn = Event::TurnComplete(Turn {
        session_id: "s".into(),
        response: RESPONSE.into(),
        index: 1,
        continuation: true,
        origin: None,
    });
    let rust = Loopbox::new(&runtime, PolicySource::parse("builtin:ralph"), "rust");
    let python = Loopbox::new(
        &runtime,
        PolicySource::Path(PathBuf::from(env!("RALPH_PY"))),
        "python",
    );
    let js = Loopbox::new(
        &runtime,
        PolicySource::Path(PathBuf::from(env!("RALPH_JS"))),
        "js",
    );

    let (lua, handle) = lua_state();
    let wasm = std::fs::read(env!("RALPH_EXTISM")).unwrap();
    let manifest = || extism::Manifest::new([extism::Wasm::data(wasm.clone())]);
    let compiled =
        extism::CompiledPlugin::new(extism::PluginBuilder::new(manifest()).with_wasi(false))
            .unwrap();
    let mut reused_plugin = extism::Plugin::new_from_compiled(&compiled).unwrap();
    let input = extism_input();

    let batch = if full { 100 } else { 1 };
    let mut variants = vec![
        Variant::new("plain Rust fn (the floor)", batch, || {
            black_box(plain(PROGRESS));
        }),
        Variant::new("loopbox, Rust component, fresh instance", 1, || {
            rust.call(Call::Handle(&turn))
        }),
        Variant::new("loopbox, Python component, fresh instance", 1, || {
            python.call(Call::Handle(&turn))
        }),
        Variant::new("loopbox, JavaScript component, fresh instance", 1, || {
            js.call(Call::Handle(&turn))
        }),
        Variant::new(
            "loopbox, Rust component: instantiate + info() only",
            1,
            || rust.call(Call::Info),
        ),
        Variant::new("Lua (mlua), fresh Lua state per event", 1, || {
            let (lua, handle) = lua_state();
            lua_decide(&lua, &handle);
        }),
        Variant::new("Lua (mlua), one reused Lua state", batch, || {
            lua_decide(&lua, &handle)
        }),
        Variant::new("Extism plugin, fresh per event (precompiled)", 1, || {
            let mut plugin = extism::Plugin::new_from_compiled(&compiled).unwrap();
            extism_decide(&mut plugin, &input);
        }),
        Variant::new("Extism plugin, one reused plugin", batch, || {
            extism_decide(&mut reused_plugin, &input)
        }),
    ];
    let (warmup, rounds) = if full { (50, rounds(1000)) } else { (1, 3) };
    only(&mut variants);
    interleave_blocks(&mut variants, warmup, rounds, 50);
    table(
        &format!(
            "Ralph decision per event, side by side ({rounds} samples of each, interleaved in blocks of 50)"
        ),
        &variants,
    );
    if full && std::env::var_os("BENCH_ONLY").is_none() {
        let of = |name: &str| {
            variants
                .iter()
                .find(|v| v.name.starts_with(name))
                .unwrap()
                .p50()
                .as_nanos() as f64
        };
        let rust_fresh = of("loopbox, Rust component, fresh");
        println!("\ntargets:");
        println!(
            "  Rust decision, fresh instance, p50 <= 10 us: {:.2} us",
            rust_fresh / 1000.0
        );
        println!(
            "  vs Extism fresh per event, >= 10x faster: {:.1}x",
            of("Extism plugin, fresh") / rust_fresh
        );
        println!(
            "  vs Lua fresh state per event, >= 4x faster: {:.1}x",
            of("Lua (mlua), fresh") / rust_fresh
        );
        println!(
            "  vs Lua reused state: {:.1}x slower",
            rust_fresh / of("Lua (mlua), one reused")
        );
        println!(
            "  Python decision, fresh instance, < 0.5 ms: {:.0} us",
            of("loopbox, Python") / 1000.0
        );
        println!(
            "  JavaScript decision, fresh instance, < 0.25 ms: {:.0} us",
            of("loopbox, JavaScript") / 1000.0
        );
        println!(
            "  pool slots reset by pagemap scan: {}",
            loopbox::wasm::pagemap_scan()
        );
    }
}
