//! `lace-control`: lace's node control plane (see `lace_control::daemon`).

use clap::Parser;
use lace_control::daemon::config::{Cli, Command, RunConfig};
use lace_control::daemon::{status_report, Daemon};

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run(args) => {
            let cfg = match RunConfig::from_args(&args) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("lace-control: {e}");
                    std::process::exit(2);
                }
            };
            tracing_subscriber::fmt()
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
                )
                .with_writer(std::io::stderr)
                .init();
            match Daemon::open(cfg).and_then(|d| d.run()) {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("lace-control: {e}");
                    1
                }
            }
        }
        Command::Status(args) => match args.paths() {
            Err(e) => {
                eprintln!("lace-control: {e}");
                2
            }
            Ok(paths) => match status_report(&paths) {
                Ok(text) => {
                    print!("{text}");
                    0
                }
                Err(e) => {
                    eprintln!("lace-control: {e}");
                    1
                }
            },
        },
    };
    std::process::exit(code);
}
