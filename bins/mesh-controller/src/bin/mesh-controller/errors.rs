//! An error as the binary says it: the library states what is wrong with the data it has
//! (which option, which value, which home); the binary phrases it with its own flags and
//! commands (`--bus URL`, `mesh-controller --home DIR init --example`). Every other error reads
//! as the library wrote it, each cause in turn ("outer: inner: …").

use mesh_cli_docs::exit::Exit;
use mesh_controller::Error;
use mesh_controller::Given;
use mesh_controller::NoMesh;

/// The exit code of a command that ended in `error`: the one place it is decided. A refusal
/// (nothing changed; a flag or a person lets it go) is [`Exit::Refused`], an option the
/// command needs or refuses is a usage error ([`Exit::Usage`]); anything else is an error.
pub fn exit_of(error: &anyhow::Error) -> Exit {
    let library = error.chain().find_map(|cause| {
        cause
            .downcast_ref::<Error>()
            .or_else(|| cause.downcast_ref::<Box<Error>>().map(AsRef::as_ref))
    });
    match library {
        Some(Error::Refused { .. }) => Exit::Refused,
        // A credential the home does not hold is no fault of the command line.
        Some(Error::Given {
            option: Given::ControllerSecret,
            ..
        }) => Exit::Error,
        Some(Error::Given { .. }) => Exit::Usage,
        _ => Exit::Error,
    }
}

/// `error` and each of its causes, outermost first, joined by ": " (as `anyhow` prints `{:#}`),
/// each of the library's errors that names an option or a missing mesh phrased with the
/// binary's flags and commands. A cause an outer message already says (a client library's
/// error that prints its source, and that source again) is said once.
pub fn phrased(error: &anyhow::Error) -> String {
    let mut said: Vec<String> = Vec::new();
    for cause in error.chain() {
        let library = cause
            .downcast_ref::<Error>()
            .or_else(|| cause.downcast_ref::<Box<Error>>().map(AsRef::as_ref));
        let words = library
            .and_then(with_flags)
            .unwrap_or_else(|| cause.to_string());
        if !said.iter().any(|outer| outer.contains(&words)) {
            said.push(words);
        }
    }
    said.join(": ")
}

