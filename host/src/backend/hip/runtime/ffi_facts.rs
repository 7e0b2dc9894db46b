//! The facts about HIP's C ABI that the runtime module relies on (sizes, offsets, flag
//! values, result codes), listed for `tests/tests/hip_layout.rs` to compare with the
//! installed headers.

use super::*;

/// One fact the backend relies on about the C ABI of HIP: a C expression over the
/// installed headers, how it must compare with this crate's value, and that value.
#[derive(Clone, Copy, Debug)]
pub struct FfiFact {
    /// A C expression (compiled with `#include <hip/hip_runtime_api.h>`).
    pub c_expr: &'static str,
    /// How the C value must relate to [`FfiFact::rust`].
    pub relation: Relation,
    /// The value this crate uses (from the 5.4 bindings or this module's constants).
    pub rust: u64,
    /// The HIP major versions whose headers the fact applies to (inclusive range).
    pub hip_major: (u32, u32),
}

/// How a C value relates to the Rust one in an [`FfiFact`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    /// Equal.
    Eq,
    /// The C value is at most the Rust one (a size that must fit a buffer).
    AtMost,
}

const fn fact(c_expr: &'static str, rust: usize, hip_major: (u32, u32)) -> FfiFact {
    FfiFact {
        c_expr,
        relation: Relation::Eq,
        rust: rust as u64,
        hip_major,
    }
}

const ANY: (u32, u32) = (5, u32::MAX);
const V5: (u32, u32) = (5, 5);
const V6: (u32, u32) = (6, u32::MAX);

