//! `cargo xtask integ`: the integration suite on real AWS-compatible endpoints.
//!
//! Without `AWS_ENDPOINT_URL`, installs kinesis-local and moto under `target/emulators/` if
//! missing, starts them on free ports of 127.0.0.1, runs every integration test target of the
//! `kinesis-integ` package with `AWS_ENDPOINT_URL_KINESIS` and `AWS_ENDPOINT_URL_DYNAMODB`
//! set (which `aws-config` reads by itself), and stops the emulators by PID, also on failure.
//! With `AWS_ENDPOINT_URL` set (a LocalStack on :4566, say) it starts nothing and uses that.
//! Either way it installs awslabs' aws-kinesis-agg (npm) and passes its `node_modules` as
//! `KPL_AGG_NODE_PATH`, for the KPL interop tests.
//! It builds the `kinesis-broker` binary first and passes its path as `KINESIS_BROKER_BIN`,
//! for the command-line tests (`tests/cli.rs`).
//! It builds the Java KCL consumer of `tests/kcl/` with Maven for each KCL version run and
//! passes them as `KCL_CONSUMERS` (or, without Java and Maven, says so loudly and passes the
//! reason as `KCL_CONSUMERS_SKIPPED`), for the import tests (`tests/kcl_import.rs`).
//! Extra arguments are passed to the test binaries (a name filter, `--nocapture`).
//!
//! Everything is built with the feature set of `cargo test --workspace --all-features` (what
//! `.ci/run` builds first), so only the integration targets compile again, and the test
//! binaries run side by side (see `integ_run`): they wait on leases and emulators far more than
//! they compute.

use crate::{emulators, integ_run, kcl};

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut endpoints = Vec::new();
    // Kept alive until the tests end; dropping them stops the emulators.
    let mut running = Vec::new();
    if let Ok(url) = std::env::var("AWS_ENDPOINT_URL") {
        eprintln!("xtask: AWS_ENDPOINT_URL={url}: using it, starting nothing");
    } else {
        emulators::install()?;
        let kinesis = emulators::start_kinesis()?;
        endpoints.push(("AWS_ENDPOINT_URL_KINESIS", kinesis.endpoint.clone()));
        running.push(kinesis);
        let moto = emulators::start_moto()?;
        endpoints.push(("AWS_ENDPOINT_URL_DYNAMODB", moto.endpoint.clone()));
        running.push(moto);
    }
    // The KPL interop tests need awslabs' codec whichever endpoints are used.
    emulators::install_kinesis_agg()?;
    endpoints.push((
        "KPL_AGG_NODE_PATH",
        emulators::kinesis_agg_node_path().display().to_string(),
    ));
    // The import tests run the real KCL, built here.
    let consumers = kcl::build()?;
    let (var, value) = consumers.env();
    endpoints.push((var, value));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let targets = integ_run::targets()?;
    let built = integ_run::build(&cargo, &targets)?;
    // The command-line tests run the `kinesis-broker` binary as a process.
    endpoints.push(("KINESIS_BROKER_BIN", built.cli.display().to_string()));
    for (var, default) in [
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "000000000000"),
        ("AWS_SECRET_ACCESS_KEY", "integ-secret"),
    ] {
        if std::env::var_os(var).is_none() {
            endpoints.push((var, default.to_owned()));
        }
    }
    let outcome = integ_run::run_all(&built.tests, args, &endpoints);
    drop(running);
    outcome
}
