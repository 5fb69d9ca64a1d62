//! What the daemon writes to its log when the log is a file (a journal, a collector): plain
//! text, no terminal colour codes.

mod common;

use std::time::Duration;

use common::{DaemonProcess, NatsServer, Scratch, TestClient};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_written_to_a_file_has_no_colour_codes() {
    let server = NatsServer::start();
    let scratch = Scratch::new();
    let client = TestClient::connect(&server).await;
    let process = DaemonProcess::start(&server, &scratch);
    client.wait_for_command_stream().await;
    client.barrier("acme").await;
    let log_path = process.log.clone();
    process.signal(libc::SIGTERM);
    assert!(process.wait_exit(Duration::from_secs(10)).await.success());

    let log = std::fs::read_to_string(log_path).unwrap();
    assert!(log.contains("timer-service running"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "escape sequences in a log file: {log}"
    );
}
