//! Composing a module's container: its spec rendered from the module's settings, its mounts
//! at their places, and what a container that serves says (ports, network, user, limits, …).

use super::{ComposeProblem, ModuleComposer};
use mesh_model::declaration::{
    resource_id, ContainerSpec, Device, HealthCheck, Limits, Mount, PortMapping, Resource, Spec,
    DEFAULT_HEALTH_WITHIN_MS, NETWORK_BRIDGE,
};
use mesh_model::module::{parse_duration_ms, ContainerDefinition};
use std::collections::{BTreeMap, BTreeSet};

impl ModuleComposer<'_> {
    /// The container `name` of the module, with the places its mounts name at `place_paths`.
    pub(super) fn container(
        &mut self,
        name: &str,
        container: &ContainerDefinition,
        place_paths: &BTreeMap<&str, String>,
    ) -> Resource {
        self.container_at(&format!("containers.{name}"), name, container, place_paths)
    }

    /// [`ModuleComposer::container`] of the definition at `key` (a job's container is
    /// composed as one, at `jobs.<name>`).
    pub(super) fn container_at(
        &mut self,
        key: &str,
        name: &str,
        container: &ContainerDefinition,
        place_paths: &BTreeMap<&str, String>,
    ) -> Resource {
        let key = key.to_owned();
        let mut after = BTreeSet::new();
        let mut mounts = Vec::with_capacity(container.mounts.len());
        for (i, mount) in container.mounts.iter().enumerate() {
            after.insert(resource_id(self.name(), "directory", &mount.place));
            mounts.push(Mount {
                place: mount.place.clone(),
                source: place_paths
                    .get(mount.place.as_str())
                    .cloned()
                    .unwrap_or_default(),
                at: self.render(format!("{key}.mounts[{i}].at"), &mount.at),
                read_only: mount.read_only,
            });
        }
        let restart_on: Vec<String> = container
            .restart_on
            .iter()
            .map(|file| resource_id(self.name(), "file", file))
            .collect();
        after.extend(restart_on.iter().cloned());
        for reference in &container.after {
            if let Some((kind, name)) = reference.split_once('/') {
                after.insert(resource_id(self.name(), kind, name));
            }
        }
        let serving = self.serving(&key, container);
        if let Some(network) = container
            .network
            .as_ref()
            .filter(|n| self.module.definition.networks.contains_key(*n))
        {
            after.insert(resource_id(self.name(), "network", network));
        }
        let spec = Spec::Container(Box::new(ContainerSpec {
            name: container_name(self.name(), name),
            image: self.render(format!("{key}.image"), &container.image),
            command: container
                .command
                .iter()
                .enumerate()
                .map(|(i, arg)| self.render(format!("{key}.command[{i}]"), arg))
                .collect(),
            env: container
                .env
                .iter()
                .map(|(var, value)| (var.clone(), self.render(format!("{key}.env.{var}"), value)))
                .collect(),
            mounts,
            restart_on,
            settle_ms: container.settle.as_deref().and_then(parse_duration_ms),
            health: container.health.as_ref().map(|health| HealthCheck {
                command: health
                    .command
                    .iter()
                    .enumerate()
                    .map(|(i, arg)| self.render(format!("{key}.health.command[{i}]"), arg))
                    .collect(),
                within_ms: health
                    .within
                    .as_deref()
                    .and_then(parse_duration_ms)
                    .unwrap_or(DEFAULT_HEALTH_WITHIN_MS),
            }),
            ..serving
        }));
        self.resource("container", name, after.into_iter().collect(), spec)
    }

    /// What a container that serves says, rendered: its ports, network, user, limits and the
    /// rest (the fields [`ContainerSpec`] gained for services; the others are left default).
    fn serving(&mut self, key: &str, container: &ContainerDefinition) -> ContainerSpec {
        let mut ports = Vec::with_capacity(container.ports.len());
        for (i, text) in container.ports.iter().enumerate() {
            let at = format!("{key}.ports[{i}]");
            let before = self.problems.len();
            let text = self.render(at.clone(), text);
            if self.problems.len() != before {
                continue;
            }
            match PortMapping::parse(&text) {
                Ok(port) => ports.push(port),
                Err(problem) => self.problems.push(ComposeProblem::BadValue {
                    module: self.name().to_owned(),
                    key: at,
                    problem,
                }),
            }
        }
        // A container that publishes a port is on the bridge unless it says otherwise: on a
        // podman whose default is host networking, a published port would mean nothing.
        // A network the module declares is joined under its name on the machine.
        let network = match &container.network {
            Some(network) if self.module.definition.networks.contains_key(network) => {
                Some(container_name(self.name(), network))
            }
            Some(network) => Some(network.clone()),
            None => (!ports.is_empty()).then(|| NETWORK_BRIDGE.to_owned()),
        };
        ContainerSpec {
            ports,
            network,
            user: container
                .user
                .as_ref()
                .map(|user| self.render(format!("{key}.user"), user)),
            limits: Limits {
                memory: container.memory.clone(),
                cpus: container.cpus.clone(),
                pids: container.pids,
            },
            cap_add: container.cap_add.clone(),
            cap_drop: container.cap_drop.clone(),
            read_only_root: container.read_only_root,
            workdir: container
                .workdir
                .as_ref()
                .map(|workdir| self.render(format!("{key}.workdir"), workdir)),
            entrypoint: container.entrypoint.as_ref().map(|entrypoint| {
                entrypoint
                    .iter()
                    .enumerate()
                    .map(|(i, arg)| self.render(format!("{key}.entrypoint[{i}]"), arg))
                    .collect()
            }),
            labels: container
                .labels
                .iter()
                .map(|(name, value)| {
                    let value = self.render(format!("{key}.labels.{name}"), value);
                    (name.clone(), value)
                })
                .collect(),
            stop_timeout: container
                .stop_timeout
                .as_deref()
                .and_then(parse_duration_ms)
                .map(|ms| u32::try_from(ms.div_ceil(1000)).unwrap_or(u32::MAX)),
            restart: container.restart.clone(),
            devices: container
                .devices
                .iter()
                .enumerate()
                .map(|(i, device)| Device {
                    source: self.render(format!("{key}.devices[{i}].source"), &device.source),
                    ..device.clone()
                })
                .collect(),
            ..ContainerSpec::default()
        }
    }
}

