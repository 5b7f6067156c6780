//! Python's randomness where the originals need it: `os.urandom` and
//! `secrets.token_hex`, both from the kernel CSPRNG.

use rustix::io::Errno;

use crate::exception::Result;
use crate::hex::hex;

/// `secrets.token_hex(nbytes)`: `2 * nbytes` lowercase hex digits from the
/// kernel CSPRNG, for temporary names, identifiers and secrets.
pub fn token_hex(nbytes: usize) -> Result<String> {
    let mut bytes = vec![0u8; nbytes];
    random_bytes(&mut bytes)?;
    Ok(hex(&bytes))
}

/// Fills `bytes` from the kernel CSPRNG (`os.urandom`), the one random source
/// for temporary names, transaction ids and UUIDs.
#[cfg(not(target_os = "macos"))]
pub(crate) fn random_bytes(bytes: &mut [u8]) -> Result<()> {
    let mut filled = 0;
    while filled < bytes.len() {
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(count) => filled += count,
            Err(Errno::INTR) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(())
}

/// Fills `bytes` from the kernel CSPRNG (`os.urandom`), the one random source
/// for temporary names, transaction ids and UUIDs. macOS has no `getrandom`;
/// Python's `os.urandom` uses `getentropy`, which gives at most 256 bytes a call.
#[cfg(target_os = "macos")]
pub(crate) fn random_bytes(bytes: &mut [u8]) -> Result<()> {
    for chunk in bytes.chunks_mut(256) {
        // SAFETY: the pointer and length describe `chunk`, at most 256 bytes.
        if unsafe { libc::getentropy(chunk.as_mut_ptr().cast(), chunk.len()) } != 0 {
            return Err(Errno::from_io_error(&std::io::Error::last_os_error())
                .unwrap_or(Errno::IO)
                .into());
        }
    }
    Ok(())
}
