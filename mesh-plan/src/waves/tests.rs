use super::*;
use mesh_model::inventory::InventoryFile;
use proptest::prelude::*;

/// An inventory of `count` nodes `n00`, `n01`, …; every third a canary, sites `fra` and `ams`
/// in turn; the module `web` assigned to all of them; `rollout` the inventory's `[rollout]`.
fn fleet(count: usize, rollout: &str) -> (Inventory, ModuleDefinition, BTreeSet<String>) {
    let mut text = String::from("bus-node = \"n00\"\n");
    for i in 0..count {
        let site = if i % 2 == 0 { "fra" } else { "ams" };
        let canary = if i % 3 == 0 { ", canary = \"yes\"" } else { "" };
        text.push_str(&format!(
            "[nodes.n{i:02}]\nlabels = {{ site = \"{site}\"{canary} }}\n"
        ));
    }
    text.push_str(rollout);
    let file: InventoryFile = toml::from_str(&text).unwrap();
    let targets = file.nodes.keys().cloned().collect();
    let definition: ModuleDefinition = toml::from_str("name = \"web\"").unwrap();
    (
        Inventory {
            file,
            layers: Default::default(),
        },
        definition,
        targets,
    )
}

fn shown(plan: &WavePlan) -> Vec<String> {
    plan.waves
        .iter()
        .map(|wave| {
            format!(
                "{} by {}: {} node(s) {}{}",
                wave.name,
                wave.chosen_by,
                wave.nodes.len(),
                wave.nodes.join(","),
                wave.pause
                    .map(|p| format!(", then {p}"))
                    .unwrap_or_default()
            )
        })
        .collect()
}

