//! Composing a module's accounts, and ordering what names one after it: a file, directory or
//! place it owns, a membership of it, a container or job that runs as it (by its fixed ids, as
//! podman runs a container as ids, not as a name the image does not know).

use super::{ComposeProblem, ModuleComposer};
use mesh_model::declaration::{resource_id, AccountSpec, Resource, Spec};
use mesh_model::module::AccountDefinition;

impl ModuleComposer<'_> {
    /// The account `name` of the module, its ids rendered from the module's settings.
    pub(super) fn account(&mut self, name: &str, account: &AccountDefinition) -> Resource {
        let key = format!("accounts.{name}");
        let mut id = |field: &str, text: &Option<String>| -> Option<u32> {
            let at = format!("{key}.{field}");
            let rendered = self.render(at.clone(), text.as_deref()?);
            match rendered.parse::<u32>() {
                Ok(id) => Some(id),
                Err(_) => {
                    self.problems.push(ComposeProblem::BadValue {
                        module: self.name().to_owned(),
                        key: at,
                        problem: format!("`{rendered}` is not a number"),
                    });
                    None
                }
            }
        };
        let spec = Spec::Account(AccountSpec {
            name: name.to_owned(),
            uid: id("uid", &account.uid),
            gid: id("gid", &account.gid),
            home: account.home.clone(),
            shell: account.shell.clone(),
        });
        self.resource("account", name, Vec::new(), spec)
    }

    /// Orders after the module's account every resource of it that names the account, and
    /// runs a container whose `user` is the account as the account's ids.
    pub(super) fn account_edges(&mut self, resources: &mut [Resource]) {
        let accounts: Vec<(String, Option<u32>, Option<u32>)> = resources
            .iter()
            .filter_map(|r| match &r.spec {
                Spec::Account(a) => Some((a.name.clone(), a.uid, a.gid)),
                _ => None,
            })
            .collect();
        if accounts.is_empty() {
            return;
        }
        let module = self.name().to_owned();
        for resource in resources.iter_mut() {
            let names: Vec<&str> = match &resource.spec {
                Spec::File(f) => vec![&f.owner, &f.group],
                Spec::Directory(d) => vec![&d.owner, &d.group],
                Spec::Membership(m) => vec![&m.account],
                Spec::Container(c) => c.user.as_deref().into_iter().collect(),
                Spec::Job(j) => j.run.user.as_deref().into_iter().collect(),
                // The other kinds name no account.
                _ => Vec::new(),
            };
            let named: Vec<&(String, Option<u32>, Option<u32>)> = accounts
                .iter()
                .filter(|(name, ..)| names.contains(&name.as_str()))
                .collect();
            let edges: Vec<String> = named
                .iter()
                .map(|(name, ..)| resource_id(&module, "account", name))
                .collect();
            let section = match resource.spec {
                Spec::Job(_) => "jobs",
                _ => "containers",
            };
            let container = match &mut resource.spec {
                Spec::Container(c) => Some(&mut **c),
                Spec::Job(j) => Some(&mut j.run),
                _ => None,
            };
            if let (Some(c), Some((name, uid, gid))) = (container, named.first()) {
                match (uid, gid) {
                    (Some(uid), Some(gid)) => c.user = Some(format!("{uid}:{gid}")),
                    _ => self.problems.push(ComposeProblem::BadValue {
                        module: module.clone(),
                        key: format!(
                            "{section}.{}.user",
                            resource.id.rsplit('/').next().unwrap_or_default()
                        ),
                        problem: format!(
                            "runs as the account `{name}`, which has no fixed uid and gid; a \
                             container runs as an account by its ids"
                        ),
                    }),
                }
            }
            for edge in edges {
                if !resource.after.contains(&edge) {
                    resource.after.push(edge);
                }
            }
            resource.after.sort();
        }
    }
}
