//! `timer-service timers …` as a person and a script use it: the real binary against a running
//! service, tables by default, the API's JSON with `--json`, errors on stderr with exit code 1.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::{NatsServer, eventually};
use serde_json::Value;

fn timers(server: &NatsServer, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_timer-service"))
        .arg("timers")
        .args(["--server", &server.url()])
        .args(args)
        .output()
        .expect("run timer-service timers")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn json(output: &Output) -> Value {
    serde_json::from_str(&stdout(output)).expect("JSON on stdout")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_get_list_cancel_and_stats_from_the_command_line() {
    let (server, _scratch, daemon, client) = common::started().await;
    let scheduled = stdout(&timers(
        &server,
        &[
            "schedule",
            "--tenant",
            "acme",
            "--id",
            "cli-1",
            "--in",
            "1h",
            "--correlation-id",
            "req-cli",
        ],
    ));
    assert!(scheduled.contains("scheduled acme/cli-1"), "{scheduled}");
    timers(
        &server,
        &[
            "schedule",
            "--tenant",
            "acme",
            "--id",
            "cli-2",
            "--at",
            "2030-01-01T00:00:00Z",
        ],
    );
    eventually(
        Duration::from_secs(15),
        "the CLI's timers to be stored",
        || async {
            let output = timers(
                &server,
                &["--json", "get", "--tenant", "acme", "--id", "cli-2"],
            );
            output.status.success().then(|| json(&output))
        },
    )
    .await;

    let got = json(&timers(
        &server,
        &["--json", "get", "--tenant", "acme", "--id", "cli-1"],
    ));
    assert_eq!(got["timer"]["correlationId"], "req-cli");
    assert_eq!(got["timer"]["state"], "Scheduled");
    let table = stdout(&timers(&server, &["list", "--tenant", "acme"]));
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("DUE AT"),
        "{table}"
    );
    assert!(
        lines[1].starts_with("cli-1") && lines[2].starts_with("cli-2"),
        "{table}"
    );
    assert!(table.contains("(2 timers)"), "{table}");
    let page = json(&timers(
        &server,
        &["--json", "list", "--tenant", "acme", "--limit", "1"],
    ));
    assert_eq!(page["timers"].as_array().unwrap().len(), 1);
    let next = page["next"].as_str().unwrap().to_owned();
    let rest = json(&timers(
        &server,
        &["--json", "list", "--tenant", "acme", "--after", &next],
    ));
    assert_eq!(rest["timers"][0]["serviceCallId"], "cli-2");

    let cancelled = stdout(&timers(
        &server,
        &["cancel", "--tenant", "acme", "--id", "cli-1"],
    ));
    assert!(
        cancelled.starts_with("acme/cli-1: cancelled"),
        "{cancelled}"
    );
    let again = json(&timers(
        &server,
        &["--json", "cancel", "--tenant", "acme", "--id", "cli-1"],
    ));
    assert_eq!(again["outcome"], "already_cancelled");
    let stats = json(&timers(&server, &["--json", "stats", "--tenant", "acme"]));
    assert_eq!(stats["scheduled"], 1);
    assert_eq!(stats["nextDueAt"], "2030-01-01T00:00:00.000Z");

    let missing = timers(&server, &["get", "--tenant", "globex", "--id", "cli-1"]);
    assert_eq!(missing.status.code(), Some(1));
    let error = String::from_utf8_lossy(&missing.stderr);
    assert!(error.contains("404") && error.contains("cli-1"), "{error}");
    let bad = timers(&server, &["list", "--tenant", "acme", "--state", "Fired"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("400"));
    drop(client);
    daemon.shutdown().await.unwrap();
}

const PASSWORD: &str = "Cli-Pw-3n8Rw2";

/// The CLI takes its password from the environment, under the names the daemon reads, so that
/// it never has to be on a command line (which `ps` shows to every user); `--help` names the
/// variable but not its value. Credentials written in `--server` work too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_comes_from_the_environment() {
    let server = NatsServer::start_with_config(|port, store| {
        format!(
            r#"
listen: "127.0.0.1:{port}"
jetstream {{ store_dir: "{store}" }}
authorization {{ users = [ {{ user: svc, password: "{PASSWORD}" }} ] }}
"#,
            store = store.display()
        )
    });
    let scratch = common::Scratch::new();
    let mut config = common::config(&server, &scratch);
    config.nats.user = Some("svc".into());
    config.nats.password = Some(PASSWORD.into());
    let daemon = timer_service::Daemon::start(config).await.unwrap();
    let stats = |server_url: &str, env: &[(&str, &str)]| {
        Command::new(env!("CARGO_BIN_EXE_timer-service"))
            .args(["timers", "--server", server_url])
            .args(["--json", "stats", "--tenant", "acme"])
            .env_remove("TIMER_NATS_USER")
            .env_remove("TIMER_NATS_PASSWORD")
            .envs(env.iter().copied())
            .output()
            .expect("run timer-service timers")
    };
    let env = [
        ("TIMER_NATS_USER", "svc"),
        ("TIMER_NATS_PASSWORD", PASSWORD),
    ];
    let reply = eventually(
        Duration::from_secs(15),
        "the stats, as svc from the environment",
        || async {
            let output = stats(&server.url(), &env);
            output.status.success().then(|| json(&output))
        },
    )
    .await;
    assert_eq!(reply["scheduled"], 0);
    let in_url = format!("nats://svc:{PASSWORD}@127.0.0.1:{}", server.port);
    assert!(stats(&in_url, &[]).status.success());

    let refused = stats(&server.url(), &[]);
    assert_eq!(refused.status.code(), Some(1));
    let error = String::from_utf8_lossy(&refused.stderr).to_ascii_lowercase();
    assert!(error.contains("authorization"), "{error}");
    let wrong = stats(&in_url.replace(PASSWORD, "guess"), &[]);
    assert_eq!(wrong.status.code(), Some(1));
    assert!(!String::from_utf8_lossy(&wrong.stderr).contains("guess"));

    let help = Command::new(env!("CARGO_BIN_EXE_timer-service"))
        .args(["timers", "--help"])
        .envs(env)
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("TIMER_NATS_PASSWORD"), "{help}");
    assert!(!help.contains(PASSWORD), "{help}");
    daemon.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_explains_itself_and_fails_fast_without_a_service() {
    let help = Command::new(env!("CARGO_BIN_EXE_timer-service"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for word in ["run", "migrate", "timers", "backup"] {
        assert!(help.contains(word), "{help}");
    }
    let help = Command::new(env!("CARGO_BIN_EXE_timer-service"))
        .args(["timers", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for word in [
        "schedule",
        "schedule-many",
        "get",
        "list",
        "cancel",
        "stats",
        "--json",
    ] {
        assert!(help.contains(word), "{help}");
    }
    // A broker but no service behind it: a clear error, at once.
    let server = NatsServer::start();
    let started = std::time::Instant::now();
    let output = timers(&server, &["stats", "--tenant", "acme"]);
    assert_eq!(output.status.code(), Some(1));
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("no timer-service answers"), "{error}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// `schedule-many` publishes a file of timers as ScheduleTimers messages the service accepts
/// whole: cut to the message size, a key met again in a later message (the newer command), a
/// bad line refused before anything is published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schedule_many_publishes_a_file_of_timers() {
    let (server, scratch, daemon, client) = common::started().await;
    let line = |id: &str, due: &str| format!(r#"{{"serviceCallId":"{id}","dueAt":"{due}"}}"#);
    let mut file: Vec<String> = (0..2_000)
        .map(|i| line(&format!("bulk-{i}"), "2030-01-01T00:00:00Z"))
        .collect();
    file.push(line("bulk-5", "2031-06-01T00:00:00Z"));
    let path = scratch.dir.path().join("timers.jsonl");
    std::fs::write(&path, file.join("\n")).unwrap();

    let reply = json(&timers(
        &server,
        &[
            "--json",
            "schedule-many",
            "--tenant",
            "acme",
            "--file",
            path.to_str().unwrap(),
        ],
    ));
    assert_eq!(reply["count"], 2_001);
    let messages = reply["messages"].as_array().unwrap();
    assert!(
        messages.len() >= 3,
        "64 KiB holds under 1,000 of these: {reply}"
    );
    let stats = eventually(
        Duration::from_secs(30),
        "the file's timers stored",
        || async {
            let stats = json(&timers(&server, &["--json", "stats", "--tenant", "acme"]));
            (stats["scheduled"] == 2_000).then_some(stats)
        },
    )
    .await;
    assert_eq!(stats["nextDueAt"], "2030-01-01T00:00:00.000Z");
    let later = eventually(Duration::from_secs(15), "the key met again", || async {
        let got = json(&timers(
            &server,
            &["--json", "get", "--tenant", "acme", "--id", "bulk-5"],
        ));
        (got["timer"]["dueAt"] == "2031-06-01T00:00:00.000Z").then_some(got)
    })
    .await;
    assert_eq!(later["timer"]["state"], "Scheduled");

    let last_sequence = || async {
        let mut stream = client.js.get_stream("TIMER_COMMANDS").await.unwrap();
        stream.info().await.unwrap().state.last_sequence
    };
    let before = last_sequence().await;
    let mut bad = Command::new(env!("CARGO_BIN_EXE_timer-service"))
        .args(["timers", "--server", &server.url()])
        .args(["schedule-many", "--tenant", "globex", "--file", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = bad.stdin.take().unwrap();
        writeln!(stdin, "{}", line("g-1", "2030-01-01T00:00:00Z")).unwrap();
        writeln!(
            stdin,
            r#"{{"serviceCallId":"g-2","due_at":"2030-01-01T00:00:00Z"}}"#
        )
        .unwrap();
    }
    let bad = bad.wait_with_output().unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let error = String::from_utf8_lossy(&bad.stderr);
    assert!(
        error.contains("line 2: unknown field \"due_at\""),
        "{error}"
    );
    assert_eq!(
        last_sequence().await,
        before,
        "nothing of a bad file is published"
    );
    drop(client);
    daemon.shutdown().await.unwrap();
}
