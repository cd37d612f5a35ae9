//! What only the binary does: completions and manual pages, the demo, and progress as a person sees
//! it.
//!
//! One test target for the area, as cargo's `testsuite` is one: linked once, each file a
//! module whose tests are named `<module>::<test>`.

mod cli_docs;
mod demo;
mod plan_all;
mod progress;
mod read_only;
mod selected;
