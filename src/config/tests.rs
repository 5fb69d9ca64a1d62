use super::*;
use figment::Jail;

/// A config file (if any), environment variables, and words the error must contain.
type Case<'a> = (Option<&'a str>, &'a [(&'a str, &'a str)], &'a [&'a str]);

fn load_in(jail: &Jail) -> Result<Config, String> {
    Config::load(&jail.directory().join("config.toml"))
        .map(|loaded| loaded.config)
        .map_err(|e| e.to_string())
}

/// Loads each case in a jail of its own and checks that the error names every expected word.
fn expect_errors(cases: &[Case]) {
    for (file, env, expected) in cases {
        Jail::expect_with(|jail| {
            if let Some(text) = file {
                jail.create_file("config.toml", text)?;
            }
            for (key, value) in *env {
                jail.set_env(key, value);
            }
            let error = load_in(jail).unwrap_err();
            for word in *expected {
                assert!(error.contains(word), "{word:?} missing in: {error}");
            }
            Ok(())
        });
    }
}

/// What Kubernetes puts in the environment of every pod next to a Service named `timer` (one
/// port, named `nats`) and one named `timer-http`.
const KUBERNETES_SERVICE_VARIABLES: &[(&str, &str)] = &[
    ("TIMER_SERVICE_HOST", "10.96.0.12"),
    ("TIMER_SERVICE_PORT", "4222"),
    ("TIMER_SERVICE_PORT_NATS", "4222"),
    ("TIMER_PORT", "tcp://10.96.0.12:4222"),
    ("TIMER_PORT_4222_TCP", "tcp://10.96.0.12:4222"),
    ("TIMER_PORT_4222_TCP_PROTO", "tcp"),
    ("TIMER_PORT_4222_TCP_PORT", "4222"),
    ("TIMER_PORT_4222_TCP_ADDR", "10.96.0.12"),
    ("TIMER_HTTP_SERVICE_HOST", "10.96.0.13"),
    ("TIMER_HTTP_SERVICE_PORT", "9464"),
    ("TIMER_HTTP_PORT", "tcp://10.96.0.13:9464"),
    ("TIMER_HTTP_PORT_9464_TCP", "tcp://10.96.0.13:9464"),
    ("TIMER_HTTP_PORT_9464_TCP_PROTO", "tcp"),
    ("TIMER_HTTP_PORT_9464_TCP_PORT", "9464"),
    ("TIMER_HTTP_PORT_9464_TCP_ADDR", "10.96.0.13"),
];

/// Kubernetes' service links change no setting and are ignored without a word; any other
/// unknown `TIMER_*` variable, even one named like a link but not written as one, is ignored
/// and reported by name.
#[test]
fn unknown_environment_variables_are_ignored_and_reported_by_name_except_service_links() {
    Jail::expect_with(|jail| {
        for (key, value) in KUBERNETES_SERVICE_VARIABLES {
            jail.set_env(key, value);
        }
        jail.set_env("TIMER_NATS_COLOUR", "blue");
        jail.set_env("TIMER_SERVICE_PORT_METRICS", "metrics");
        jail.set_env("TIMER_BATCH_SIZE", "9");
        let loaded = Config::load(&jail.directory().join("config.toml")).unwrap();
        let expected = Config {
            batch_size: 9,
            ..Config::default()
        };
        assert_eq!(loaded.config, expected);
        let mut names: Vec<String> = loaded
            .warnings
            .iter()
            .map(|w| match w {
                ConfigWarning::UnknownVariable(name) => name.clone(),
            })
            .collect();
        names.sort();
        assert_eq!(names, ["TIMER_NATS_COLOUR", "TIMER_SERVICE_PORT_METRICS"]);
        Ok(())
    });
}

#[test]
fn unknown_variables_beside_an_unknown_file_key_or_a_bad_value_still_fail() {
    let cases: &[Case] = &[
        (
            Some("[nats]\ncolour = \"blue\""),
            KUBERNETES_SERVICE_VARIABLES,
            &["nats.colour", "config.toml"],
        ),
        (
            None,
            &[
                ("TIMER_SERVICE_HOST", "10.96.0.12"),
                ("TIMER_BATCH_SIZE", "lots"),
            ],
            &["batch_size", "TIMER_BATCH_SIZE"],
        ),
    ];
    expect_errors(cases);
}

#[test]
fn missing_file_means_defaults() {
    Jail::expect_with(|jail| {
        assert_eq!(load_in(jail).unwrap(), Config::default());
        Ok(())
    });
}

#[test]
fn the_shipped_config_file_parses_to_the_defaults() {
    Jail::expect_with(|jail| {
        jail.create_file("config.toml", include_str!("../../config.toml"))?;
        assert_eq!(load_in(jail).unwrap(), Config::default());
        Ok(())
    });
}

#[test]
fn every_key_can_be_set_by_environment_over_the_file() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "config.toml",
            "batch_size = 7\npolling_interval = 1000\n[http]\nlisten = \"0.0.0.0:1\"\n",
        )?;
        jail.set_env("TIMER_BATCH_SIZE", "9");
        jail.set_env("TIMER_POLLING_INTERVAL", "250");
        jail.set_env("TIMER_DB_PATH", "/tmp/x.db");
        jail.set_env("TIMER_BROKER_URL", "nats://10.0.0.1:4222");
        jail.set_env("TIMER_HTTP_LISTEN", "127.0.0.1:9999");
        jail.set_env("TIMER_NATS_COMMAND_STREAM", "CMDS");
        jail.set_env("TIMER_RETENTION_KEEP_FINISHED", "2d");
        jail.set_env("TIMER_SUPERVISOR_MAX_BACKOFF", "7s");
        jail.set_env("TIMER_CLAIM_LEASE", "45s");
        let config = load_in(jail).unwrap();
        assert_eq!(config.batch_size, 9);
        assert_eq!(config.polling_interval, Duration::from_millis(250));
        assert_eq!(config.db_path, PathBuf::from("/tmp/x.db"));
        assert_eq!(config.broker_url, "nats://10.0.0.1:4222");
        assert_eq!(config.http.listen, "127.0.0.1:9999");
        assert_eq!(config.nats.command_stream, "CMDS");
        assert_eq!(
            config.retention.keep_finished,
            Duration::from_secs(2 * 86400)
        );
        assert_eq!(config.supervisor.max_backoff, Duration::from_secs(7));
        assert_eq!(config.claim_lease, Duration::from_secs(45));
        Ok(())
    });
}

