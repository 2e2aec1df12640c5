//! What gpfarm's binaries write on stderr besides their own output: `tracing` logs, coloured only
//! on a terminal, and a failure as one line. Shared by `gpfarm`, `gpfarmd` and
//! `gpfarm-gpu-worker`; it must never decide exit codes or print anything on stdout.

use std::io::IsTerminal;

/// Sends `tracing` logs at `level` (unless `RUST_LOG` says otherwise, in its `target=level`
/// directives: `RUST_LOG=debug`, `RUST_LOG=warn,gpfarm_client=debug`) to stderr, with colour
/// codes only when stderr is a terminal and `NO_COLOR` is unset: a daemon's log file or a
/// captured pipe must read as plain text.
pub fn init_logging(level: &str) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = filter(std::env::var("RUST_LOG").ok().as_deref(), level);
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour_wanted(std::io::stderr().is_terminal(), std::env::var_os("NO_COLOR")));
    let _ = tracing_subscriber::registry().with(logs).with(filter).try_init();
}

/// The filter `RUST_LOG` gives (`rust_log`), or `level` where it is unset or does not parse.
fn filter(rust_log: Option<&str>, level: &str) -> tracing_subscriber::filter::Targets {
    rust_log
        .and_then(|directives| directives.parse().ok())
        .or_else(|| level.parse().ok())
        .unwrap_or_else(|| tracing_subscriber::filter::Targets::new().with_default(tracing::Level::WARN))
}

/// Whether to colour: only on a terminal, and never when `NO_COLOR` is set to anything
/// non-empty (<https://no-color.org>).
fn colour_wanted(terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty())
}

/// `error` and its causes on one line, joined with ": ". A cause that the previous message
/// already ends with (as its last ": "-separated part) is left out, so an error that quotes its source still reads once; line
/// breaks inside one message (a compile log) stay, after that message's first line.
pub fn one_line(error: &anyhow::Error) -> String {
    join_causes(error.chain().map(ToString::to_string))
}

fn join_causes(causes: impl IntoIterator<Item = String>) -> String {
    let mut line = String::new();
    let mut previous = String::new();
    for cause in causes {
        let cause = cause.trim_end().to_owned();
        if cause.is_empty() || previous == cause || previous.ends_with(&format!(": {cause}")) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&cause);
        previous = cause;
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn join(causes: &[&str]) -> String {
        join_causes(causes.iter().map(|c| c.to_string()))
    }

    #[test]
    fn causes_are_joined_with_colons() {
        assert_eq!(
            join(&["starting farm:2", "daemon 0", "cannot start x"]),
            "starting farm:2: daemon 0: cannot start x"
        );
    }

    #[test]
    fn a_cause_the_previous_message_already_quotes_is_left_out() {
        let os = "No such file or directory (os error 2)";
        let quoted = format!("cannot start /x/gpfarmd: {os}");
        assert_eq!(join(&["daemon 1", &quoted, os]), format!("daemon 1: {quoted}"));
    }

    #[test]
    fn a_cause_that_only_ends_like_the_previous_word_stays() {
        assert_eq!(join(&["retried unit 12", "2"]), "retried unit 12: 2");
        assert_eq!(join(&["denied: reading a", "denied"]), "denied: reading a: denied");
    }

    #[test]
    fn rust_log_s_directives_filter_and_the_level_is_the_fallback() {
        use tracing::Level;
        let f = filter(Some("warn,gpfarm_client=debug"), "info");
        assert!(f.would_enable("gpfarm_client::farm", &Level::DEBUG));
        assert!(!f.would_enable("gpfarm_evolve", &Level::INFO));
        let f = filter(None, "info");
        assert!(f.would_enable("gpfarm_evolve", &Level::INFO) && !f.would_enable("x", &Level::DEBUG));
        let f = filter(Some("=="), "debug");
        assert!(f.would_enable("x", &Level::DEBUG));
    }

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour_wanted(true, None));
        assert!(colour_wanted(true, Some("".into())));
        assert!(!colour_wanted(true, Some("1".into())));
        assert!(!colour_wanted(false, None));
    }
}
