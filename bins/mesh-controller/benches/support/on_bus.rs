//! A bench's home with its records moved onto a real loopback bus, the bus running the users
//! the home composes.

use super::modules;
use mesh_controller::bus::BusConfig;
use mesh_controller::Home;
use std::path::Path;
use std::time::Duration;

/// The home at `root` (its inventory written) with its records moved to the bus at `url`,
/// after `reload` gave every server of the bus the users the home composes; returns the home
/// on the bus, how the controller reaches it, and those users.
pub fn onto_bus(root: &Path, url: String, reload: impl FnOnce(&str)) -> (Home, BusConfig, String) {
    std::fs::create_dir_all(root.join("catalogue/modules")).unwrap();
    let local = Home::new(root);
    let users = mesh_controller::bus::users_text(
        &local,
        &local.catalogue().unwrap(),
        &BusConfig::default(),
    )
    .unwrap();
    reload(&users);
    let bus = BusConfig::new(url).with_password_file(root.join("bus/passwords/controller"));
    // The reload is asynchronous: wait until the controller is let in (the limit only bounds
    // a failure).
    let home = mesh_test_support::wait::wait_for(
        "the controller let in after the users' reload",
        Duration::from_secs(30),
        || mesh_controller::records::open_home(root, Some(&bus)).map_err(|e| format!("{e:#}")),
    );
    mesh_controller::records::import(root, &home, bus.url()).unwrap();
    (home, bus, users)
}

/// A home under `dir` of `hosts` nodes each assigned the ten modules, on the bus at `url`
/// (given its users by `reload`), the users recorded as the ones the bus confirmed (the fleet
/// runs them already), and the repository `cat` of the ten modules (`dir/repo`) registered.
pub fn ten_modules_on_bus(
    dir: &Path,
    hosts: usize,
    url: String,
    reload: impl FnOnce(&str),
) -> (Home, BusConfig) {
    let repo = dir.join("repo");
    modules::repository(&repo);
    let root = dir.join("home");
    modules::write(
        &root.join("inventory.toml"),
        &super::inventory(hosts, &super::ten_modules::names()),
    );
    let (home, bus, users) = onto_bus(&root, url, reload);
    let archive = mesh_controller::bus::users_archive(&users).unwrap();
    mesh_controller::bus::record_confirmed(&home, &users, &archive.reference).unwrap();
    mesh_controller::catalogue::add(&home, "cat", &repo, None, "modules").unwrap();
    (home, bus)
}
