//! Composing a module's job: its container composed as a container is (at `jobs.<name>`, named
//! `mesh-<module>-job-<name>` on the machine), after the files it runs again on.

use super::container::container_name;
use super::ModuleComposer;
use mesh_model::declaration::{resource_id, JobSpec, Resource, Spec};
use mesh_model::module::ContainerDefinition;
use std::collections::BTreeMap;

impl ModuleComposer<'_> {
    /// The job `name` of the module, with the places its mounts name at `place_paths`.
    pub(super) fn job(
        &mut self,
        name: &str,
        job: &ContainerDefinition,
        place_paths: &BTreeMap<&str, String>,
    ) -> Resource {
        let key = format!("jobs.{name}");
        let mut composed = self.container_at(&key, name, job, place_paths);
        let rerun_on: Vec<String> = job
            .rerun_on
            .iter()
            .filter_map(|reference| reference.strip_prefix("file/"))
            .map(|file| resource_id(self.name(), "file", file))
            .collect();
        for file in &rerun_on {
            if !composed.after.contains(file) {
                composed.after.push(file.clone());
            }
        }
        composed.after.sort();
        let Spec::Container(mut run) = composed.spec else {
            unreachable!("a container is composed as one")
        };
        run.name = container_name(self.name(), &format!("job-{name}"));
        let spec = Spec::Job(Box::new(JobSpec {
            run: *run,
            rerun_on,
            timeout_secs: job.timeout_secs(),
        }));
        self.resource("job", name, composed.after, spec)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::compose::compose;
    use crate::fixture;
    use mesh_model::declaration::Spec;

    pub(crate) const JOBS: &str = r#"
        //- modules/svc/module.toml
        name = "svc"
        [settings]
        port = 8080
        level = "info"
        [accounts.svc]
        uid = 2345
        gid = 2345
        [files.conf]
        source = "conf"
        path = "/etc/svc/conf"
        [jobs.migrate]
        image = "localhost/mesh-busybox:latest"
        command = ["sh", "-c", "echo migrated"]
        env = { LEVEL = "{{ level }}" }
        rerun-on = ["file/conf"]
        user = "svc"
        timeout = "90s"
        [containers.web]
        image = "localhost/mesh-busybox:latest"
        command = ["httpd", "-f", "-p", "80"]
        ports = ["127.0.0.1:{{ port }}:80/tcp"]
        user = "svc"
        after = ["job/migrate"]
        //- modules/svc/conf
        a = 1
        //- inventory.toml
        bus-node = "a"
        [nodes.a]
        [assignments]
        svc = ["a"]
    "#;

    #[test]
    fn a_job_is_its_container_run_as_the_account_after_its_files_and_before_what_names_it() {
        let (catalogue, inventory) = fixture::mesh(JOBS);
        let declaration = compose(&catalogue, &inventory, "a").unwrap();
        let job = declaration.resource("svc/job/migrate").unwrap();
        assert_eq!(job.after, ["svc/account/svc", "svc/file/conf"]);
        let Spec::Job(spec) = &job.spec else {
            panic!("not a job: {job:?}");
        };
        assert_eq!(spec.run.name, "mesh-svc-job-migrate");
        assert_eq!(spec.run.user.as_deref(), Some("2345:2345"));
        assert_eq!(spec.run.env["LEVEL"], "info");
        assert_eq!(spec.rerun_on, ["svc/file/conf"]);
        assert_eq!(spec.timeout_secs, Some(90));
        let web = declaration.resource("svc/container/web").unwrap();
        assert_eq!(web.after, ["svc/account/svc", "svc/job/migrate"]);
    }
}
