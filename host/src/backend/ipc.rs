//! The bytes a GPU backend puts in [`Shareable::bytes`](super::Shareable) for an IPC
//! export (`cuIpcGetMemHandle`, `hipIpcGetMemHandle`): the 64-byte handle, and who made
//! it (pid, device ordinal) and what it covers (pointer, length), so an importer in the
//! exporting process can alias the pointer instead of opening its own handle, which
//! both runtimes refuse.

use super::Shareable;
use crate::error::{Error, Result};

/// Bytes of a `CUipcMemHandle` / `hipIpcMemHandle_t`.
pub(crate) const HANDLE_BYTES: usize = 64;

/// One decoded IPC export.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IpcExport {
    /// The runtime's opaque handle.
    pub handle: [u8; HANDLE_BYTES],
    /// The exporting process.
    pub pid: u32,
    /// The exporter's device ordinal.
    pub ordinal: u32,
    /// The allocation's address in the exporting process.
    pub ptr: u64,
    /// The allocation's length in bytes.
    pub len: u64,
}

impl IpcExport {
    /// Encoded size: handle, pid, ordinal, pointer, length (little-endian).
    pub const BYTES: usize = HANDLE_BYTES + 4 + 4 + 8 + 8;

    /// The encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::BYTES);
        out.extend_from_slice(&self.handle);
        out.extend_from_slice(&self.pid.to_le_bytes());
        out.extend_from_slice(&self.ordinal.to_le_bytes());
        out.extend_from_slice(&self.ptr.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out
    }

    /// What a peer needs to map `len` bytes at `ptr`, memory of device `ordinal` of this
    /// process exported as `handle`.
    pub fn shareable(
        handle: [u8; HANDLE_BYTES],
        ordinal: usize,
        ptr: u64,
        len: usize,
    ) -> Shareable {
        let export = Self {
            handle,
            pid: std::process::id(),
            ordinal: ordinal as u32,
            ptr,
            len: len as u64,
        };
        Shareable {
            bytes: export.encode(),
            fd: None,
        }
    }

    /// Decodes a peer's export (`what`, named in errors: "CUDA IPC export") of which the
    /// importer maps `bytes`: [`Error::BadPeerMemory`] unless it covers them.
    pub fn decode_covering(
        shareable: &Shareable,
        what: &'static str,
        bytes: usize,
    ) -> Result<Self> {
        let export = Self::decode(&shareable.bytes, what)?;
        if bytes == 0 || bytes as u64 > export.len {
            return Err(Error::BadPeerMemory {
                needed: bytes,
                size: export.len,
                why: "the peer exported less device memory than this rank maps",
            });
        }
        Ok(export)
    }

    /// True when this process made the export (where the runtimes refuse to open it).
    pub fn is_from_this_process(&self) -> bool {
        self.pid == std::process::id()
    }

    /// Decodes `bytes` from a peer: an export (`what`, named in the error: "CUDA IPC
    /// export") of [`IpcExport::BYTES`] bytes, else [`Error::BadMessage`].
    pub fn decode(bytes: &[u8], what: &'static str) -> Result<Self> {
        if bytes.len() != Self::BYTES {
            return Err(Error::BadMessage { from: None, what });
        }
        let (handle, rest) = bytes.split_at(HANDLE_BYTES);
        let u32_at = |i: usize| u32::from_le_bytes(rest[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(rest[i..i + 8].try_into().expect("8 bytes"));
        Ok(Self {
            handle: handle.try_into().expect("HANDLE_BYTES bytes"),
            pid: u32_at(0),
            ordinal: u32_at(4),
            ptr: u64_at(8),
            len: u64_at(16),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipc_export_bytes_roundtrip() {
        let e = IpcExport {
            handle: [7; 64],
            pid: 1234,
            ordinal: 3,
            ptr: 0x7f00_0000_1000,
            len: 4096,
        };
        let bytes = e.encode();
        assert_eq!(bytes.len(), IpcExport::BYTES);
        for what in ["CUDA IPC export", "HIP IPC export"] {
            assert_eq!(IpcExport::decode(&bytes, what).unwrap(), e);
            assert!(matches!(
                IpcExport::decode(&bytes[1..], what),
                Err(Error::BadMessage { from: None, .. })
            ));
        }
    }
}