/// The name a module's container (or network) has on a machine: `mesh-<module>-<name>`.
pub fn container_name(module: &str, container: &str) -> String {
    format!("mesh-{module}-{container}")
}

#[cfg(test)]
mod tests {
    use crate::compose::compose;
    use crate::fixture;
    use mesh_model::declaration::{Limits, PortMapping, Spec};
    use mesh_model::inventory::LayerScope;

    const SERVES: &str = r#"
        //- modules/web/module.toml
        name = "web"
        [settings]
        port = 8080
        [containers.site]
        image = "localhost/mesh-busybox:latest"
        command = ["httpd", "-f", "-p", "80"]
        ports = ["127.0.0.1:{{ port }}:80/tcp"]
        user = "2345:2345"
        memory = "64m"
        cpus = 0.5
        pids = 100
        cap-drop = ["ALL"]
        cap-add = ["NET_BIND_SERVICE"]
        read-only = true
        workdir = "/srv"
        entrypoint = ["/bin/busybox"]
        labels = { team = "media" }
        stop-timeout = "1500ms"
        restart = "on-failure:3"
        //- modules/other/module.toml
        name = "other"
        [settings]
        port = 9090
        [containers.api]
        image = "localhost/mesh-busybox:latest"
        ports = ["{{ port }}:80"]
        //- inventory.toml
        bus-node = "a"
        [nodes.a]
        [nodes.b]
        [assignments]
        web = ["a", "b"]
        other = ["a"]
        //- settings/other/nodes/a.json
        {"port": 8080}
    "#;

    #[test]
    fn a_container_that_serves_reaches_the_declaration_rendered() {
        let (catalogue, inventory) = fixture::mesh(SERVES);
        let declaration = compose(&catalogue, &inventory, "b").unwrap();
        let site = declaration.resource("web/container/site").unwrap();
        let Spec::Container(spec) = &site.spec else {
            panic!("not a container: {site:?}");
        };
        assert_eq!(
            spec.ports,
            [PortMapping::parse("127.0.0.1:8080:80/tcp").unwrap()]
        );
        // It publishes a port and names no network: the bridge.
        assert_eq!(spec.network.as_deref(), Some("bridge"));
        assert_eq!(spec.user.as_deref(), Some("2345:2345"));
        assert_eq!(
            spec.limits,
            Limits {
                memory: Some("64m".into()),
                cpus: Some("0.5".into()),
                pids: Some(100),
            }
        );
        assert_eq!(spec.cap_add, ["NET_BIND_SERVICE"]);
        assert_eq!(spec.cap_drop, ["ALL"]);
        assert!(spec.read_only_root);
        assert_eq!(spec.workdir.as_deref(), Some("/srv"));
        assert_eq!(spec.entrypoint, Some(vec!["/bin/busybox".to_owned()]));
        assert_eq!(spec.labels["team"], "media");
        assert_eq!(spec.stop_timeout, Some(2), "1500ms, in whole seconds up");
        assert_eq!(spec.restart.as_deref(), Some("on-failure:3"));
    }

