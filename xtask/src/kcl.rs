//! Building the Java KCL consumer of `tests/kcl/` with Maven, once per KCL version the suite
//! runs, into `target/kcl/<version>/` (the jar and its `lib/`), for `tests/kcl_import.rs`.
//!
//! Maven resolves the KCL and its dependencies from Maven Central into `~/.m2` (the first
//! build downloads about 130 jars; later ones are offline). A build is skipped when its jar
//! is newer than the consumer's sources. Without Java 17+ and Maven the real-KCL tests cannot
//! run: that is said loudly, and the tests are told why (`KCL_CONSUMERS_SKIPPED`), so they
//! print it instead of passing empty.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use crate::{root, target_dir};

/// The KCL versions the suite runs: the newest 3.x and the last 2.x on Maven Central.
pub(crate) const VERSIONS: [&str; 2] = ["3.5.1", "2.7.2"];

/// What the integration tests get: `KCL_CONSUMERS=version=dir,..` or the reason there is none.
pub(crate) enum Consumers {
    /// Built: each version with the directory holding `kcl-consumer-0.1.0.jar` and `lib/`.
    Built(Vec<(&'static str, PathBuf)>),
    /// Not buildable here, and why.
    Unavailable(String),
}

impl Consumers {
    /// The variable to pass to the tests.
    pub(crate) fn env(&self) -> (&'static str, String) {
        match self {
            Consumers::Built(built) => (
                "KCL_CONSUMERS",
                built
                    .iter()
                    .map(|(v, dir)| format!("{v}={}", dir.display()))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            Consumers::Unavailable(why) => ("KCL_CONSUMERS_SKIPPED", why.clone()),
        }
    }
}

fn works(program: &str, arg: &str) -> bool {
    Command::new(program)
        .arg(arg)
        .output()
        .is_ok_and(|out| out.status.success())
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Builds the consumer for every version in [`VERSIONS`] (a failed build is an error: Java
/// and Maven are there, so the KCL must run).
pub(crate) fn build() -> Result<Consumers, String> {
    if !works("java", "-version") || !works("mvn", "-v") {
        let why = "Java (17+) and Maven are needed to build the real-KCL consumer of tests/kcl \
                   (apt-get install openjdk-17-jdk-headless maven)"
            .to_owned();
        eprintln!("xtask: ================================================================");
        eprintln!("xtask: SKIPPING the real-KCL import tests: {why}");
        eprintln!("xtask: ================================================================");
        return Ok(Consumers::Unavailable(why));
    }
    let project = root().join("tests").join("kcl");
    let pom = project.join("pom.xml");
    let source = project.join("src/main/java/kinesisbroker/kcl/KclConsumer.java");
    let newest_source = [modified(&pom), modified(&source)]
        .into_iter()
        .flatten()
        .max();
    let mut built = Vec::new();
    for version in VERSIONS {
        let out = target_dir().join("kcl").join(version);
        let jar = out.join("kcl-consumer-0.1.0.jar");
        let fresh = match (modified(&jar), newest_source) {
            (Some(jar), Some(src)) => jar > src && out.join("lib").is_dir(),
            _ => false,
        };
        if !fresh {
            eprintln!(
                "xtask: building the KCL {version} consumer with Maven into {}",
                out.display()
            );
            let status = Command::new("mvn")
                .args(["-B", "-q", "-f"])
                .arg(&pom)
                .arg(format!("-Dkcl.version={version}"))
                .arg(format!("-Dkcl.out={}", out.display()))
                .arg("package")
                .status()
                .map_err(|e| format!("cannot run mvn: {e}"))?;
            if !status.success() {
                return Err(format!(
                    "building the KCL {version} consumer failed ({status}): mvn -f {} -Dkcl.version={version} package",
                    pom.display()
                ));
            }
        }
        built.push((version, out));
    }
    Ok(Consumers::Built(built))
}
