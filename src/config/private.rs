//! Files and directories of the profile are the user's alone, whatever the umask:
//! conversations, locks, trust decisions and logs say what a user works on. The mode is
//! given at creation (a umask can only take bits away), so even `umask 000` yields
//! 0700 directories and 0600 files.
//!
//! Where jucode keeps a file of its own in the profile (session files and their locks),
//! it also follows no symbolic link: a link planted in a file's place would have jucode
//! lock, cut or append to whatever it points to, and a linked folder would have it
//! create session files elsewhere. [`own_file_options`] opens with `O_NOFOLLOW`,
//! [`create_dir_below`] checks every folder below a root, and [`refuse_link`] and
//! [`open_error`] say which path is a link, so the user can see what to remove.

use std::fs::{DirBuilder, OpenOptions};
use std::io;
use std::path::{Component, Path};

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

/// [`file_options`] that refuse a symbolic link in the file's place (`O_NOFOLLOW`): for
/// the files jucode keeps in the profile. Report a failed open with [`open_error`].
pub fn own_file_options() -> OpenOptions {
    #[allow(unused_mut)]
    let mut options = file_options();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, nix::libc::O_NOFOLLOW);
    options
}

/// What a link where jucode keeps its own file or folder is told: the path, and that
/// it is not followed (removing it is the user's call: it may be theirs).
fn link_message(path: &Path) -> String {
    format!(
        "{} is a symbolic link, which jucode will not follow in its profile: remove it (or put what it points to in its place)",
        path.display()
    )
}

/// Refuses a symbolic link at `path`; anything else (or nothing) is fine.
pub fn refuse_link(path: &Path) -> Result<(), String> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(link_message(path)),
        _ => Ok(()),
    }
}

/// The message of a failed open of `path` (`what` says what was tried: "cannot open"):
/// a link refused by [`own_file_options`] fails with `ELOOP` on Linux and other codes
/// elsewhere, so the path is looked at instead of the code.
pub fn open_error(what: &str, path: &Path, err: &io::Error) -> String {
    match refuse_link(path) {
        Err(message) => message,
        Ok(()) => format!("{what} {}: {err}", path.display()),
    }
}

/// [`create_dir_all`] for `path` inside `root`, following no symbolic link below
/// `root`: each folder between them must be a real directory (created 0700 when
/// missing). `root` itself may be a link (a profile moved elsewhere and linked back).
/// A `path` outside `root` is only checked itself.
pub fn create_dir_below(root: &Path, path: &Path) -> Result<(), String> {
    let (mut here, below) = match path.strip_prefix(root) {
        Ok(below) if !root.as_os_str().is_empty() => {
            create_dir_all(root)
                .map_err(|err| format!("cannot create {}: {err}", root.display()))?;
            (root.to_path_buf(), below)
        }
        _ => {
            let parent = path.parent().unwrap_or(Path::new(""));
            if !parent.as_os_str().is_empty() {
                create_dir_all(parent)
                    .map_err(|err| format!("cannot create {}: {err}", parent.display()))?;
            }
            (
                parent.to_path_buf(),
                path.strip_prefix(parent).unwrap_or(path),
            )
        }
    };
    for component in below.components() {
        let Component::Normal(name) = component else {
            // `..` or `.` below the root: nothing jucode builds, and nothing to follow.
            return Err(format!("{} is not a plain path", path.display()));
        };
        here.push(name);
        match std::fs::symlink_metadata(&here) {
            Ok(meta) if meta.file_type().is_symlink() => return Err(link_message(&here)),
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return Err(format!("{} is not a directory", here.display())),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                let mut builder = DirBuilder::new();
                #[cfg(unix)]
                std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
                match builder.create(&here) {
                    Ok(()) => {}
                    // Made meanwhile by another process: checked again below.
                    Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {
                        refuse_link(&here)?;
                    }
                    Err(err) => return Err(format!("cannot create {}: {err}", here.display())),
                }
            }
            Err(err) => return Err(format!("cannot read {}: {err}", here.display())),
        }
    }
    Ok(())
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

    #[test]
    fn links_below_the_root_are_refused_and_never_followed() {
        let root = tempfile::tempdir().expect("temp");
        let elsewhere = tempfile::tempdir().expect("temp");
        let profile = root.path().join("profile");
        // A linked root is fine: only what is below it is jucode's to check.
        std::os::unix::fs::symlink(elsewhere.path(), &profile).expect("link");
        super::create_dir_below(&profile, &profile.join("sessions/p")).expect("dirs");
        assert!(elsewhere.path().join("sessions/p").is_dir());

        let victim = tempfile::tempdir().expect("temp");
        std::os::unix::fs::symlink(victim.path(), profile.join("sessions/q")).expect("link");
        let err = super::create_dir_below(&profile, &profile.join("sessions/q")).unwrap_err();
        assert!(err.contains("sessions/q is a symbolic link"), "{err}");
        let err = super::create_dir_below(&profile, &profile.join("sessions/q/r")).unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read_dir(victim.path()).expect("read").count(), 0);

        // A file opened without following links is not the link's target.
        let target = victim.path().join("target");
        std::fs::write(&target, "keep").expect("write");
        let link = profile.join("sessions/p/f");
        std::os::unix::fs::symlink(&target, &link).expect("link");
        let err = super::own_file_options()
            .create(true)
            .append(true)
            .open(&link)
            .expect_err("a link is not opened");
        let message = super::open_error("cannot open", &link, &err);
        assert!(message.contains("is a symbolic link"), "{message}");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "keep");
    }
}
