//! Shell completions and manual pages for a binary's command line, made from its `clap`
//! definition (`clap_complete`, `clap_mangen`): the binaries' `completions SHELL` and `man`
//! commands; and the exit codes ([`exit`]). Shared by the three binaries, so each says the same.

pub mod exit;

use std::io::Write;
use std::path::Path;

/// Prints `command`'s completions for `shell` on standard output.
///
/// # Errors
/// Standard output cannot be written (a reader that closed it early is not an error).
pub fn print_completions(
    shell: clap_complete::Shell,
    mut command: clap::Command,
) -> std::io::Result<()> {
    let name = command.get_name().to_owned();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, name, &mut script);
    print_all(&script)
}

/// Writes `bytes` to standard output; a reader that stopped reading (`… | head`) is fine.
fn print_all(bytes: &[u8]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        done => done,
    }
}

/// Prints `command`'s manual page (roff) on standard output, or with `dir` writes one page per
/// command and subcommand there (`NAME.1`, `NAME-SUB.1`, …) and lists them.
///
/// # Errors
/// Standard output or a page cannot be written.
pub fn man(command: clap::Command, dir: Option<&Path>) -> std::io::Result<()> {
    let Some(dir) = dir else {
        let mut page = Vec::new();
        clap_mangen::Man::new(command).render(&mut page)?;
        return print_all(&page);
    };
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(command, dir)?;
    let mut pages: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.path().display().to_string())
        .filter(|path| path.ends_with(".1"))
        .collect();
    pages.sort();
    let listing: String = pages.iter().map(|page| format!("{page}\n")).collect();
    print_all(listing.as_bytes())
}