#[test]
fn a_logged_config_shows_no_secret() {
    Jail::expect_with(|jail| {
        jail.set_env("TIMER_BROKER_URL", "nats://svc:url-secret@nats:4222");
        jail.set_env(
            "TIMER_DATABASE_URL",
            "postgres://app:pg-secret@db/timers?password=pg-query-secret",
        );
        jail.set_env("TIMER_NATS_USER", "svc");
        // All digits, a leading zero: read as the text it is, not as a number.
        jail.set_env("TIMER_NATS_PASSWORD", "0123456789");
        let config = load_in(jail).unwrap();
        assert_eq!(
            config.nats.password.as_ref().map(Secret::expose),
            Some("0123456789")
        );
        let shown = format!("{config:?}");
        for secret in ["url-secret", "pg-secret", "pg-query-secret", "0123456789"] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        assert!(shown.contains("nats://svc:***@nats:4222"), "{shown}");
        Ok(())
    });
    Jail::expect_with(|jail| {
        jail.set_env("TIMER_NATS_TOKEN", "token-secret");
        let shown = format!("{:?}", load_in(jail).unwrap());
        assert!(!shown.contains("token-secret"), "{shown}");
        Ok(())
    });
}

#[test]
fn a_password_that_is_no_string_is_refused_without_being_shown() {
    Jail::expect_with(|jail| {
        jail.create_file("config.toml", "[nats]\nuser = \"svc\"\npassword = 80211\n")?;
        let error = load_in(jail).unwrap_err();
        assert!(error.contains("nats.password"), "{error}");
        assert!(!error.contains("80211"), "{error}");
        Ok(())
    });
}

