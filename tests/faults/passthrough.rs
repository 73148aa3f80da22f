//! A FUSE file system that passes everything through to a backing directory, and whose
//! writes fail with EIO on demand: a disk that breaks and mends while jucode runs
//! (`docs/reliability.md`: this kernel has no device-mapper for `dm-error`).
//!
//! It is served by a thread of the test process itself (`fuser`, mounted with `mount(2)`
//! as root, no `fusermount`). Inodes are numbered by path, attributes are never cached
//! (every `stat` asks), and writes go through at once (no writeback cache), so a failing
//! `write` fails the caller's system call, as a disk's I/O error does. Locks (`flock`)
//! are the kernel's own, as FUSE keeps them when the file system does not take them.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate,
    ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request,
    TimeOrNow, WriteFlags,
};

/// What fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Failing {
    Nothing = 0,
    /// Every change: `write`, `fsync`, creating, truncating, renaming, removing.
    Writes = 1,
    /// Only `fsync` (the writes are taken, but never made durable).
    Fsync = 2,
}

/// The mounted file system; unmounted (lazily) when dropped.
pub struct Passthrough {
    pub dir: PathBuf,
    failing: Arc<AtomicU8>,
    _session: BackgroundSession,
}

impl Passthrough {
    /// Mounts a pass-through of `backing` on `dir`. `None` (after saying why on stderr)
    /// where FUSE cannot be mounted here.
    pub fn mount(backing: &Path, dir: &Path) -> Option<Passthrough> {
        if !Path::new("/dev/fuse").exists() {
            eprintln!("skipped: no /dev/fuse (the kernel has no FUSE, or it is not exposed)");
            return None;
        }
        fs::create_dir_all(backing).expect("a backing directory");
        fs::create_dir_all(dir).expect("a mount point");
        let failing = Arc::new(AtomicU8::new(Failing::Nothing as u8));
        let fs = Backed {
            root: backing.to_owned(),
            failing: failing.clone(),
            state: Mutex::new(State::default()),
        };
        let mut config = Config::default();
        config.mount_options = vec![
            MountOption::FSName("jucode-faults".into()),
            MountOption::DefaultPermissions,
        ];
        match fuser::spawn_mount(fs, dir, &config) {
            Ok(session) => Some(Passthrough {
                dir: dir.to_owned(),
                failing,
                _session: session,
            }),
            Err(err) => {
                eprintln!(
                    "skipped: cannot mount a FUSE file system on {} (root is needed): {err}",
                    dir.display()
                );
                None
            }
        }
    }

    pub fn fail(&self, failing: Failing) {
        self.failing.store(failing as u8, Ordering::SeqCst);
    }
}

