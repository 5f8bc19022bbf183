//! Bounded reading of input files: every file nodetopo reads (sysfs attributes, its
//! checkpoint, the kubelet's state, pod and spec YAML) goes through [`read_bounded`].
//!
//! Guarantees: never blocks on a FIFO or a device planted where a file should be (the file is
//! opened non-blocking and must be a regular file, checked on the open handle, so a swap
//! between check and open changes nothing), and never reads more than the caller's cap into
//! memory (a symlink to `/dev/zero` or a runaway file is refused, not read).

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file does not exist.
    #[error("does not exist")]
    NotFound,
    /// Opening or reading failed.
    #[error("{0}")]
    Io(io::Error),
    /// Not a regular file (a FIFO, a device, a directory, a socket).
    #[error("is not a regular file (it is {0})")]
    NotRegular(&'static str),
    /// Larger than the cap.
    #[error("is larger than {0} bytes")]
    TooLarge(u64),
}

fn kind(ft: fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ft.is_dir() {
        "a directory"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_block_device() {
        "a block device"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a file"
    }
}

/// Opens `path` (symlinks followed) for reading without ever blocking, and checks on the
/// open handle that it is a regular file.
pub fn open_regular(path: &Path) -> Result<fs::File, ReadError> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => ReadError::NotFound,
            _ => ReadError::Io(e),
        })?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    if !meta.is_file() {
        return Err(ReadError::NotRegular(kind(meta.file_type())));
    }
    Ok(file)
}

/// Reads at most `max` bytes of the regular file `path` (symlinks followed); more is an error.
pub fn read_bounded(path: &Path, max: u64) -> Result<Vec<u8>, ReadError> {
    let file = open_regular(path)?;
    let meta = file.metadata().map_err(ReadError::Io)?;
    // sysfs reports 4096 for every attribute, so the size is only a hint for the buffer.
    let mut bytes = Vec::with_capacity(meta.len().min(max).min(1 << 16) as usize);
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(ReadError::Io)?;
    if bytes.len() as u64 > max {
        return Err(ReadError::TooLarge(max));
    }
    Ok(bytes)
}

/// [`read_bounded`] as UTF-8 text.
pub fn read_text_bounded(path: &Path, max: u64) -> Result<String, ReadError> {
    let bytes = read_bounded(path, max)?;
    String::from_utf8(bytes).map_err(|e| {
        ReadError::Io(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not valid UTF-8 (at byte {})", e.utf8_error().valid_up_to()),
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_fifos_devices_directories_and_oversize() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("online");
        let c = std::ffi::CString::new(fifo.to_string_lossy().as_bytes()).expect("cstr");
        // SAFETY: mkfifo on a valid NUL-terminated path; the result is checked.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let started = std::time::Instant::now();
        let e = read_bounded(&fifo, 100).expect_err("fifo");
        assert_eq!(e.to_string(), "is not a regular file (it is a FIFO)");
        assert!(started.elapsed().as_secs() < 5, "did not block");
        let e = read_bounded(Path::new("/dev/zero"), 100).expect_err("device");
        assert_eq!(
            e.to_string(),
            "is not a regular file (it is a character device)"
        );
        let zero = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).expect("symlink");
        assert!(matches!(
            read_bounded(&zero, 100),
            Err(ReadError::NotRegular(_))
        ));
        assert!(matches!(
            read_bounded(dir.path(), 100),
            Err(ReadError::NotRegular(_))
        ));
        let big = dir.path().join("big");
        fs::write(&big, vec![b'0'; 101]).expect("write");
        assert_eq!(
            read_bounded(&big, 100).expect_err("big").to_string(),
            "is larger than 100 bytes"
        );
        assert_eq!(read_bounded(&big, 101).expect("fits").len(), 101);
        assert!(matches!(
            read_bounded(&dir.path().join("absent"), 1),
            Err(ReadError::NotFound)
        ));
    }
}