#[test]
fn durations_read_as_text_or_milliseconds_and_the_old_ms_keys_still_work() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "config.toml",
            "polling_interval = \"2s\"\n[supervisor]\nrestart_window_ms = 1500\n[retention]\nkeep_finished = \"0\"\n[sqlite]\nbusy_timeout_ms = 250\n",
        )?;
        let config = load_in(jail).unwrap();
        assert_eq!(config.polling_interval, Duration::from_secs(2));
        assert_eq!(
            config.supervisor.restart_window,
            Duration::from_millis(1500)
        );
        assert_eq!(config.retention.keep_finished, Duration::ZERO);
        assert_eq!(config.sqlite.busy_timeout, Duration::from_millis(250));
        Ok(())
    });
}

#[test]
fn a_bad_value_or_unknown_key_names_the_key_and_its_source() {
    let cases: &[Case] = &[
        (
            None,
            &[("TIMER_BATCH_SIZE", "lots")],
            &["batch_size", "TIMER_BATCH_SIZE"],
        ),
        (Some("batch_size = 0"), &[], &["batch_size", "config.toml"]),
        (
            None,
            &[("TIMER_BATCH_SIZE", "0")],
            &["batch_size", "TIMER_BATCH_SIZE"],
        ),
        (
            Some("polling_interval = \"soon\""),
            &[],
            &["polling_interval", "config.toml"],
        ),
        (
            Some("[sqlite]\nsynchronous = \"SOMETIMES\""),
            &[],
            &["synchronous"],
        ),
        (
            Some("no_such_key = 1"),
            &[],
            &["no_such_key", "config.toml"],
        ),
        (
            None,
            &[("TIMER_HTTP_LISTEN", "here")],
            &["http.listen", "TIMER_HTTP_LISTEN"],
        ),
        (
            Some("[api]\nread_connections = 0"),
            &[],
            &["api.read_connections", "config.toml"],
        ),
        (
            None,
            &[("TIMER_API_READ_TIMEOUT", "0")],
            &["api.read_timeout", "TIMER_API_READ_TIMEOUT"],
        ),
        (
            None,
            &[("TIMER_SUPERVISOR_SHUTDOWN_TIMEOUT", "500ms")],
            &[
                "supervisor.shutdown_timeout",
                "TIMER_SUPERVISOR_SHUTDOWN_TIMEOUT",
            ],
        ),
        (
            None,
            &[("TIMER_LOG_FORMAT", "xml")],
            &["format", "TIMER_LOG_FORMAT"],
        ),
        (
            Some("[nats]\ncommand_partitions = 0"),
            &[],
            &["nats.command_partitions", "config.toml"],
        ),
        (
            None,
            &[("TIMER_NATS_COMMAND_PARTITIONS", "257")],
            &["nats.command_partitions", "TIMER_NATS_COMMAND_PARTITIONS"],
        ),
    ];
    expect_errors(cases);
}

#[test]
fn command_partitions_default_to_sixteen_and_one_is_a_single_line() {
    Jail::expect_with(|jail| {
        assert_eq!(load_in(jail).unwrap().nats.command_partitions, 16);
        jail.set_env("TIMER_NATS_COMMAND_PARTITIONS", "1");
        let config = load_in(jail).unwrap();
        assert_eq!(config.broker_names().command_partitions, 1);
        Ok(())
    });
}

#[test]
fn an_unset_name_is_the_host_name_alone_only_on_an_unshared_database() {
    let config = Config::default();
    assert_eq!(config.name, None);
    let host = super::host_name();
    assert_eq!(
        config.daemon_name(false),
        DaemonName::HostName(host.clone())
    );
    let (one, two) = (config.daemon_name(true), config.daemon_name(true));
    assert!(matches!(one, DaemonName::Generated(_)), "{one:?}");
    assert_ne!(one, two, "each daemon of a shared database picks its own");
    for name in [&one, &two] {
        let name = name.as_str();
        assert!(name.starts_with(&format!("{host}-")), "{name}");
        super::validate::check_name(name).unwrap();
    }
    let configured = Config {
        name: Some("timers-1".into()),
        ..Config::default()
    };
    assert_eq!(
        configured.daemon_name(true),
        DaemonName::Configured("timers-1".into())
    );
}