fn problems(count: usize, rollout: &str) -> Vec<String> {
    let (inventory, definition, targets) = fleet(count, rollout);
    plan_waves(&definition, &inventory, &targets)
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn with_no_rollout_the_plan_is_one_machine_first_then_the_rest() {
    let (inventory, definition, targets) = fleet(4, "");
    let plan = plan_waves(&definition, &inventory, &targets).unwrap();
    assert_eq!(
        shown(&plan),
        [
            "first node by the first node by name: 1 node(s) n00",
            "the rest by every node after the first: 3 node(s) n01,n02,n03",
        ]
    );
    assert_eq!(plan.budget, default_budget());
    assert!(!plan.declared);
    let together: ModuleDefinition =
        toml::from_str("name = \"web\"\nupgrade = \"together\"").unwrap();
    let plan = plan_waves(&together, &inventory, &targets).unwrap();
    assert_eq!(
        shown(&plan),
        ["every node by every node at once: 4 node(s) n00,n01,n02,n03"]
    );
    // A module on one node has an empty second wave: one shape for every caller.
    let one = BTreeSet::from(["n02".to_owned()]);
    let plan = plan_waves(&definition, &inventory, &one).unwrap();
    assert_eq!(plan.waves.len(), 2);
    assert!(plan.waves[1].nodes.is_empty());
}

const CANARIES_TENTH_REST: &str = r#"
[rollout]
budget = { failed = "20%", min = 2 }
max-parallel = 3
[[rollout.waves]]
name = "canaries"
select = "canary"
pause = "approve"
[[rollout.waves]]
size = "10%"
pause = "15m"
[[rollout.waves]]
size = "100%"
"#;

#[test]
fn canaries_then_a_tenth_then_the_rest() {
    let (inventory, definition, targets) = fleet(24, CANARIES_TENTH_REST);
    let plan = plan_waves(&definition, &inventory, &targets).unwrap();
    // 8 canaries (every third of 24); 10% of the 16 left is 1.6, so 2; the rest 14.
    let counts: Vec<usize> = plan.waves.iter().map(|w| w.nodes.len()).collect();
    assert_eq!(counts, [8, 2, 14]);
    assert_eq!(
        plan.waves[0].nodes,
        ["n00", "n03", "n06", "n09", "n12", "n15", "n18", "n21"]
    );
    assert_eq!(plan.waves[0].name, "wave 1 `canaries`");
    assert_eq!(plan.waves[0].pause, Some(Pause::Approve));
    assert_eq!(plan.waves[1].name, "wave 2 (10%)");
    assert_eq!(plan.waves[1].pause, Some(Pause::For { secs: 900 }));
    assert_eq!(plan.max_parallel, Some(3));
    assert_eq!(plan.budget.min, 2);
    // Stable: the same inventory and module give the same waves.
    assert_eq!(plan_waves(&definition, &inventory, &targets).unwrap(), plan);
    // The order of the sized waves is the module's own: another module's first wave differs.
    let other: ModuleDefinition = toml::from_str("name = \"db\"").unwrap();
    let other_plan = plan_waves(&other, &inventory, &targets).unwrap();
    assert_ne!(other_plan.waves[1].nodes, plan.waves[1].nodes);
}

#[test]
fn a_modules_own_rollout_overrides_the_fleets_key_by_key() {
    let (inventory, _, targets) = fleet(6, CANARIES_TENTH_REST);
    let definition: ModuleDefinition = toml::from_str(
        "name = \"web\"\n[rollout]\n[[rollout.waves]]\nselect = \"site=fra\"\n\
         [[rollout.waves]]\nselect = \"site=ams\"\n",
    )
    .unwrap();
    let plan = plan_waves(&definition, &inventory, &targets).unwrap();
    assert_eq!(
        shown(&plan),
        [
            "wave 1 (`site=fra`) by `site=fra`: 3 node(s) n00,n02,n04",
            "wave 2 (`site=ams`) by `site=ams`: 3 node(s) n01,n03,n05",
        ]
    );
    // The budget and max-parallel it does not set are the fleet's.
    assert_eq!(plan.max_parallel, Some(3));
    assert_eq!(plan.budget.failed.to_string(), "20%");
}

#[test]
fn rounding_is_to_the_nearest_node_a_half_up() {
    let share = |text: &str| WaveSize::Share(Share::parse(text).unwrap());
    assert_eq!(size_of(share("10%"), 15), 2); // 1.5
    assert_eq!(size_of(share("10%"), 14), 1); // 1.4
    assert_eq!(size_of(share("10%"), 4), 0); // 0.4: refused by plan_waves
    assert_eq!(size_of(share("50%"), 3), 2); // 1.5
    assert_eq!(size_of(share("100%"), 7), 7);
    assert_eq!(size_of(share("0.5%"), 10_000), 50);
    assert_eq!(size_of(WaveSize::Count(5), 3), 3);
    assert_eq!(size_of(WaveSize::Count(5), 30), 5);
}

#[test]
fn a_node_in_two_waves_is_refused_naming_both_waves() {
    let rollout = "[rollout]\n[[rollout.waves]]\nselect = \"canary\"\n\
                   [[rollout.waves]]\nname = \"frankfurt\"\nselect = \"site=fra\"\n\
                   [[rollout.waves]]\nsize = \"100%\"\n";
    assert_eq!(
        problems(4, rollout),
        ["module `web`: node `n00` is in two waves, wave 1 (`canary`) and wave 2 `frankfurt`"]
    );
}

#[test]
fn a_node_in_no_wave_is_refused_naming_it() {
    let rollout = "[rollout]\n[[rollout.waves]]\nselect = \"site=fra\"\n";
    assert_eq!(
        problems(4, rollout),
        [
            "module `web`: nodes are in no wave: `n01`, `n03`; end with a wave of `size = \
             \"100%\"`"
        ]
    );
    let many = problems(30, rollout);
    assert!(many[0].ends_with("`n19` and 5 more; end with a wave of `size = \"100%\"`"));
}

#[test]
fn a_size_rounding_to_no_node_is_refused_naming_the_wave_and_every_problem_at_once() {
    let rollout = "[rollout]\n[[rollout.waves]]\nselect = \"canary\"\n\
                   [[rollout.waves]]\nsize = \"10%\"\n\
                   [[rollout.waves]]\nsize = 0\n\
                   [[rollout.waves]]\nselect = \"rack=r1\"\n\
                   [[rollout.waves]]\nsize = \"100%\"\n";
    assert_eq!(
        problems(6, rollout),
        [
            "module `web`: wave 4 (`rack=r1`): selector `rack=r1` names a label no node has: \
             `rack`",
            "module `web`: wave 2 (10%) takes no node: 10% of the 4 nodes left rounds to 0 \
             (give a count, e.g. `size = 1`, or a larger share)",
            "module `web`: wave 3 (0) takes no node: 0 of the 4 nodes left rounds to 0 (give a \
             count, e.g. `size = 1`, or a larger share)",
        ]
    );
}

#[test]
fn a_wave_with_no_node_left_is_empty_so_a_fleets_waves_fit_a_module_on_one_machine() {
    let (inventory, definition, _) = fleet(6, CANARIES_TENTH_REST);
    let plan = plan_waves(&definition, &inventory, &BTreeSet::from(["n03".to_owned()])).unwrap();
    let counts: Vec<usize> = plan.waves.iter().map(|w| w.nodes.len()).collect();
    assert_eq!(counts, [1, 0, 0]);
}

fn arbitrary_wave() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u32..=10_000).prop_map(|bp| format!(
            "[[rollout.waves]]\nsize = \"{}.{:02}%\"\n",
            bp / 100,
            bp % 100
        )),
        (0u32..8).prop_map(|n| format!("[[rollout.waves]]\nsize = {n}\n")),
        prop_oneof![
            Just("canary"),
            Just("!canary"),
            Just("site=fra"),
            Just("site=ams"),
            Just("site in (fra,ams),canary"),
            Just("n01"),
        ]
        .prop_map(|s| format!("[[rollout.waves]]\nselect = \"{s}\"\n")),
    ]
}

