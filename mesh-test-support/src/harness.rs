//! The runner of a test binary made with `harness = false` (a test that re-runs its own binary
//! as a child to kill it): its tests run one after another, and it answers the two questions a
//! test runner asks of libtest's binaries — `--list --format terse` (one `NAME: test` line each,
//! none for `--ignored`) and `--exact NAME` (that test only) — so `cargo test` and
//! `cargo nextest` both run it.

use std::time::Instant;

/// A test: its name and its function.
pub type Test = (&'static str, fn());

/// Runs `tests` as the command line asks: lists them, runs the one named with `--exact`, those
/// whose name holds a filter given, or all. A failing test panics, which fails the binary.
pub fn run(tests: &[Test]) {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let listing = args.iter().any(|a| a == "--list");
    let ignored = args.iter().any(|a| a == "--ignored");
    let exact = args.iter().any(|a| a == "--exact");
    // Flags with a value; everything else that is not a flag is a filter.
    let mut filters = Vec::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--format" || arg == "--test-threads" || arg == "--skip" {
            rest.next();
        } else if !arg.starts_with('-') {
            filters.push(arg.as_str());
        }
    }
    let chosen = |name: &str| {
        filters.is_empty()
            || filters
                .iter()
                .any(|f| if exact { name == *f } else { name.contains(f) })
    };
    if listing {
        if !ignored {
            for (name, _) in tests.iter().filter(|(name, _)| chosen(name)) {
                println!("{name}: test");
            }
        }
        return;
    }
    if ignored {
        return;
    }
    let started = Instant::now();
    let mut ran = 0;
    for (name, test) in tests.iter().filter(|(name, _)| chosen(name)) {
        test();
        println!("test {name} ... ok");
        ran += 1;
    }
    println!(
        "test result: ok. {ran} passed; 0 failed; {} filtered out; finished in {:.2?}",
        tests.len() - ran,
        started.elapsed()
    );
}