#[test]
fn a_generated_name_fits_beside_the_longest_host_name() {
    let host = "h".repeat(64);
    let name = super::generated_name(&host);
    assert_eq!(name.len(), 64);
    super::validate::check_name(&name).unwrap();
}

#[test]
fn postgres_limits_are_read_from_file_and_environment_and_checked() {
    Jail::expect_with(|jail| {
        jail.create_file(
            "config.toml",
            "[postgres]\nstatement_timeout = \"20s\"\nlock_timeout = 2000\n",
        )?;
        jail.set_env("TIMER_POSTGRES_OPERATION_TIMEOUT", "30s");
        jail.set_env("TIMER_POSTGRES_CONNECT_TIMEOUT", "2s");
        jail.set_env("TIMER_POSTGRES_TCP_KEEPALIVES_COUNT", "4");
        let config = load_in(jail).unwrap();
        assert_eq!(config.postgres.statement_timeout, Duration::from_secs(20));
        assert_eq!(config.postgres.lock_timeout, Duration::from_secs(2));
        assert_eq!(config.postgres.operation_timeout, Duration::from_secs(30));
        assert_eq!(config.postgres.connect_timeout, Duration::from_secs(2));
        assert_eq!(config.postgres.tcp_keepalives_count, 4);
        assert_eq!(
            config.postgres.session_options(),
            [
                ("statement_timeout", "20000".to_owned()),
                ("lock_timeout", "2000".to_owned()),
                ("idle_in_transaction_session_timeout", "20000".to_owned()),
                ("jit", "off".to_owned()),
                ("tcp_keepalives_idle", "10".to_owned()),
                ("tcp_keepalives_interval", "5".to_owned()),
                ("tcp_keepalives_count", "4".to_owned()),
            ]
        );
        Ok(())
    });
    expect_errors(&[
        (
            Some("[postgres]\nstatement_timeout = \"20s\"\n"),
            &[],
            &[
                "postgres.operation_timeout",
                "must exceed postgres.statement_timeout",
            ],
        ),
        (
            None,
            &[("TIMER_POSTGRES_CONNECT_TIMEOUT", "10ms")],
            &[
                "postgres.connect_timeout",
                "TIMER_POSTGRES_CONNECT_TIMEOUT",
                "minimum",
            ],
        ),
        (
            None,
            &[("TIMER_POSTGRES_TCP_KEEPALIVES_IDLE", "1500ms")],
            &["postgres.tcp_keepalives_idle", "whole seconds"],
        ),
        (
            Some("[postgres]\nlock_timeout = \"soon\"\n"),
            &[],
            &["postgres.lock_timeout", "config.toml"],
        ),
    ]);
}

#[test]
fn zero_keepalives_keep_the_servers_own() {
    let settings = PostgresSettings {
        tcp_keepalives_idle: Duration::ZERO,
        tcp_keepalives_interval: Duration::ZERO,
        tcp_keepalives_count: 0,
        ..PostgresSettings::default()
    };
    assert_eq!(
        settings.session_options(),
        [
            ("statement_timeout", "10000".to_owned()),
            ("lock_timeout", "5000".to_owned()),
            ("idle_in_transaction_session_timeout", "10000".to_owned()),
            ("jit", "off".to_owned()),
        ]
    );
}

