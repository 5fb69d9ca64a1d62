//! A real, small filesystem (tmpfs) for storage-fault tests: the daemon's SQLite file lives on
//! it, a filler file takes the space away, and deleting the filler gives it back. Mounting needs
//! root (CAP_SYS_ADMIN); where the machine does not allow it, [`SmallDisk::mount`] returns `None`
//! and the test says it was skipped (under `CI=true` it fails).

use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

pub struct SmallDisk {
    dir: TempDir,
}

impl SmallDisk {
    /// Mounts a tmpfs of `bytes` on a fresh directory, or `None` when mounting is not permitted.
    pub fn mount(bytes: u64) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().expect("a directory to mount on");
        let refused = match Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir.path())
            .output()
        {
            Ok(out) if out.status.success() => None,
            Ok(out) => Some(String::from_utf8_lossy(&out.stderr).trim().to_owned()),
            Err(e) => Some(format!("no mount command: {e}")),
        };
        if let Some(why) = refused {
            super::lacking(
                "a small filesystem (tmpfs)",
                &format!("this machine does not allow mounting one ({why})"),
            );
            return None;
        }
        Some(SmallDisk { dir })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    fn filler(&self) -> PathBuf {
        self.dir.path().join("filler")
    }

    /// Bytes still free on the filesystem.
    pub fn free_bytes(&self) -> u64 {
        let out = Command::new("df")
            .args(["--output=avail", "-B1"])
            .arg(self.dir.path())
            .output()
            .expect("df");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .expect("df output")
    }

    /// Takes space away until about `leave` bytes remain free.
    pub fn fill_leaving(&self, leave: u64) {
        let take = self.free_bytes().saturating_sub(leave);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.filler())
            .expect("filler");
        // Written, not just sized: tmpfs counts only pages that hold data.
        use std::io::Write;
        let chunk = vec![0xa5u8; 64 * 1024];
        let mut writer = std::io::BufWriter::new(file);
        let mut left = take;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            if writer.write_all(&chunk[..n]).is_err() {
                break;
            }
            left -= n as u64;
        }
        let _ = writer.flush();
    }

    /// Gives the space back.
    pub fn free(&self) {
        let _ = std::fs::remove_file(self.filler());
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}
