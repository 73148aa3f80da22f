//! Small file systems the tests mount and fill, and what a session file must look like
//! after any fault.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// A tmpfs of `size` mounted on `dir` for the test's lifetime (unmounted, lazily, on
/// drop). `None` (after saying why on stderr) where this machine lets nobody mount.
pub struct Tmpfs {
    pub dir: PathBuf,
}

impl Tmpfs {
    pub fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).expect("a mount point");
        let output = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .output();
        match output {
            Ok(output) if output.status.success() => Some(Tmpfs {
                dir: dir.to_owned(),
            }),
            Ok(output) => {
                eprintln!(
                    "skipped: cannot mount a tmpfs (root is needed): {}",
                    String::from_utf8_lossy(&output.stderr).trim()
                );
                None
            }
            Err(err) => {
                eprintln!("skipped: cannot run mount: {err}");
                None
            }
        }
    }

    /// `mount -o remount,ro` (or `rw`).
    pub fn remount(&self, options: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,{options}")])
            .arg(&self.dir)
            .status()
            .expect("run mount");
        assert!(status.success(), "remount {options} failed");
    }

    /// Fills the file system to the last byte with `filler`; returns its path.
    pub fn fill(&self) -> PathBuf {
        let path = self.dir.join("filler");
        let mut file = std::fs::File::create(&path).expect("create the filler");
        let block = vec![0u8; 4096];
        loop {
            match file.write(&block) {
                Ok(0) => break,
                Ok(_) => {}
                Err(err) if err.raw_os_error() == Some(libc_enospc()) => break,
                Err(err) => panic!("filling the disk: {err}"),
            }
        }
        // The last few bytes of a page too.
        while file.write(&[0u8]).is_ok_and(|n| n == 1) {}
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

fn libc_enospc() -> i32 {
    28
}

/// A session file as it must be after anything: whole lines of JSON, each entry's id
/// unique and its parent among the lines before it, the first the session's header.
/// Returns the lines.
pub fn check_file(path: &Path) -> Vec<Value> {
    let bytes = std::fs::read(path).expect("read the session file");
    assert!(
        bytes.is_empty() || bytes.ends_with(b"\n"),
        "{} does not end with a whole line",
        path.display()
    );
    let mut ids = std::collections::HashSet::new();
    let mut lines = Vec::new();
    for (n, line) in bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let value: Value = serde_json::from_slice(line).unwrap_or_else(|err| {
            panic!(
                "line {} of {} is not JSON ({err}): {}",
                n + 1,
                path.display(),
                String::from_utf8_lossy(line)
            )
        });
        let id = value["id"].as_str().expect("an id").to_owned();
        match value["parent"].as_str() {
            None => assert_eq!(n, 0, "a second root: {value}"),
            Some(parent) => assert!(
                ids.contains(parent),
                "{id}'s parent {parent} is not before it"
            ),
        }
        assert!(ids.insert(id.clone()), "{id} twice in {}", path.display());
        lines.push(value);
    }
    assert_eq!(
        lines.first().map(|l| l["kind"].clone()),
        Some("session".into())
    );
    lines
}

/// The user messages of a session file, in file order.
pub fn user_messages(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .filter(|line| line["kind"] == "user")
        .map(|line| line["content"].as_str().unwrap_or("").to_owned())
        .collect()
}