#[test]
fn quotas_are_read_from_the_file_with_overrides_by_tenant() {
    use crate::domain::quota::Limits;
    Jail::expect_with(|jail| {
        jail.create_file(
            "config.toml",
            "[quotas]\nmax_pending = 500\ncommands_per_second = 20\n\
             [quotas.tenants.acme]\nmax_pending = 1000\ncommands_per_second = 50\n\
             [quotas.tenants.globex]\nmax_pending = 10\n\
             [quotas.tenants.initech]\ncommands_per_second = 0\n",
        )?;
        let quotas = load_in(jail).unwrap().quotas.quotas();
        let limits = |max_pending, commands_per_second| Limits {
            max_pending,
            commands_per_second,
        };
        assert_eq!(quotas.limits("acme"), limits(Some(1000), Some(50)));
        // A key an override leaves out takes the default; 0 is unlimited for that tenant.
        assert_eq!(quotas.limits("globex"), limits(Some(10), Some(20)));
        assert_eq!(quotas.limits("initech"), limits(Some(500), None));
        assert_eq!(quotas.limits("anyone"), limits(Some(500), Some(20)));
        Ok(())
    });
}

#[test]
fn quotas_are_unlimited_by_default() {
    assert!(Config::default().quotas.quotas().is_unlimited());
}

#[test]
fn quotas_are_set_by_environment_and_the_tenants_text_replaces_the_file_table() {
    use crate::domain::quota::Limits;
    Jail::expect_with(|jail| {
        jail.create_file(
            "config.toml",
            "[quotas]\nmax_pending = 5\n[quotas.tenants.acme]\nmax_pending = 7\n",
        )?;
        jail.set_env("TIMER_QUOTAS_MAX_PENDING", "100");
        jail.set_env("TIMER_QUOTAS_COMMANDS_PER_SECOND", "30");
        jail.set_env(
            "TIMER_QUOTAS_TENANTS",
            " globex : max_pending=1000, commands_per_second=50 ; initech:max_pending=0;",
        );
        let config = load_in(jail).unwrap();
        assert_eq!(config.quotas.max_pending, 100);
        assert_eq!(config.quotas.commands_per_second, 30);
        let quotas = config.quotas.quotas();
        assert_eq!(
            quotas.limits("globex"),
            Limits {
                max_pending: Some(1000),
                commands_per_second: Some(50)
            }
        );
        assert_eq!(
            quotas.limits("initech"),
            Limits {
                max_pending: None,
                commands_per_second: Some(30)
            }
        );
        // acme's override was the file's: the variable replaced the whole table.
        assert_eq!(quotas.limits("acme"), quotas.limits("anyone"));
        Ok(())
    });
    Jail::expect_with(|jail| {
        jail.create_file("config.toml", "[quotas.tenants.acme]\nmax_pending = 7\n")?;
        jail.set_env("TIMER_QUOTAS_TENANTS", "");
        assert!(load_in(jail).unwrap().quotas.tenants.is_empty());
        Ok(())
    });
}

#[test]
fn a_bad_quota_names_the_setting_and_its_source() {
    let cases: &[Case] = &[
        (
            None,
            &[("TIMER_QUOTAS_TENANTS", "acme:max_pending=lots")],
            &[
                "quotas.tenants",
                "TIMER_QUOTAS_TENANTS",
                "acme",
                "max_pending",
                "\"lots\"",
            ],
        ),
        (
            None,
            &[("TIMER_QUOTAS_TENANTS", "acme max_pending=1")],
            &["quotas.tenants", "TIMER_QUOTAS_TENANTS", "':' is missing"],
        ),
        (
            None,
            &[("TIMER_QUOTAS_TENANTS", "acme:colour=1")],
            &["TIMER_QUOTAS_TENANTS", "unknown key \"colour\""],
        ),
        (
            None,
            &[(
                "TIMER_QUOTAS_TENANTS",
                "acme:max_pending=1;acme:max_pending=2",
            )],
            &["TIMER_QUOTAS_TENANTS", "acme is given twice"],
        ),
        (
            None,
            &[("TIMER_QUOTAS_TENANTS", "bad~id:max_pending=1")],
            &["TIMER_QUOTAS_TENANTS", "bad~id"],
        ),
        (
            None,
            &[("TIMER_QUOTAS_TENANTS", "acme:")],
            &["TIMER_QUOTAS_TENANTS", "sets nothing"],
        ),
        (
            None,
            &[("TIMER_QUOTAS_MAX_PENDING", "-1")],
            &["quotas.max_pending", "TIMER_QUOTAS_MAX_PENDING"],
        ),
        (
            None,
            &[("TIMER_QUOTAS_COMMANDS_PER_SECOND", "fast")],
            &[
                "quotas.commands_per_second",
                "TIMER_QUOTAS_COMMANDS_PER_SECOND",
            ],
        ),
        (
            Some("[quotas.tenants.\"bad~id\"]\nmax_pending = 1\n"),
            &[],
            &["quotas.tenants", "config.toml", "bad~id"],
        ),
        (
            Some("[quotas.tenants.acme]\ncolour = 1\n"),
            &[],
            &["colour", "config.toml"],
        ),
        (
            Some("[quotas]\nmax_pending = -3\n"),
            &[],
            &["quotas.max_pending", "config.toml"],
        ),
    ];
    expect_errors(cases);
}

