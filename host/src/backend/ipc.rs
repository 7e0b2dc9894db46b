//! The bytes a GPU backend puts in [`Shareable::bytes`](super::Shareable) for an IPC
//! export (`cuIpcGetMemHandle`, `hipIpcGetMemHandle`): the 64-byte handle, and who made
//! it (pid, device ordinal) and what it covers (pointer, length), so an importer in the
//! exporting process can alias the pointer instead of opening its own handle, which
//! both runtimes refuse. A handle names a whole allocation; `offset` says where in it the
//! exported range starts (0 for symmem's own allocations, the application's range
//! otherwise: [`crate::World::register`]).

use super::{Sender, Shareable};
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
    /// Where the exported range starts in the allocation, in bytes.
    pub offset: u64,
}

impl IpcExport {
    /// Encoded size: handle, pid, ordinal, pointer, length, offset (little-endian).
    pub const BYTES: usize = HANDLE_BYTES + 4 + 4 + 8 + 8 + 8;

    /// The encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::BYTES);
        out.extend_from_slice(&self.handle);
        out.extend_from_slice(&self.pid.to_le_bytes());
        out.extend_from_slice(&self.ordinal.to_le_bytes());
        out.extend_from_slice(&self.ptr.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out
    }

    /// What a peer needs to map the range from byte `offset` of the allocation of `len`
    /// bytes at `ptr`, memory of device `ordinal` of this process exported as `handle`.
    pub fn shareable(
        handle: [u8; HANDLE_BYTES],
        ordinal: usize,
        ptr: u64,
        len: usize,
        offset: u64,
    ) -> Shareable {
        let export = Self {
            handle,
            pid: std::process::id(),
            ordinal: ordinal as u32,
            ptr,
            len: len as u64,
            offset,
        };
        Shareable {
            bytes: export.encode(),
            fd: None,
        }
    }

    /// Decodes a peer's export (`what`, named in errors: "CUDA IPC export") of which the
    /// importer maps `bytes` from its offset: [`Error::BadPeerMemory`] unless the
    /// allocation covers them.
    pub fn decode_covering(
        shareable: &Shareable,
        what: &'static str,
        bytes: usize,
    ) -> Result<Self> {
        let export = Self::decode(&shareable.bytes, what)?;
        let end = export.offset.checked_add(bytes as u64);
        if bytes == 0 || end.is_none_or(|end| end > export.len) {
            return Err(Error::BadPeerMemory {
                needed: bytes,
                size: export.len,
                why: "the peer exported less device memory than this rank maps",
            });
        }
        Ok(export)
    }

    /// False for an export of memory the runtime gives no IPC handle (its handle bytes
    /// are all zero, which no runtime's handle is): only the exporting process can map it.
    pub fn has_handle(&self) -> bool {
        self.handle != [0; HANDLE_BYTES]
    }

    /// The handle another process opens the export with, or [`Error::NotShareable`]
    /// (`why`: which memory has none, and what to do) for an export without one
    /// ([`IpcExport::has_handle`]), of which the importer maps `bytes`.
    pub fn handle_to_open(&self, bytes: usize, why: &str) -> Result<&[u8; HANDLE_BYTES]> {
        if self.has_handle() {
            return Ok(&self.handle);
        }
        Err(Error::NotShareable {
            addr: self.ptr.wrapping_add(self.offset),
            bytes,
            why: why.to_owned(),
        })
    }

    /// True when this process made the export (where the runtimes refuse to open it).
    pub fn is_from_this_process(&self) -> bool {
        self.pid == std::process::id()
    }

    /// [`Error::BadPeerMemory`] unless the export's claim of where it comes from agrees
    /// with `sender`, who sent it as the world verified it: an export names this process
    /// (and so is aliased, as a pointer of this process) exactly when its rank is a
    /// verified thread of it. `bytes`: what the importer maps.
    pub fn check_sender(&self, sender: Sender, bytes: usize) -> Result<()> {
        let why = match (self.is_from_this_process(), sender) {
            (true, Sender::ThisProcess) | (false, Sender::Elsewhere) => return Ok(()),
            (true, Sender::Elsewhere) => {
                "the export names this process, but the rank that sent it is not verified \
                 to be a thread of this process"
            }
            (false, Sender::ThisProcess) => {
                "the export names another process, but the rank that sent it is a thread of \
                 this process"
            }
        };
        Err(Error::BadPeerMemory {
            needed: bytes,
            size: self.len,
            why,
        })
    }