impl Drop for Passthrough {
    fn drop(&mut self) {
        // Detached at once even if something still has a file open there; the session's
        // own unmount then finds nothing to do.
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Paths by inode number and back; open files by handle.
struct State {
    paths: HashMap<u64, PathBuf>,
    inodes: HashMap<PathBuf, u64>,
    next_inode: u64,
    files: HashMap<u64, File>,
    next_handle: u64,
}

impl Default for State {
    fn default() -> Self {
        State {
            paths: HashMap::from([(INodeNo::ROOT.0, PathBuf::new())]),
            inodes: HashMap::from([(PathBuf::new(), INodeNo::ROOT.0)]),
            next_inode: INodeNo::ROOT.0 + 1,
            files: HashMap::new(),
            next_handle: 1,
        }
    }
}

impl State {
    fn inode(&mut self, path: &Path) -> u64 {
        if let Some(&inode) = self.inodes.get(path) {
            return inode;
        }
        let inode = self.next_inode;
        self.next_inode += 1;
        self.inodes.insert(path.to_owned(), inode);
        self.paths.insert(inode, path.to_owned());
        inode
    }

    fn forget_path(&mut self, path: &Path) {
        if let Some(inode) = self.inodes.remove(path) {
            self.paths.remove(&inode);
        }
    }

    /// `from` and everything under it are now at `to`.
    fn moved(&mut self, from: &Path, to: &Path) {
        self.forget_path(to);
        let moved: Vec<(PathBuf, u64)> = self
            .inodes
            .iter()
            .filter(|(path, _)| path.starts_with(from))
            .map(|(path, &inode)| (path.clone(), inode))
            .collect();
        for (path, inode) in moved {
            let rest = path.strip_prefix(from).unwrap_or(Path::new(""));
            let new = if rest.as_os_str().is_empty() {
                to.to_owned()
            } else {
                to.join(rest)
            };
            self.inodes.remove(&path);
            self.inodes.insert(new.clone(), inode);
            self.paths.insert(inode, new);
        }
    }

    fn handle(&mut self, file: File) -> u64 {
        let handle = self.next_handle;
        self.next_handle += 1;
        self.files.insert(handle, file);
        handle
    }
}

struct Backed {
    root: PathBuf,
    failing: Arc<AtomicU8>,
    state: Mutex<State>,
}

/// Nothing is cached: every look-up and `stat` reaches the backing directory.
const TTL: Duration = Duration::ZERO;

fn errno(err: &io::Error) -> Errno {
    Errno::from_i32(err.raw_os_error().unwrap_or(libc::EIO))
}

fn time(seconds: i64, nanos: i64) -> SystemTime {
    let nanos = u32::try_from(nanos).unwrap_or(0);
    match u64::try_from(seconds) {
        Ok(seconds) => UNIX_EPOCH + Duration::new(seconds, nanos),
        Err(_) => UNIX_EPOCH,
    }
}

fn attr(inode: u64, meta: &fs::Metadata) -> FileAttr {
    let kind = meta.file_type();
    let kind = if kind.is_dir() {
        FileType::Directory
    } else if kind.is_symlink() {
        FileType::Symlink
    } else {
        FileType::RegularFile
    };
    FileAttr {
        ino: INodeNo(inode),
        size: meta.size(),
        blocks: meta.blocks(),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind,
        perm: u16::try_from(meta.mode() & 0o7777).unwrap_or(0o600),
        nlink: u32::try_from(meta.nlink()).unwrap_or(1),
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: u32::try_from(meta.rdev()).unwrap_or(0),
        blksize: u32::try_from(meta.blksize()).unwrap_or(4096),
        flags: 0,
    }
}

impl Backed {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn failing(&self) -> Failing {
        match self.failing.load(Ordering::SeqCst) {
            1 => Failing::Writes,
            2 => Failing::Fsync,
            _ => Failing::Nothing,
        }
    }

    /// EIO while writes fail.
    fn writable(&self) -> Result<(), Errno> {
        match self.failing() {
            Failing::Writes => Err(Errno::EIO),
            _ => Ok(()),
        }
    }

    /// The relative path of `inode`, and its place in the backing directory.
    fn path(&self, inode: INodeNo) -> Result<(PathBuf, PathBuf), Errno> {
        let relative = self
            .state()
            .paths
            .get(&inode.0)
            .cloned()
            .ok_or(Errno::ENOENT)?;
        let real = self.root.join(&relative);
        Ok((relative, real))
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<(PathBuf, PathBuf), Errno> {
        let (relative, _) = self.path(parent)?;
        let relative = relative.join(name);
        let real = self.root.join(&relative);
        Ok((relative, real))
    }

    /// The attributes of what is at `relative` now, numbered.
    fn entry(&self, relative: &Path, real: &Path) -> Result<FileAttr, Errno> {
        let meta = fs::symlink_metadata(real).map_err(|err| errno(&err))?;
        let inode = self.state().inode(relative);
        Ok(attr(inode, &meta))
    }

    fn open_options(flags: i32) -> OpenOptions {
        let mut options = OpenOptions::new();
        match flags & libc::O_ACCMODE {
            libc::O_WRONLY => options.write(true),
            libc::O_RDWR => options.read(true).write(true),
            _ => options.read(true),
        };
        // Offsets come from the kernel: appending is its business, not the backing file's.
        options.custom_flags(flags & !(libc::O_ACCMODE | libc::O_APPEND | libc::O_CREAT));
        options
    }

    fn setattr_inner(
        &self,
        inode: INodeNo,
        mode: Option<u32>,
        size: Option<u64>,
        times: (Option<TimeOrNow>, Option<TimeOrNow>),
        handle: Option<FileHandle>,
    ) -> Result<FileAttr, Errno> {
        self.writable()?;
        let (relative, real) = self.path(inode)?;
        let io = |err: io::Error| errno(&err);
        if let Some(size) = size {
            match handle.and_then(|handle| {
                let state = self.state();
                state.files.get(&handle.0).map(|file| file.set_len(size))
            }) {
                Some(result) => result.map_err(io)?,
                None => OpenOptions::new()
                    .write(true)
                    .open(&real)
                    .and_then(|file| file.set_len(size))
                    .map_err(io)?,
            }
        }
        if let Some(mode) = mode {
            fs::set_permissions(&real, fs::Permissions::from_mode(mode & 0o7777)).map_err(io)?;
        }
        if times.0.is_some() || times.1.is_some() {
            let at = |time: TimeOrNow| match time {
                TimeOrNow::SpecificTime(time) => time,
                TimeOrNow::Now => SystemTime::now(),
            };
            let mut set = fs::FileTimes::new();
            if let Some(atime) = times.0 {
                set = set.set_accessed(at(atime));
            }
            if let Some(mtime) = times.1 {
                set = set.set_modified(at(mtime));
            }
            File::open(&real)
                .and_then(|file| file.set_times(set))
                .map_err(io)?;
        }
        self.entry(&relative, &real)
    }
}

impl Filesystem for Backed {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self
            .child(parent, name)
            .and_then(|(relative, real)| self.entry(&relative, &real))
        {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(err) => reply.error(err),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let open = fh.and_then(|fh| {
            let state = self.state();
            state.files.get(&fh.0).map(File::metadata)
        });
        let result = match open {
            Some(meta) => meta
                .map(|meta| attr(ino.0, &meta))
                .map_err(|err| errno(&err)),
            None => self
                .path(ino)
                .and_then(|(relative, real)| self.entry(&relative, &real)),
        };
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(err) => reply.error(err),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        match self.setattr_inner(ino, mode, size, (atime, mtime), fh) {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(err) => reply.error(err),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        use std::os::unix::ffi::OsStrExt;
        match self
            .path(ino)
            .and_then(|(_, real)| fs::read_link(real).map_err(|err| errno(&err)))
        {
            Ok(target) => reply.data(target.as_os_str().as_bytes()),
            Err(err) => reply.error(err),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let result = self.writable().and_then(|()| {
            let (relative, real) = self.child(parent, name)?;
            fs::DirBuilder::new()
                .mode(mode & !umask & 0o7777)
                .create(&real)
                .map_err(|err| errno(&err))?;
            self.entry(&relative, &real)
        });
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(err) => reply.error(err),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self.writable().and_then(|()| {
            let (relative, real) = self.child(parent, name)?;
            fs::remove_file(&real).map_err(|err| errno(&err))?;
            self.state().forget_path(&relative);
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let result = self.writable().and_then(|()| {
            let (relative, real) = self.child(parent, name)?;
            fs::remove_dir(&real).map_err(|err| errno(&err))?;
            self.state().forget_path(&relative);
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let result = self.writable().and_then(|()| {
            if !flags.is_empty() {
                return Err(Errno::EINVAL);
            }
            let (from, real_from) = self.child(parent, name)?;
            let (to, real_to) = self.child(newparent, newname)?;
            fs::rename(&real_from, &real_to).map_err(|err| errno(&err))?;
            self.state().moved(&from, &to);
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(err),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let result = (|| {
            if flags.0 & libc::O_TRUNC != 0 {
                self.writable()?;
            }
            let (_, real) = self.path(ino)?;
            let file = Self::open_options(flags.0)
                .open(real)
                .map_err(|err| errno(&err))?;
            Ok(self.state().handle(file))
        })();
        match result {
            Ok(handle) => reply.opened(FileHandle(handle), FopenFlags::empty()),
            Err(err) => reply.error(err),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let state = self.state();
        let Some(file) = state.files.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        let mut buffer = vec![0; size as usize];
        let mut filled = 0;
        while filled < buffer.len() {
            match file.read_at(&mut buffer[filled..], offset + filled as u64) {
                Ok(0) => break,
                Ok(read) => filled += read,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => return reply.error(errno(&err)),
            }
        }
        reply.data(&buffer[..filled]);
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        if let Err(err) = self.writable() {
            return reply.error(err);
        }
        let state = self.state();
        let Some(file) = state.files.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        match file.write_all_at(data, offset) {
            Ok(()) => reply.written(u32::try_from(data.len()).unwrap_or(u32::MAX)),
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.state().files.remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        if self.failing() != Failing::Nothing {
            return reply.error(Errno::EIO);
        }
        let state = self.state();
        let Some(file) = state.files.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        let synced = if datasync {
            file.sync_data()
        } else {
            file.sync_all()
        };
        match synced {
            Ok(()) => reply.ok(),
            Err(err) => reply.error(errno(&err)),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let (relative, real) = match self.path(ino) {
            Ok(paths) => paths,
            Err(err) => return reply.error(err),
        };
        let listed = match fs::read_dir(&real) {
            Ok(listed) => listed,
            Err(err) => return reply.error(errno(&err)),
        };
        // By name, so that the offsets of one listing mean the same in the next call.
        let mut names: Vec<(std::ffi::OsString, FileType)> = listed
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let kind = entry.file_type().ok()?;
                let kind = if kind.is_dir() {
                    FileType::Directory
                } else if kind.is_symlink() {
                    FileType::Symlink
                } else {
                    FileType::RegularFile
                };
                Some((entry.file_name(), kind))
            })
            .collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        let mut entries = vec![
            (ino.0, FileType::Directory, std::ffi::OsString::from(".")),
            (ino.0, FileType::Directory, std::ffi::OsString::from("..")),
        ];
        {
            let mut state = self.state();
            for (name, kind) in names {
                let inode = state.inode(&relative.join(&name));
                entries.push((inode, kind, name));
            }
        }
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        for (index, (inode, kind, name)) in entries.into_iter().enumerate().skip(skip) {
            if reply.add(INodeNo(inode), index as u64 + 1, kind, &name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        match self.failing() {
            Failing::Nothing => reply.ok(),
            _ => reply.error(Errno::EIO),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match nix::sys::statvfs::statvfs(&self.root) {
            Ok(stat) => reply.statfs(
                stat.blocks(),
                stat.blocks_free(),
                stat.blocks_available(),
                stat.files(),
                stat.files_free(),
                u32::try_from(stat.block_size()).unwrap_or(4096),
                u32::try_from(stat.name_max()).unwrap_or(255),
                u32::try_from(stat.fragment_size()).unwrap_or(4096),
            ),
            Err(err) => reply.error(Errno::from_i32(err as i32)),
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = self.writable().and_then(|()| {
            let (relative, real) = self.child(parent, name)?;
            let mut options = Self::open_options(flags & !libc::O_EXCL);
            if flags & libc::O_EXCL != 0 {
                options.create_new(true);
            } else {
                options.create(true);
            }
            let file = options
                .mode(mode & !umask & 0o7777)
                .open(&real)
                .map_err(|err| errno(&err))?;
            let meta = file.metadata().map_err(|err| errno(&err))?;
            let mut state = self.state();
            let inode = state.inode(&relative);
            let handle = state.handle(file);
            Ok((attr(inode, &meta), handle))
        });
        match result {
            Ok((attr, handle)) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(handle),
                FopenFlags::empty(),
            ),
            Err(err) => reply.error(err),
        }
    }
}
