//! `PROSODY_*` variables that are no option: `build()` logs a warning for
//! each, once per process, however many clients are built. The variables
//! are set on a child process (this test, run again), which builds two
//! clients and logs to its standard output.

#![allow(clippy::expect_used, reason = "test code fails loudly")]

use prosody::ProsodyClient;
use std::process::Command;

/// Set on the child run.
const CHILD: &str = "PROSODY_TEST_VARIABLES_CHILD";
const TEST: &str = "variables::each_unknown_variable_is_warned_of_once_per_process";

#[tokio::test]
async fn each_unknown_variable_is_warned_of_once_per_process() {
    if std::env::var_os(CHILD).is_some() {
        return build_two_clients().await;
    }
    let output = Command::new(std::env::current_exe().expect("this test"))
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("PROSODY_DEFER_SEEK_TIMEOUT", "30s")
        .env("PROSODY_MAX_CONCURENCY", "4")
        .env("PROSODY_LOG", "info")
        .output()
        .expect("the child runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    let warnings: Vec<&str> = stdout.lines().filter(|l| l.contains(" WARN ")).collect();
    let about = |variable: &str| {
        warnings
            .iter()
            .filter(|line| line.contains(&format!("{variable} is not")))
            .count()
    };
    assert_eq!(about("PROSODY_DEFER_SEEK_TIMEOUT"), 1, "{stdout}");
    assert_eq!(about("PROSODY_MAX_CONCURENCY"), 1, "{stdout}");
    assert!(
        stdout.contains("renamed to the option loader_seek_timeout (PROSODY_LOADER_SEEK_TIMEOUT)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("did you mean max_concurrency (PROSODY_MAX_CONCURRENCY)?"),
        "{stdout}"
    );
    assert_eq!(about("PROSODY_LOG"), 0, "{stdout}");
    assert_eq!(about(CHILD), 0, "{stdout}");
}

/// The child: logs to standard output, builds two clients.
async fn build_two_clients() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stdout)
        .with_ansi(false)
        .try_init()
        .expect("the child's subscriber");
    for group in ["first", "second"] {
        let client = ProsodyClient::builder()
            .mock(true)
            .group_id(group)
            .build()
            .await
            .expect("a client");
        client.shutdown().await;
    }
}