    /// [`Error::BadPeerMemory`] unless the allocation the runtime opened for this export
    /// at `opened` holds what is mapped: `real` is its base and size as the runtime says
    /// (`cuMemGetAddressRange`, `hipMemGetAddressRange`), whatever the export claimed, and
    /// the handle opens a whole allocation, so `real` must start at `opened` and hold the
    /// export's offset plus `bytes`.
    pub fn check_opened(&self, opened: u64, real: (u64, usize), bytes: usize) -> Result<()> {
        let (base, size) = real;
        let end = self.offset.checked_add(bytes as u64);
        if base == opened && end.is_some_and(|end| end <= size as u64) {
            return Ok(());
        }
        Err(Error::BadPeerMemory {
            needed: bytes,
            size: size as u64,
            why: "the allocation the peer's IPC handle opens is smaller than the range it \
                  exported (the runtime's size, not the peer's claim)",
        })
    }

    /// Decodes `bytes` from a peer: an export (`what`, named in the error: "CUDA IPC
    /// export") of [`IpcExport::BYTES`] bytes, else [`Error::BadMessage`].
    pub fn decode(bytes: &[u8], what: &'static str) -> Result<Self> {
        let fields = || {
            let (handle, rest) = bytes.split_first_chunk::<HANDLE_BYTES>()?;
            let (pid, rest) = rest.split_first_chunk()?;
            let (ordinal, rest) = rest.split_first_chunk()?;
            let (ptr, rest) = rest.split_first_chunk()?;
            let (len, offset) = rest.split_first_chunk()?;
            Some(Self {
                handle: *handle,
                pid: u32::from_le_bytes(*pid),
                ordinal: u32::from_le_bytes(*ordinal),
                ptr: u64::from_le_bytes(*ptr),
                len: u64::from_le_bytes(*len),
                // Exactly what is left: nothing may follow.
                offset: u64::from_le_bytes(offset.try_into().ok()?),
            })
        };
        fields().ok_or(Error::BadMessage { from: None, what })
    }
}

/// Decodes `bytes` from a peer as an IPC export, and as one covering `covering` bytes,
/// checking that each is a typed error or re-encodes to the very bytes it came from. The
/// oracle of the property tests below and, with the CUDA heap's, of the `shareable` fuzz
/// target ([`super::check_handle_bytes`]).
///
/// # Panics
/// Where a decode breaks that.
#[cfg(any(test, fuzzing))]
pub(crate) fn check_export_bytes(bytes: &[u8], covering: usize) {
    let what = "IPC export";
    match IpcExport::decode(bytes, what) {
        Ok(export) => assert_eq!(export.encode(), bytes),
        Err(e) => assert!(matches!(e, Error::BadMessage { from: None, .. }), "{e:?}"),
    }
    let shareable = Shareable {
        bytes: bytes.to_vec(),
        fd: None,
    };
    match IpcExport::decode_covering(&shareable, what, covering) {
        Ok(export) => assert!(
            covering > 0
                && export
                    .offset
                    .checked_add(covering as u64)
                    .is_some_and(|end| end <= export.len)
        ),
        Err(Error::BadPeerMemory { needed, size, .. }) => {
            let fits = bytes
                .get(HANDLE_BYTES + 24..)
                .and_then(|o| o.try_into().ok())
                .map(u64::from_le_bytes)
                .and_then(|offset| offset.checked_add(covering as u64))
                .is_some_and(|end| end <= size);
            assert!(needed == covering && (covering == 0 || !fits));
        }
        Err(e) => assert!(matches!(e, Error::BadMessage { from: None, .. }), "{e:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bad_bytes::bytes_near;
    use proptest::prelude::*;

    fn export() -> impl Strategy<Value = IpcExport> {
        any::<([u8; 32], [u8; 32], u32, u32, u64, u64, u64)>().prop_map(
            |(a, b, pid, ordinal, ptr, len, offset)| {
                let mut handle = [0; HANDLE_BYTES];
                handle[..32].copy_from_slice(&a);
                handle[32..].copy_from_slice(&b);
                IpcExport {
                    handle,
                    pid,
                    ordinal,
                    ptr,
                    len,
                    offset,
                }
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn any_handle_bytes_decode_or_are_a_typed_error(
            bytes in prop_oneof![
                bytes_near(export().prop_map(|e| e.encode())),
                bytes_near(any::<u64>().prop_map(|s| s.to_le_bytes().to_vec())),
            ],
            covering in prop_oneof![Just(0usize), any::<usize>(), 1usize..4096],
        ) {
            check_export_bytes(&bytes, covering);
        }

        #[test]
        fn exports_round_trip(e in export()) {
            prop_assert_eq!(IpcExport::decode(&e.encode(), "IPC export").unwrap(), e);
        }
    }

    #[test]
    fn ipc_export_bytes_roundtrip() {
        let e = IpcExport {
            handle: [7; 64],
            pid: 1234,
            ordinal: 3,
            ptr: 0x7f00_0000_1000,
            len: 4096,
            offset: 256,
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
