//! A policy outlives the `Runtime` that loaded it (a launcher may load, then
//! drop the runtime): its events must still be interrupted by the engine's
//! epoch, or the compute-time limit, stop requests and limits deferred by a
//! clock read would never stop a guest that spins.

use loopbox::bindings::Event;
use loopbox::wasm::policy::PolicySource;
use loopbox::wasm::runtime::Runtime;
use loopbox_tests::*;
use serde_json::json;

#[tokio::test]
async fn the_compute_limit_holds_after_the_runtime_that_loaded_the_policy_is_dropped() {
    let cache = tempfile::tempdir().unwrap();
    let policy = {
        let runtime = Runtime::with_pool(cache.path().join("cache"), 2).unwrap();
        runtime.load(&PolicySource::Path(guest("probe"))).unwrap()
    };
    let ws = Workspace::new();
    // Fuel out of the way, as in `a_busy_loop_runs_out_of_compute_time`: the
    // default 2e9 burns in about 190 ms on a fast machine, a race with 200 ms.
    let ctx = ws.run(
        &policy,
        "[limits]\nfuel_per_event = 18000000000000000000\ncpu_ms_per_event = 200",
    );
    let event = Event::Start(json!({"op": "spin"}).to_string());
    let started = std::time::Instant::now();
    let f = deliver(&ctx, &policy, event).await.unwrap_err();
    assert_eq!(limit_key(&f), Some("limits.cpu_ms_per_event"), "{f}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}
