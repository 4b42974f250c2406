//! The binary's usage errors come before the AWS configuration is read: run with no region
//! anywhere (no environment variable, no profile file, no instance metadata), a command line
//! that is wrong without any I/O says what is wrong with it, not that no region is set.

use std::process::{Command, Output};

/// `kinesis-broker args..` with no AWS region configured anywhere.
fn without_a_region(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kinesis-broker"))
        .args(args)
        .env_remove("AWS_REGION")
        .env_remove("AWS_DEFAULT_REGION")
        .env_remove("AWS_PROFILE")
        .env("AWS_CONFIG_FILE", "/nonexistent/aws-config")
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            "/nonexistent/aws-credentials",
        )
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .expect("run kinesis-broker")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn usage_errors_needing_no_io_are_reported_before_the_missing_region() {
    for (args, says) in [
        (
            &[
                "reset",
                "--table",
                "t",
                "--stream",
                "s",
                "--all",
                "--to",
                "after-sequence=5",
            ][..],
            "name it with --shard",
        ),
        (
            &[
                "release", "--table", "t", "--stream", "s", "--shard", "*epoch",
            ],
            "one of the table's own rows",
        ),
        (
            &[
                "reset", "--table", "t", "--stream", "s", "--shard", "*", "--to", "latest",
            ],
            "one of the table's own rows",
        ),
    ] {
        let out = without_a_region(args);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {text}");
        assert!(text.contains(says), "{args:?}: {text}");
        assert!(!text.contains("region"), "{args:?}: {text}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn a_valid_command_line_without_a_region_is_refused_naming_the_region() {
    // Control: with nothing wrong in it, the missing region is what is reported.
    for args in [
        &["leases", "--table", "t", "--stream", "s"][..],
        &[
            "reset", "--table", "t", "--stream", "s", "--shard", "x", "--to", "latest",
        ],
    ] {
        let out = without_a_region(args);
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {text}");
        assert!(
            text.contains("no AWS region configured"),
            "{args:?}: {text}"
        );
    }
}
