//! The worker's private files: created 0600 and never opened through a
//! symlink, as `execution_service` opens its locks and writes its receipts.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use rustix::fs::OFlags;

/// Opens a lock file read-write, creating it but never truncating it, so a
/// concurrent holder's flock stays on the same inode.
pub(crate) fn open_lock(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(OFlags::NOFOLLOW.bits() as i32)
        .open(path)
}

/// Writes `data` to the fresh file `temporary`, fsyncs it and renames it onto
/// `destination`, so readers see the old or the new document, never a part;
/// the temporary is removed whatever happened.
pub(crate) fn publish_private(temporary: &Path, data: &[u8], destination: &Path) -> io::Result<()> {
    let written = (|| -> io::Result<()> {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(OFlags::NOFOLLOW.bits() as i32)
            .open(temporary)?;
        file.write_all(data)?;
        file.sync_all()?;
        fs::rename(temporary, destination)
    })();
    let _ = fs::remove_file(temporary);
    written
}