proptest! {
    #[test]
    fn the_waves_partition_the_nodes_whatever_the_sizes_and_the_inventory(
        count in 1usize..40,
        waves in proptest::collection::vec(arbitrary_wave(), 1..6),
        last_all in any::<bool>(),
        subset in proptest::collection::vec(any::<bool>(), 40),
    ) {
        let mut rollout = format!("[rollout]\n{}", waves.concat());
        if last_all {
            rollout.push_str("[[rollout.waves]]\nsize = \"100%\"\n");
        }
        let (inventory, definition, all) = fleet(count, &rollout);
        let targets: BTreeSet<String> = all
            .into_iter()
            .enumerate()
            .filter(|(i, _)| subset[*i])
            .map(|(_, n)| n)
            .collect();
        match plan_waves(&definition, &inventory, &targets) {
            Ok(plan) => {
                let mut seen = BTreeSet::new();
                for wave in &plan.waves {
                    for node in &wave.nodes {
                        prop_assert!(seen.insert(node.clone()), "{node} twice");
                    }
                }
                prop_assert_eq!(&seen, &targets);
                prop_assert_eq!(plan_waves(&definition, &inventory, &targets).unwrap(), plan);
            }
            Err(problems) => prop_assert!(!problems.is_empty()),
        }
    }
}

#[test]
fn check_names_the_file_module_and_key_of_every_wave_problem() {
    let (catalogue, inventory) = crate::fixture::mesh(
        r#"
        //- modules/web/module.toml
        name = "web"
        [rollout]
        windows = [{ allow = "Mon-Fri 09:00-16:00", zone = "Europe/Berln" }]
        [[rollout.waves]]
        select = "role=edge"
        //- modules/db/module.toml
        name = "db"
        //- inventory.toml
        bus-node = "a"
        [nodes.a]
        labels = { role = "edge" }
        [nodes.b]
        [assignments]
        web = ["a", "b"]
        db = ["a", "b"]
        [rollout]
        [[rollout.waves]]
        select = "rle=edge"
        [[rollout.waves]]
        size = "100%"
        "#,
    );
    let db = jiff::tz::TimeZoneDatabase::bundled();
    let found: Vec<String> = check_waves(&catalogue, &inventory, |name| {
        db.get(name).map_err(|e| e.to_string())
    })
    .iter()
    .map(|d| d.to_string())
    .collect();
    assert_eq!(
        found,
        [
            "inventory.toml: module `db`: `rollout.waves`: module `db`: wave 1 (`rle=edge`): \
             selector `rle=edge` names a label no node has: `rle`",
            "modules/web/module.toml: module `web`: `rollout.waves`: module `web`: a node is in \
             no wave: `b`; end with a wave of `size = \"100%\"`",
            "modules/web/module.toml: module `web`: `rollout.windows`: window `allow Mon-Fri \
             09:00-16:00 (Europe/Berln)`: no time zone `Europe/Berln`: failed to find time zone \
             `Europe/Berln` in time zone database",
        ]
    );
}

#[test]
fn a_plan_of_waves_reads_as_the_preview_shows_it() {
    let rollout = CANARIES_TENTH_REST.replace(
        "max-parallel = 3\n",
        "max-parallel = 3\nwindows = [{ deny = \"Fri 12:00-24:00\" }, \
         { allow = \"Mon-Fri 09:00-16:00\", zone = \"Europe/Berlin\" }]\n",
    );
    let (inventory, definition, targets) = fleet(24, &rollout);
    let plan = plan_waves(&definition, &inventory, &targets).unwrap();
    let (inventory, _, targets) = fleet(3, "");
    let default = plan_waves(&definition, &inventory, &targets).unwrap();
    insta::assert_snapshot!(format!("{plan}\n{default}"));
    insta::assert_json_snapshot!(default);
}
