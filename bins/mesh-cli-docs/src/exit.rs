//! The mesh's exit codes: one meaning each, the same for all three binaries, decided in one
//! place (each binary maps its outcomes to an [`Exit`]).

use std::process::ExitCode;

/// What a command's exit code says. The table, in the book and in each binary's `--help`:
/// [`EXIT_CODES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Exit {
    /// `0`: done, or settled.
    Done,
    /// `1`: an error.
    Error,
    /// `2`: refused or held: nothing changed, and a flag or a person can let it go.
    Refused,
    /// `3`: needs attention.
    Attention,
    /// `4`: in progress.
    InProgress,
    /// `64`: a usage error (EX_USAGE): the command line itself is wrong.
    Usage,
}

/// Every exit code, in order.
pub const ALL: [Exit; 6] = [
    Exit::Done,
    Exit::Error,
    Exit::Refused,
    Exit::Attention,
    Exit::InProgress,
    Exit::Usage,
];

/// The table as one paragraph, for a binary's `--help`.
pub const EXIT_CODES: &str = "Exit codes: 0 done, or settled; 1 error; 2 refused or held \
    (nothing changed; a flag or a person can let it go); 3 needs attention; 4 in progress; \
    64 usage error.";

impl Exit {
    /// The number.
    pub fn code(self) -> u8 {
        match self {
            Exit::Done => 0,
            Exit::Error => 1,
            Exit::Refused => 2,
            Exit::Attention => 3,
            Exit::InProgress => 4,
            Exit::Usage => 64,
        }
    }

    /// What it means, in words.
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Done => "done, or settled",
            Exit::Error => "error",
            Exit::Refused => {
                "refused or held: nothing changed, and a flag or a person can let it go"
            }
            Exit::Attention => "needs attention",
            Exit::InProgress => "in progress",
            Exit::Usage => "usage error",
        }
    }

    /// The exit code for a word of JSON (`"done"`, `"error"`, …).
    pub fn word(self) -> &'static str {
        match self {
            Exit::Done => "done",
            Exit::Error => "error",
            Exit::Refused => "refused",
            Exit::Attention => "attention",
            Exit::InProgress => "in-progress",
            Exit::Usage => "usage",
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

/// Parses the command line as `P`: help and version asked for print and exit 0, and a wrong
/// command line prints clap's message and exits [`Exit::Usage`] (64), where clap's own exit is 2,
/// which means "refused" here.
pub fn parse<P: clap::Parser>() -> P {
    match P::try_parse() {
        Ok(parsed) => parsed,
        Err(error) => {
            let _ = error.print();
            let exit = match error.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => {
                    Exit::Done
                }
                _ => Exit::Usage,
            };
            std::process::exit(i32::from(exit.code()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_one_meaning_and_the_help_says_each() {
        let codes: std::collections::BTreeSet<u8> = ALL.iter().map(|e| e.code()).collect();
        assert_eq!(codes.len(), ALL.len());
        for exit in ALL {
            assert!(
                EXIT_CODES.contains(&format!("{} ", exit.code())),
                "{exit:?} is not in the help's table"
            );
        }
        assert_eq!(Exit::Usage.code(), 64);
    }
}
