//! The socket that wakes an event loop from the engine's threads without
//! the GIL: the loop watches its reading end (`loop.add_reader`).

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// A non-blocking socket pair: the engine rings, the loop hears.
pub(crate) struct Bell {
    reader: UnixStream,
    writer: UnixStream,
}

impl Bell {
    pub(crate) fn new() -> std::io::Result<Self> {
        let (reader, writer) = UnixStream::pair()?;
        reader.set_nonblocking(true)?;
        writer.set_nonblocking(true)?;
        Ok(Self { reader, writer })
    }

    /// Wakes the loop. A full buffer already holds a wake-up; a closed
    /// loop never drains: either way there is nothing more to do.
    pub(crate) fn ring(&self) {
        let _ = (&self.writer).write(&[1]);
    }

    /// Takes every wake-up written so far (on the loop).
    pub(crate) fn hush(&self) {
        let mut bytes = [0_u8; 64];
        while matches!((&self.reader).read(&mut bytes), Ok(n) if n > 0) {}
    }

    /// The descriptor the loop watches for readability.
    pub(crate) fn fileno(&self) -> i32 {
        self.reader.as_raw_fd()
    }
}