/// Every size, offset and constant this backend passes across the FFI, for the layout
/// test to compare with the installed headers (`tests/tests/hip_layout.rs`).
pub const FFI_FACTS: &[FfiFact] = &[
    fact("sizeof(hipError_t)", size_of::<Rc>(), ANY),
    fact("sizeof(hipDevice_t)", size_of::<sys::hipDevice_t>(), ANY),
    fact(
        "sizeof(hipDeviceptr_t)",
        size_of::<sys::hipDeviceptr_t>(),
        ANY,
    ),
    fact("sizeof(hipStream_t)", size_of::<sys::hipStream_t>(), ANY),
    fact("sizeof(hipModule_t)", size_of::<sys::hipModule_t>(), ANY),
    fact(
        "sizeof(hipFunction_t)",
        size_of::<sys::hipFunction_t>(),
        ANY,
    ),
    fact("sizeof(hipGraph_t)", size_of::<sys::hipGraph_t>(), ANY),
    fact(
        "sizeof(hipGraphExec_t)",
        size_of::<sys::hipGraphExec_t>(),
        ANY,
    ),
    fact(
        "sizeof(hipGraphNode_t)",
        size_of::<sys::hipGraphNode_t>(),
        ANY,
    ),
    fact(
        "sizeof(hipStreamCaptureMode)",
        size_of::<sys::hipStreamCaptureMode>(),
        ANY,
    ),
    fact("sizeof(size_t)", size_of::<usize>(), ANY),
    fact(
        "sizeof(hipIpcMemHandle_t)",
        size_of::<sys::hipIpcMemHandle_t>(),
        ANY,
    ),
    fact(
        "_Alignof(hipIpcMemHandle_t)",
        std::mem::align_of::<sys::hipIpcMemHandle_t>(),
        ANY,
    ),
    fact(
        "offsetof(hipIpcMemHandle_t, reserved)",
        offset_of!(sys::hipIpcMemHandle_t, reserved),
        ANY,
    ),
    fact("HIP_IPC_HANDLE_SIZE", IPC_HANDLE_BYTES, ANY),
    // The 5.x device-properties layout: `hipDeviceProp_t` in 5.x headers, kept as
    // `hipDeviceProp_tR0000` by 6.x headers (hip_deprecated.h).
    fact(
        "sizeof(hipDeviceProp_t)",
        size_of::<sys::hipDeviceProp_t>(),
        V5,
    ),
    fact(
        "offsetof(hipDeviceProp_t, name)",
        offset_of!(sys::hipDeviceProp_t, name),
        V5,
    ),
    fact(
        "sizeof(((hipDeviceProp_t*)0)->name)",
        size_of::<[c_char; 256]>(),
        V5,
    ),
    fact(
        "offsetof(hipDeviceProp_t, gcnArchName)",
        GCN_ARCH_NAME_OFFSET_R0000,
        V5,
    ),
    fact(
        "sizeof(((hipDeviceProp_t*)0)->gcnArchName)",
        GCN_ARCH_NAME_BYTES,
        V5,
    ),
    fact(
        "offsetof(hipDeviceProp_tR0000, gcnArchName)",
        GCN_ARCH_NAME_OFFSET_R0000,
        V6,
    ),
    FfiFact {
        c_expr: "sizeof(hipDeviceProp_tR0000)",
        relation: Relation::AtMost,
        rust: DEVICE_PROP_BUFFER_BYTES as u64,
        hip_major: V6,
    },
    fact(
        "offsetof(hipDeviceProp_tR0600, gcnArchName)",
        GCN_ARCH_NAME_OFFSET_R0600,
        V6,
    ),
    fact(
        "sizeof(((hipDeviceProp_tR0600*)0)->gcnArchName)",
        GCN_ARCH_NAME_BYTES,
        V6,
    ),
    FfiFact {
        c_expr: "sizeof(hipDeviceProp_tR0600)",
        relation: Relation::AtMost,
        rust: DEVICE_PROP_BUFFER_BYTES as u64,
        hip_major: V6,
    },
    // Flags and parameter tags passed in.
    fact(
        "hipDeviceMallocFinegrained",
        MALLOC_FINE_GRAINED as usize,
        ANY,
    ),
    fact("hipStreamNonBlocking", STREAM_NON_BLOCKING as usize, ANY),
    fact(
        "hipStreamCaptureModeThreadLocal",
        STREAM_CAPTURE_MODE_THREAD_LOCAL as usize,
        ANY,
    ),
    fact("hipHostMallocPortable", HOST_MALLOC_PORTABLE as usize, ANY),
    fact("hipHostMallocMapped", HOST_MALLOC_MAPPED as usize, ANY),
    fact("hipHostMallocCoherent", HOST_MALLOC_COHERENT as usize, ANY),
    fact(
        "hipIpcMemLazyEnablePeerAccess",
        IPC_LAZY_ENABLE_PEER_ACCESS_V5 as usize,
        V5,
    ),
    fact(
        "hipIpcMemLazyEnablePeerAccess",
        IPC_LAZY_ENABLE_PEER_ACCESS_V6 as usize,
        V6,
    ),
    fact(
        "(uintptr_t)HIP_LAUNCH_PARAM_BUFFER_POINTER",
        LAUNCH_PARAM_BUFFER_POINTER,
        ANY,
    ),
    fact(
        "(uintptr_t)HIP_LAUNCH_PARAM_BUFFER_SIZE",
        LAUNCH_PARAM_BUFFER_SIZE,
        ANY,
    ),
    fact("(uintptr_t)HIP_LAUNCH_PARAM_END", LAUNCH_PARAM_END, ANY),
    // Result codes matched on.
    fact("hipSuccess", SUCCESS as usize, ANY),
    fact("hipErrorInvalidValue", INVALID_VALUE as usize, ANY),
    fact("hipErrorNoDevice", NO_DEVICE as usize, ANY),
    fact("hipErrorInvalidDevice", INVALID_DEVICE as usize, ANY),
    fact(
        "hipErrorPeerAccessAlreadyEnabled",
        PEER_ACCESS_ALREADY_ENABLED as usize,
        ANY,
    ),
    fact("hipErrorNotFound", NOT_FOUND as usize, ANY),
];

/// The HIP version of the bindings the types and constants above come from
/// (`HIP_VERSION` of `hip-sys` 0.1.2: 5.4).
pub const BINDINGS_HIP_VERSION: u32 = sys::HIP_VERSION;
