//! An earlier release of the daemon, built from its git commit, for the rollback test
//! (docs/operations.md, "Rollback"). Its source comes from this repository's history (`git
//! archive`), under this build's target directory; its manifest takes this build's dependency
//! table and lock file, so it compiles against the very dependencies already compiled here and
//! costs only its own two crates (a minute or two), and its binary is named
//! `timer-service-previous` so that it never replaces this build's `timer-service` beside it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// The release before the command stream had lines (a daemon that reads one consumer, the
/// whole of `timer.cmd.>`): the one a rollback of the lines goes back to.
pub const COMMIT: &str = "c81dc94071a7ea3852fc35da68036fa33b62c3ff";
/// Its newest migration: a rollback keeps this one and undoes every later one.
pub const NEWEST_MIGRATION: &str = "m20261124_000005_postgres_fill_factor";

/// Longest the build may take before it is given up (a loaded machine, a cold cache).
const BUILD_LIMIT: Duration = Duration::from_secs(600);

/// The previous release's binary, built when missing. `None`, with a notice, where it cannot be
/// built (no git history, no cargo); under `CI=true` that fails the test instead.
pub fn binary() -> Option<PathBuf> {
    let ours = PathBuf::from(env!("CARGO_BIN_EXE_timer-service"));
    let profile_dir = ours.parent()?.to_owned();
    let target = profile_dir.parent()?.to_owned();
    let built = profile_dir.join(format!("timer-service-{}", &COMMIT[..12]));
    if built.exists() {
        return Some(built);
    }
    // Test binaries that run at once (the rollback test, the fault suite) build it once: the
    // others wait for the first, then find it built.
    let lock = std::fs::File::create(target.join("previous-release.lock"))
        .and_then(|file| file.lock().map(|()| file));
    if built.exists() {
        return Some(built);
    }
    let outcome = match lock {
        Ok(_held) => build(&target, &profile_dir, &built),
        Err(e) => Err(format!("cannot lock the build: {e}")),
    };
    match outcome {
        Ok(()) => Some(built),
        Err(why) => {
            super::lacking("the previous release's binary", &why);
            None
        }
    }
}

fn build(target: &Path, profile_dir: &Path, built: &Path) -> Result<(), String> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let source = target.join("previous-release").join(&COMMIT[..12]);
    if !source.join("Cargo.toml").exists() {
        std::fs::create_dir_all(&source).map_err(|e| format!("{}: {e}", source.display()))?;
        let archive = Command::new("git")
            .args([
                "-C",
                &repo.display().to_string(),
                "archive",
                "--format=tar",
                COMMIT,
            ])
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("git: {e}"))?;
        let unpacked = Command::new("tar")
            .args(["-x", "-C", &source.display().to_string()])
            .stdin(archive.stdout.ok_or("git archive: no output")?)
            .status()
            .map_err(|e| format!("tar: {e}"))?;
        if !unpacked.success() || !source.join("Cargo.toml").exists() {
            let _ = std::fs::remove_dir_all(&source);
            return Err(format!(
                "commit {COMMIT} could not be taken from git (a shallow clone?)"
            ));
        }
    }
    let ours = std::fs::read_to_string(repo.join("Cargo.toml")).map_err(|e| e.to_string())?;
    let theirs = std::fs::read_to_string(source.join("Cargo.toml")).map_err(|e| e.to_string())?;
    let manifest = with_dependencies_of(&theirs, &ours)
        .ok_or("the previous release's manifest has no [dependencies]")?
        .replace(
            "[[bin]]\nname = \"timer-service\"",
            "[[bin]]\nname = \"timer-service-previous\"",
        );
    std::fs::write(source.join("Cargo.toml"), manifest).map_err(|e| e.to_string())?;
    std::fs::copy(repo.join("Cargo.lock"), source.join("Cargo.lock")).map_err(|e| e.to_string())?;

    eprintln!(
        "building the previous release ({COMMIT}) in {}",
        source.display()
    );
    let started = std::time::Instant::now();
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--quiet", "--bin", "timer-service-previous"])
        .current_dir(&source)
        .env("CARGO_TARGET_DIR", target)
        .spawn()
        .map_err(|e| format!("cargo: {e}"))?;
    let status = loop {
        if let Some(status) = cargo.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if started.elapsed() > BUILD_LIMIT {
            let _ = cargo.kill();
            let _ = cargo.wait();
            return Err(format!("its build took more than {BUILD_LIMIT:?}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    if !status.success() {
        return Err(format!("its build failed: {status}"));
    }
    eprintln!(
        "the previous release was built in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    // Whole or not at all: another test binary takes it as soon as it exists.
    let partial = built.with_extension("partial");
    std::fs::copy(profile_dir.join("timer-service-previous"), &partial)
        .and_then(|_| std::fs::rename(&partial, built))
        .map_err(|e| e.to_string())
}

/// `theirs` with its `[dependencies]` table replaced by the one of `ours`.
fn with_dependencies_of(theirs: &str, ours: &str) -> Option<String> {
    let table = |text: &str| -> Option<(usize, usize)> {
        let start = text.find("\n[dependencies]\n")? + 1;
        let end = text[start + 1..]
            .find("\n[")
            .map_or(text.len(), |i| start + 1 + i + 1);
        Some((start, end))
    };
    let (start, end) = table(theirs)?;
    let (our_start, our_end) = table(ours)?;
    Some(format!(
        "{}{}{}",
        &theirs[..start],
        &ours[our_start..our_end],
        &theirs[end..]
    ))
}