    #[test]
    fn two_modules_publishing_one_host_port_on_a_node_are_refused_naming_both() {
        let (catalogue, inventory) = fixture::mesh(SERVES);
        let error = compose(&catalogue, &inventory, "a")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(
                "`other/container/api` and `web/container/site` both publish host port \
                 127.0.0.1:8080/tcp"
            ),
            "{error}"
        );
    }

    #[test]
    fn a_port_that_renders_to_no_port_is_refused_naming_its_key() {
        let (catalogue, mut inventory) = fixture::mesh(SERVES);
        inventory.layers.set(
            "web",
            LayerScope::Node("b".into()),
            serde_json::json!({"port": "eighty"}),
        );
        let error = compose(&catalogue, &inventory, "b")
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("module `web`: `containers.site.ports[0]`: `127.0.0.1:eighty:80/tcp`"),
            "{error}"
        );
        assert!(error.contains("`eighty` is not a port"), "{error}");
    }

    #[test]
    fn a_container_joins_the_network_its_module_declares_under_its_machine_name() {
        let mesh = r#"
            //- modules/app/module.toml
            name = "app"
            [networks.backend]
            [containers.db]
            image = "localhost/mesh-busybox:latest"
            network = "backend"
            //- inventory.toml
            bus-node = "a"
            [nodes.a]
            [assignments]
            app = ["a"]
        "#;
        let (catalogue, inventory) = fixture::mesh(mesh);
        let declaration = compose(&catalogue, &inventory, "a").unwrap();
        let network = declaration.resource("app/network/backend").unwrap();
        assert_eq!(
            network.spec,
            Spec::Network(mesh_model::declaration::NetworkSpec {
                name: "mesh-app-backend".to_owned()
            })
        );
        let db = declaration.resource("app/container/db").unwrap();
        let Spec::Container(spec) = &db.spec else {
            panic!("not a container: {db:?}");
        };
        assert_eq!(spec.network.as_deref(), Some("mesh-app-backend"));
        assert_eq!(db.after, ["app/network/backend"]);
    }
    #[test]
    fn an_account_orders_what_names_it_and_a_container_runs_as_its_ids() {
        let mesh = r#"
            //- modules/svc/module.toml
            name = "svc"
            [settings]
            ids = { uid = 2345 }
            [accounts.svc]
            uid = "{{ ids.uid }}"
            gid = 2345
            [places.data]
            default = "/srv/svc"
            owner = "svc"
            [containers.web]
            image = "localhost/mesh-busybox:latest"
            user = "svc"
            //- inventory.toml
            bus-node = "a"
            [nodes.a]
            [assignments]
            svc = ["a"]
            //- settings/svc/nodes/a.json
            {"ids": {"uid": 3456}}
        "#;
        let (catalogue, inventory) = fixture::mesh(mesh);
        let declaration = compose(&catalogue, &inventory, "a").unwrap();
        let account = declaration.resource("svc/account/svc").unwrap();
        assert_eq!(
            account.spec,
            Spec::Account(mesh_model::declaration::AccountSpec {
                name: "svc".to_owned(),
                uid: Some(3456),
                gid: Some(2345),
                home: None,
                shell: None,
            }),
            "the node's layer sets the uid"
        );
        let data = declaration.resource("svc/directory/data").unwrap();
        assert_eq!(data.after, ["svc/account/svc"]);
        let web = declaration.resource("svc/container/web").unwrap();
        let Spec::Container(spec) = &web.spec else {
            panic!("not a container: {web:?}");
        };
        assert_eq!(spec.user.as_deref(), Some("3456:2345"));
        assert!(
            web.after.contains(&"svc/account/svc".to_owned()),
            "{:?}",
            web.after
        );
    }
}