/// The binary's words for `error`, when it names an option or a missing mesh; `None`: the
/// library's own words are the binary's.
pub fn with_flags(error: &Error) -> Option<String> {
    Some(match error {
        Error::Given { option, value, why } => {
            let value = value.as_deref().unwrap_or_default();
            match option {
                Given::Bus => format!("{why}: open the mesh with one (--bus URL)"),
                Given::Replicas => format!("--bus-replicas {value}: {why}"),
                Given::PollInterval => format!("--poll {value}: {why}"),
                Given::Branch => format!("{why}: give --branch"),
                Given::HttpListen => format!(
                    "--http {value}: not a loopback address, and no TLS given: the status page \
                     would be readable in the clear by anyone who reaches it; give --http-cert \
                     and --http-key (and --http-client-ca to admit only clients it signed), or \
                     say --http-public"
                ),
                Given::HooksListen => format!(
                    "--hooks {value}: not a loopback address, and no TLS given: a GitLab \
                     webhook's token would cross the network in the clear; give --hooks-cert and \
                     --hooks-key, or say --hooks-public"
                ),
                _ => return None,
            }
        }
        Error::NoMesh { home, why } => {
            let inventory = mesh_model::inventory::INVENTORY_FILE;
            match why {
                NoMesh::MovedToBus(url) => format!(
                    "the records of {home} were moved to a bus ({url}): give that bus with --bus \
                     (or MESH_BUS), so nothing reads the old ones"
                ),
                NoMesh::EmptyBus => format!(
                    "{home} holds no mesh (no {inventory}); move a home's records there with \
                     `mesh-controller --home DIR --bus URL records import`"
                ),
                NoMesh::NotAHome => format!(
                    "{home} is not a mesh home (no {inventory}); make one with `mesh-controller \
                     --home {home} init --example`"
                ),
                _ => return None,
            }
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A library error wrapped in a subject's context is phrased inside it, the context kept.
    #[test]
    fn an_option_refused_deep_in_a_chain_is_said_with_its_flag() {
        let inner = Error::Given {
            option: Given::Replicas,
            value: Some("0".to_owned()),
            why: "a stream keeps at least one copy".to_owned(),
        };
        let wrapped = Error::Repo {
            repo: "cat".to_owned(),
            doing: "opening the bus for `cat`".to_owned(),
            source: Box::new(inner),
        };
        let error = anyhow::Error::new(wrapped).context("merge cat");
        assert_eq!(
            phrased(&error),
            "merge cat: opening the bus for `cat`: --bus-replicas 0: a stream keeps at least \
             one copy"
        );
    }

    /// The library says a missing mesh in its own words; the binary names the command that
    /// makes one.
    #[test]
    fn a_home_with_no_mesh_is_said_with_the_command_that_makes_one() {
        let error = Error::NoMesh {
            home: "/srv/mesh".to_owned(),
            why: NoMesh::NotAHome,
        };
        assert_eq!(
            error.to_string(),
            "/srv/mesh is not a mesh home (no inventory.toml); make one first"
        );
        assert_eq!(
            phrased(&anyhow::Error::new(error)),
            "/srv/mesh is not a mesh home (no inventory.toml); make one with `mesh-controller \
             --home /srv/mesh init --example`"
        );
    }
}

/// The library says nothing in the binary's words: no string of it names one of the binary's
/// flags. A message that needs a flag carries the data instead (an [`Error::Given`]), and
/// [`with_flags`] phrases it.
#[cfg(test)]
mod no_flag_in_the_library {
    use clap::CommandFactory as _;
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    /// Every long flag of `command` and its subcommands, `--` included.
    fn flags(command: &clap::Command, out: &mut BTreeSet<String>) {
        for arg in command.get_arguments() {
            if let Some(long) = arg.get_long() {
                out.insert(format!("--{long}"));
            }
        }
        for sub in command.get_subcommands() {
            flags(sub, out);
        }
    }

    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() && path.file_name().is_some_and(|n| n != "bin") {
                sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs")
                && !path
                    .file_stem()
                    .is_some_and(|s| s == "tests" || s.to_string_lossy().ends_with("_tests"))
            {
                out.push(path);
            }
        }
    }

    /// Each of `known`'s flags that `code` names outside its comments and unit tests, with its
    /// line. A literal that is a flag alone (`"--name-only"`) is an argument given to another
    /// program (git), not a message, and is passed over.
    fn named_flags(code: &str, known: &BTreeSet<String>) -> Vec<(usize, String)> {
        let code = match code.find("#[cfg(test)]\nmod ") {
            Some(at) => &code[..at],
            None => code,
        };
        let mut out = Vec::new();
        for (number, line) in code.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            let mut at = 0;
            while let Some(found) = line[at..].find("--") {
                let start = at + found;
                let end = line[start + 2..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                    .map_or(line.len(), |e| start + 2 + e);
                let word = &line[start..end];
                let alone = line[..start].ends_with('"') && line[end..].starts_with('"');
                if known.contains(word) && !alone {
                    out.push((number + 1, word.to_owned()));
                }
                at = end.max(start + 2);
            }
        }
        out
    }

    #[test]
    fn the_scan_finds_a_flag_in_a_message_and_passes_over_an_argument() {
        let known: BTreeSet<String> = ["--move".to_owned(), "--quiet".to_owned()].into();
        let code = "fn f() {\n    // `--move` in a comment\n    git(&[\"--quiet\"]);\n    \
                    say(\"held (`--move web` \\\n     sends it)\");\n    say(\"a\\\n  \
                    --move b\");\n}\n#[cfg(test)]\nmod tests {\n    \"--move\";\n}\n";
        assert_eq!(
            named_flags(code, &known),
            vec![(4, "--move".to_owned()), (7, "--move".to_owned())]
        );
    }

    #[test]
    fn no_message_of_the_library_names_a_flag_of_the_binary() {
        let mut known = BTreeSet::new();
        flags(&crate::Cli::command(), &mut known);
        assert!(
            known.contains("--bus") && known.contains("--move"),
            "{known:?}"
        );
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        assert!(files.len() > 50, "{files:?}");
        let mut found = Vec::new();
        for file in files {
            let code = std::fs::read_to_string(&file).unwrap();
            for (line, word) in named_flags(&code, &known) {
                found.push(format!("{}:{line}: {word}", file.display()));
            }
        }
        assert!(
            found.is_empty(),
            "the library names the binary's flags; give the data and phrase it in the \
             binary:\n{}",
            found.join("\n")
        );
    }
}
