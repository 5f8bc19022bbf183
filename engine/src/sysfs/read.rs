//! Low-level readers for sysfs attribute files.
//!
//! Every reader takes the full path, returns `Ok(None)` when the file does not exist (missing
//! optional files degrade gracefully) and a [`SysfsError`] naming the file and the bad content
//! otherwise. Contents are trimmed of whitespace and NUL bytes at both ends: several kernels
//! pad attributes with `"\n\0"` and `nohz_full` can be just `"\0\n"`.

use std::fs;
use std::io::{ErrorKind, Read};
use std::path::Path;

use super::SysfsError;
use crate::cpuset::CpuSet;
use crate::files::ReadError;

/// Attribute files are a page at most; anything far larger is not a sysfs attribute and is
/// refused rather than read into memory.
const MAX_ATTR_BYTES: u64 = 1 << 20;

/// Reads a text attribute, trimmed. `Ok(None)` when the file does not exist.
pub(crate) fn attr(path: &Path) -> Result<Option<String>, SysfsError> {
    // Non-blocking open and a regular-file check: a FIFO or device planted as an attribute
    // is an error naming the file, never a hang or an endless read.
    let file = match crate::files::open_regular(path) {
        Ok(f) => f,
        Err(ReadError::NotFound) => return Ok(None),
        Err(ReadError::Io(e)) => return Err(SysfsError::io(path, e)),
        Err(e) => return Err(SysfsError::malformed(path, "", e.to_string())),
    };
    // One read normally returns the whole attribute (sysfs serves at most a page); a short
    // read is taken as the end, which saves the extra read that would only return 0.
    let mut buf = [0u8; 4096];
    let mut file = file;
    let n = loop {
        match file.read(&mut buf) {
            Ok(n) => break n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(SysfsError::io(path, e)),
        }
    };
    let mut bytes = buf[..n].to_vec();
    if n == buf.len() {
        file.take(MAX_ATTR_BYTES + 1 - n as u64)
            .read_to_end(&mut bytes)
            .map_err(|e| SysfsError::io(path, e))?;
    }
    if bytes.len() as u64 > MAX_ATTR_BYTES {
        return Err(SysfsError::malformed(
            path,
            "",
            format!("file is larger than {MAX_ATTR_BYTES} bytes"),
        ));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        SysfsError::malformed(
            path,
            &String::from_utf8_lossy(e.as_bytes()),
            "not valid UTF-8".into(),
        )
    })?;
    Ok(Some(trim(&text).to_string()))
}

/// Trims whitespace and NUL bytes at both ends.
pub(crate) fn trim(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || c == '\0')
}

/// Reads a CPU list file (`0-3,8`).
pub(crate) fn list(path: &Path) -> Result<Option<CpuSet>, SysfsError> {
    match attr(path)? {
        None => Ok(None),
        Some(s) => CpuSet::parse(&s)
            .map(Some)
            .map_err(|e| SysfsError::malformed(path, &s, e.to_string())),
    }
}

/// Reads a CPU mask file (`00000000,0000ffff`).
pub(crate) fn mask(path: &Path) -> Result<Option<CpuSet>, SysfsError> {
    match attr(path)? {
        None => Ok(None),
        Some(s) => CpuSet::parse_hex_mask(&s)
            .map(Some)
            .map_err(|e| SysfsError::malformed(path, &s, e.to_string())),
    }
}

/// Reads `<dir>/<list_name>`, or else the mask `<dir>/<mask_name>`.
pub(crate) fn list_or_mask(
    dir: &Path,
    list_name: &str,
    mask_name: &str,
) -> Result<Option<CpuSet>, SysfsError> {
    match list(&dir.join(list_name))? {
        Some(s) => Ok(Some(s)),
        None => mask(&dir.join(mask_name)),
    }
}

/// Reads a signed integer attribute.
pub(crate) fn int(path: &Path) -> Result<Option<i64>, SysfsError> {
    match attr(path)? {
        None => Ok(None),
        Some(s) => s
            .parse::<i64>()
            .map(Some)
            .map_err(|e| SysfsError::malformed(path, &s, format!("expected an integer: {e}"))),
    }
}

