//! A browser for the console's tests: Debian's Chromium and playwright-core, made ready by
//! `scripts/browser-for-tests.sh`, and where their screenshots go.

use std::path::PathBuf;
use std::process::Command;

/// Chromium and playwright-core, or `None` (with the reason printed) outside CI when they
/// cannot be had; under `CI=true` their absence fails the test.
pub fn ready() -> Option<(String, String)> {
    let root = env!("CARGO_MANIFEST_DIR");
    let output = Command::new(format!("{root}/scripts/browser-for-tests.sh"))
        .output()
        .expect("scripts/browser-for-tests.sh runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let value = |key: &str| {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{key}=")))
            .map(str::to_owned)
    };
    match (
        output.status.success(),
        value("CHROMIUM"),
        value("NODE_PATH"),
    ) {
        (true, Some(chromium), Some(node_path)) => Some((chromium, node_path)),
        _ => {
            let why = String::from_utf8_lossy(&output.stderr);
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "no browser for the console tests under CI: {why}"
            );
            eprintln!("skipping the browser test: {why}");
            None
        }
    }
}

/// Where the browser's screenshots go: `CONSOLE_SCREENSHOTS` (docs/console/ to refresh the
/// documentation's), else the test's scratch space.
pub fn screenshots() -> PathBuf {
    let dir = std::env::var_os("CONSOLE_SCREENSHOTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console"));
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    dir
}
