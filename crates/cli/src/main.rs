//! The `kinesis-broker` binary: parses the command line (usage errors exit 2, from clap), runs
//! it, prints an error with its causes on stderr and exits 1 or 2 (see `CliError::exit_code`).

use std::process::ExitCode;

use clap::Parser;
use kinesis_broker_cli::{run, Cli};
use kinesis_lease_core::ErrorChain;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("kinesis-broker: error: cannot start the runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr());
    match runtime.block_on(run(&cli, &mut out, &mut err)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kinesis-broker: error: {}", ErrorChain(&error));
            ExitCode::from(error.exit_code())
        }
    }
}