/// Reads a non-negative integer attribute.
pub(crate) fn uint(path: &Path) -> Result<Option<u64>, SysfsError> {
    match attr(path)? {
        None => Ok(None),
        Some(s) => s.parse::<u64>().map(Some).map_err(|e| {
            SysfsError::malformed(path, &s, format!("expected a non-negative integer: {e}"))
        }),
    }
}

/// Reads a cache `size` attribute (`32K`, `30720K`, `1M`, or plain bytes) as bytes.
pub(crate) fn size(path: &Path) -> Result<Option<u64>, SysfsError> {
    let Some(s) = attr(path)? else {
        return Ok(None);
    };
    let (digits, mult) = match s.chars().last() {
        Some('K') | Some('k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M') | Some('m') => (&s[..s.len() - 1], 1 << 20),
        Some('G') | Some('g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s.as_str(), 1),
    };
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|v| v.checked_mul(mult))
        .map(Some)
        .ok_or_else(|| SysfsError::malformed(path, &s, "expected a size such as 32K".into()))
}

/// Reads a node `distance` file: whitespace-separated non-negative integers.
pub(crate) fn distances(path: &Path) -> Result<Option<Vec<u32>>, SysfsError> {
    let Some(s) = attr(path)? else {
        return Ok(None);
    };
    s.split_whitespace()
        .map(|tok| {
            tok.parse::<u32>().map_err(|e| {
                SysfsError::malformed(path, &s, format!("distance {tok:?} is not a number: {e}"))
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Reads `MemTotal` from a node `meminfo` file (`Node 0 MemTotal:  2096684 kB`), in bytes.
pub(crate) fn mem_total(path: &Path) -> Result<Option<u64>, SysfsError> {
    let Some(s) = attr(path)? else {
        return Ok(None);
    };
    for line in s.lines() {
        let mut it = line.split_whitespace();
        if !it.any(|tok| tok == "MemTotal:") {
            continue;
        }
        let value = it.next();
        let unit = it.next();
        let parsed = value.and_then(|v| v.parse::<u64>().ok());
        let mult = match unit {
            None => Some(1),
            Some(u) if u.eq_ignore_ascii_case("kb") => Some(1024),
            Some(_) => None,
        };
        return match (parsed, mult) {
            (Some(v), Some(m)) => v.checked_mul(m).map(Some).ok_or_else(|| {
                SysfsError::malformed(path, line, "MemTotal is out of range".into())
            }),
            _ => Err(SysfsError::malformed(
                path,
                line,
                "expected `MemTotal: <number> kB`".into(),
            )),
        };
    }
    Ok(None)
}

/// The numbers N of the entries `<prefix><N>` of a directory, ascending. A missing directory
/// yields nothing. Entries are never followed: only their names are used.
pub(crate) fn numbered_entries(dir: &Path, prefix: &str) -> Result<Vec<usize>, SysfsError> {
    numbered(dir, prefix, false)
}

/// Like [`numbered_entries`], but only directories (or symlinks, which in real sysfs point
/// at directories); the type comes from the directory listing, without a `stat` per entry.
pub(crate) fn numbered_dirs(dir: &Path, prefix: &str) -> Result<Vec<usize>, SysfsError> {
    numbered(dir, prefix, true)
}

fn numbered(dir: &Path, prefix: &str, dirs_only: bool) -> Result<Vec<usize>, SysfsError> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == ErrorKind::NotFound || e.kind() == ErrorKind::NotADirectory => {
            return Ok(Vec::new())
        }
        Err(e) => return Err(SysfsError::io(dir, e)),
    };
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| SysfsError::io(dir, e))?;
        if dirs_only {
            let ft = entry
                .file_type()
                .map_err(|e| SysfsError::io(&entry.path(), e))?;
            if !(ft.is_dir() || ft.is_symlink()) {
                continue;
            }
        }
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(rest) = name.strip_prefix(prefix) {
            if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
                if let Ok(n) = rest.parse::<usize>() {
                    if n <= crate::cpuset::MAX_CPU_ID {
                        out.push(n);
                    }
                }
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}
