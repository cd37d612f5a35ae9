//! Progress as the binary prints it: lines, and on a terminal a bar per rollout.

use crate::Output;

/// Progress lines as the binary prints them: on standard output for text, on standard error
/// when standard output carries JSON. On a terminal (standard error, text output, `NO_COLOR`
/// unset or not), a rollout also draws a bar on standard error: the plan and module, nodes
/// applied of all, and the machine awaited while it goes first, with the time it has taken.
pub struct Lines {
    to_stderr: bool,
    /// The bar of the module rolling out, when a bar is drawn.
    bar: Option<std::sync::Mutex<Option<(String, indicatif::ProgressBar)>>>,
}

impl Lines {
    pub fn new(output: Output) -> Lines {
        use std::io::IsTerminal as _;
        let drawn = output == Output::Text && std::io::stderr().is_terminal();
        Lines {
            to_stderr: output == Output::Json,
            bar: drawn.then(|| std::sync::Mutex::new(None)),
        }
    }
}

impl mesh_controller::Progress for Lines {
    fn line(&self, text: &str) {
        if let Some(bar) = &self.bar {
            if let Some((_, bar)) = bar.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                bar.suspend(|| println!("{text}"));
                return;
            }
        }
        if self.to_stderr {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }

    fn rollout(&self, at: &mesh_controller::RolloutProgress) {
        let Some(slot) = &self.bar else {
            return;
        };
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        let key = format!("{} {}", at.plan, at.module);
        if slot.as_ref().is_none_or(|(k, _)| *k != key) {
            if let Some((_, old)) = slot.take() {
                old.finish_and_clear();
            }
            let bar = indicatif::ProgressBar::with_draw_target(
                Some(at.total as u64),
                indicatif::ProgressDrawTarget::stderr(),
            );
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {pos}/{len} applied {msg} ({elapsed})",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar.set_prefix(if at.module.is_empty() {
                format!("{}: nodes", at.plan)
            } else {
                format!("{} `{}`", at.plan, at.module)
            });
            bar.enable_steady_tick(std::time::Duration::from_millis(500));
            *slot = Some((key, bar));
        }
        let Some((_, bar)) = slot.as_ref() else {
            return;
        };
        bar.set_length(at.total as u64);
        bar.set_position(at.applied as u64);
        let mut message = match &at.waiting_on {
            Some(node) => format!("waiting on `{node}`, going first"),
            None if at.in_flight > 0 && at.module.is_empty() => {
                format!("{} not yet heard", at.in_flight)
            }
            None if at.in_flight > 0 => format!("{} in flight", at.in_flight),
            None => String::new(),
        };
        if at.held > 0 {
            message.push_str(&format!(", {} held for a move", at.held));
        }
        bar.set_message(message);
        if matches!(at.stage, "done" | "stopped" | "held") {
            if let Some((_, bar)) = slot.take() {
                bar.finish_and_clear();
            }
        }
    }
}
