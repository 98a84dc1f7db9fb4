//! A test policy that never answers, not shipped: `info()` and `handle()` both
//! sleep forever in the host (WASI subscribe-duration + poll), where neither
//! fuel nor the epoch check runs. It imports nothing of loopbox's but `types`,
//! so it is a `decider`: the tests show that even a policy with no grants at
//! all cannot hang loopbox (`limits.wall_ms_per_event` stops it).

#[cfg(target_arch = "wasm32")]
mod component {
    use loopbox_guest::{Decision, Event, Info, Policy};

    fn forever() {
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }

    struct Stall;

    impl Policy for Stall {
        fn info() -> Info {
            forever();
            Info {
                name: "stall".into(),
                version: "0.0.0".into(),
                description: "never answers".into(),
            }
        }

        fn handle(_: Event) -> Result<Decision, String> {
            forever();
            Ok(Decision::Pass)
        }
    }

    loopbox_guest::policy!(Stall);
}
