//! Log output: one flag for both binaries.

use tracing_subscriber::EnvFilter;

/// Log output format (`--log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Plain,
    /// One JSON object per line, with the fields of the current span.
    Json,
}

/// Installs the global subscriber: stderr, level from `RUST_LOG` (default `info`). A
/// subscriber already installed (tests running several commands in one process) is kept.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    // An error only means a subscriber is installed already.
    let _ = match format {
        LogFormat::Plain => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn formats_parse_by_name() {
        let cases = [
            ("plain", Some(LogFormat::Plain)),
            ("json", Some(LogFormat::Json)),
            ("xml", None),
        ];
        for (text, want) in cases {
            assert_eq!(LogFormat::from_str(text, false).ok(), want, "{text}");
        }
        println!("{} log format names checked", cases.len());
    }
}