#[test]
fn changed_settings_are_named_by_key_path() {
    let running = Config::default();
    let mut changed = Config {
        batch_size: 7,
        ..Config::default()
    };
    changed.nats.password = Some("s3cret".into());
    changed.nats.user = Some("svc".into());
    changed.quotas.max_pending = 10;
    assert_eq!(
        running.changed_settings(&changed),
        [
            "batch_size",
            "nats.password",
            "nats.user",
            "quotas.max_pending"
        ]
    );
    assert!(running.changed_settings(&Config::default()).is_empty());
}

#[test]
fn labelled_tenants_are_a_list_in_the_file_and_commas_in_the_environment() {
    assert!(
        Config::default().metrics.tenants.is_empty(),
        "none by default"
    );
    Jail::expect_with(|jail| {
        jail.create_file(
            "config.toml",
            "[metrics]\ntenants = [\"acme\", \"globex\"]\n",
        )?;
        assert_eq!(load_in(jail).unwrap().metrics.tenants, ["acme", "globex"]);
        // All digits, or a word serde would take for a boolean: still tenant ids, as text.
        jail.set_env("TIMER_METRICS_TENANTS", " 007, true ,initech,");
        assert_eq!(
            load_in(jail).unwrap().metrics.tenants,
            ["007", "true", "initech"]
        );
        jail.set_env("TIMER_METRICS_TENANTS", "acme");
        assert_eq!(load_in(jail).unwrap().metrics.tenants, ["acme"]);
        jail.set_env("TIMER_METRICS_TENANTS", "");
        assert!(load_in(jail).unwrap().metrics.tenants.is_empty());
        Ok(())
    });
}

#[test]
fn labelled_tenants_are_checked_and_bounded() {
    let too_many = (0..=MAX_LABELLED_TENANTS)
        .map(|i| format!("t{i}"))
        .collect::<Vec<_>>()
        .join(",");
    expect_errors(&[
        (
            None,
            &[("TIMER_METRICS_TENANTS", "acme,not a tenant")],
            &[
                "metrics.tenants",
                "TIMER_METRICS_TENANTS",
                "\"not a tenant\"",
            ],
        ),
        (
            Some("[metrics]\ntenants = [\"acme\", \"a.b\"]\n"),
            &[],
            &["metrics.tenants", "config.toml", "\"a.b\""],
        ),
        (
            None,
            &[("TIMER_METRICS_TENANTS", "acme,globex,acme")],
            &["metrics.tenants", "\"acme\" is listed twice"],
        ),
        (
            None,
            &[("TIMER_METRICS_TENANTS", &too_many)],
            &["metrics.tenants", "101 tenants listed", "100"],
        ),
        (
            Some("[metrics]\ntenants = 5\n"),
            &[],
            &["metrics.tenants", "a list of tenant ids"],
        ),
        (
            Some("[metrics]\ncolour = \"blue\"\n"),
            &[],
            &["metrics.colour", "config.toml"],
        ),
    ]);
}
