//! Reading one file that someone else controls: only a regular file is read (a FIFO, device
//! or socket, or a link to one, is refused without blocking), never more than a cap whatever
//! its metadata says (`/proc` files report size 0), and only text is handed on (a file with
//! NUL bytes or invalid UTF-8 is "not a text file", and no error ever quotes it).

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// `O_NONBLOCK`: opening a FIFO for reading does not wait for a writer.
#[cfg(any(target_arch = "mips", target_arch = "mips64"))]
const O_NONBLOCK: i32 = 0x80;
#[cfg(target_arch = "sparc64")]
const O_NONBLOCK: i32 = 0x4000;
#[cfg(not(any(target_arch = "mips", target_arch = "mips64", target_arch = "sparc64")))]
const O_NONBLOCK: i32 = 0o4000;

/// Why a file was not read. Messages never quote the file's content.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// Opening or reading failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Not a regular file (what it is instead).
    #[error("{0} (not a regular file); not read")]
    Special(&'static str),
    /// Larger than the cap.
    #[error("larger than {0} bytes; not read")]
    TooLarge(u64),
    /// More bytes than its size says.
    #[error(
        "holds more than its size says (a /proc or /sys file, or one growing while read); not read"
    )]
    Overfull,
    /// Its metadata changed during the read.
    #[error("changed while it was read; read again at the next change")]
    Changed,
    /// It holds a NUL byte.
    #[error("not a text file (it holds NUL bytes); not read")]
    Nul,
    /// It is not UTF-8.
    #[error("not a text file (not UTF-8); not read")]
    NotUtf8,
}

/// What a file is when it is not a regular file, for messages.
pub fn special_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

/// The bytes of the regular file at `path` (links followed), at most `max` of them: a
/// larger file, a file that is not regular, or one that changed while it was read (its
/// size, modification time or inode differ after the read) is an error naming why.
pub fn bytes(path: &Path, max: u64) -> Result<Vec<u8>, ReadError> {
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(O_NONBLOCK)
        .open(path)?;
    let before = file.metadata()?;
    if !before.is_file() {
        return Err(ReadError::Special(special_kind(&before)));
    }
    if before.len() > max {
        return Err(ReadError::TooLarge(max));
    }
    // At most one byte more than the size the file reports is read, into one allocation of
    // that size: a file that holds more than it says (`/proc/self/pagemap` says 0 bytes and
    // holds gigabytes) or grows while it is read is refused after one byte.
    let size = before.len();
    let mut out = Vec::with_capacity(usize::try_from(size + 1).unwrap_or(0));
    (&mut file).take(size + 1).read_to_end(&mut out)?;
    if out.len() as u64 > size {
        return Err(ReadError::Overfull);
    }
    let after = std::fs::metadata(path)?;
    let stamp = |m: &std::fs::Metadata| (m.ino(), m.dev(), m.len(), m.mtime(), m.mtime_nsec());
    if stamp(&before) != stamp(&after) {
        return Err(ReadError::Changed);
    }
    Ok(out)
}

/// `bytes` as text: an error ("not a text file", without any of its content) when they
/// hold a NUL byte or are not UTF-8.
pub fn text(bytes: Vec<u8>) -> Result<String, ReadError> {
    if memchr::memchr(0, &bytes).is_some() {
        return Err(ReadError::Nul);
    }
    String::from_utf8(bytes).map_err(|_| ReadError::NotUtf8)
}

/// The text of the file at `path`, read with [`bytes`] and checked with [`text`].
pub fn text_file(path: &Path, max: u64) -> Result<String, ReadError> {
    text(bytes(path, max)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("kartograf-read-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn reads_regular_files_up_to_the_cap() {
        let d = temp("cap");
        std::fs::write(d.join("a"), "12345").unwrap();
        assert_eq!(bytes(&d.join("a"), 5).unwrap(), b"12345");
        let e = bytes(&d.join("a"), 4).unwrap_err().to_string();
        assert!(e.contains("larger than 4 bytes"), "{e}");
    }

    #[test]
    fn proc_files_that_report_size_zero_are_still_capped() {
        // /proc/self/pagemap says 0 bytes and holds 8 per page of the address space:
        // nothing is read past what the size says (the kernel may refuse a read of less than
        // 8 bytes first).
        let pagemap = Path::new("/proc/self/pagemap");
        assert_eq!(std::fs::metadata(pagemap).unwrap().len(), 0);
        assert!(bytes(pagemap, 1 << 30).is_err());
        // /proc/self/environ says 0 bytes too: refused, and never quoted.
        let e = text_file(Path::new("/proc/self/environ"), 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("more than its size says"), "{e}");
        assert!(!e.contains("PATH"), "{e}");
    }

    #[test]
    fn special_files_are_refused_without_blocking() {
        let d = temp("special");
        let fifo = d.join("fifo.yaml");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = bytes(&fifo, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("a FIFO"), "{e}");
        std::os::unix::fs::symlink("/dev/zero", d.join("zero.yaml")).unwrap();
        let e = bytes(&d.join("zero.yaml"), 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("a device"), "{e}");
    }

    #[test]
    fn binary_content_is_not_text() {
        assert!(text(b"a: 1\n".to_vec()).is_ok());
        assert!(text(vec![b'a', 0, b'b']).is_err());
        assert!(
            text(vec![0xff, 0xfe])
                .unwrap_err()
                .to_string()
                .contains("not UTF-8")
        );
    }
}
