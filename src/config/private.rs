//! Files and directories of the profile are the user's alone, whatever the umask:
//! conversations, locks, trust decisions and logs say what a user works on. The mode is
//! given at creation (a umask can only take bits away), so even `umask 000` yields
//! 0700 directories and 0600 files.

use std::fs::{DirBuilder, OpenOptions};
use std::io;
use std::path::Path;

const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;

/// `create_dir_all`, every directory it creates 0700 (existing ones are left as they
/// are: the user may have chosen their modes).
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    let mut builder = DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
    builder.create(path)
}

/// Options that create a file 0600 (an existing file keeps its mode).
pub fn file_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, FILE_MODE);
    options
}

#[cfg(all(test, unix))]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn modes_are_private_whatever_the_umask_leaves() {
        let root = tempfile::tempdir().expect("temp");
        let dir = root.path().join("a/b");
        super::create_dir_all(&dir).expect("dirs");
        let file = dir.join("f");
        super::file_options()
            .create(true)
            .append(true)
            .open(&file)
            .expect("file");
        let mode = |path: &std::path::Path| {
            std::fs::metadata(path).expect("meta").permissions().mode() & 0o777
        };
        assert_eq!(mode(&root.path().join("a")), 0o700);
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&file), 0o600);
    }
}
