//! The controller library driven in process: merges, plans, pushes, settings, secrets and the
//! records, on the embedded default or a bus of one server, each test a module of its own.
//!
//! One test target for the area, as cargo's `testsuite` is one: linked once, each file a
//! module whose tests are named `<module>::<test>`.

#[path = "../support/mod.rs"]
mod support;

mod archives;
mod catalogues;
mod changed_paths;
mod collect;
mod concurrent_writes;
mod end_to_end;
mod enroll;
mod executor;
mod first_machine_failed;
mod forgetting;
mod grants_first;
mod host_failures;
mod judged_again;
mod merges;
mod nodes_behind;
mod orphaned_settings;
mod pending;
mod quick_start_forget;
mod quiet_bus_log;
mod records_backup;
mod secret_files;
mod secrets;
mod secrets_rotation;
mod seeing_changes;
mod set_before_first_use;
mod status_exit_codes;
mod stopping;
mod windows_in_status;
