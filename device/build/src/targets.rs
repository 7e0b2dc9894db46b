//! GPU targets: the processor names a build is for ([`Target`], [`Family`]), the
//! default list and the environment variable that overrides it, and the detection of
//! the build machine's GPUs ([`detected_targets`]). See [Targets](crate#targets).

use std::fmt;
use std::process::Command;
use std::str::FromStr;

use crate::BuildError;
#[cfg(doc)]
use crate::{KernelCrate, PINNED_NIGHTLY};

/// The environment variable that, when set, replaces the target list of every
/// [`KernelCrate`]: comma-separated processor names (`gfx942,sm_80`), or [`ALL_DEFAULTS`]
/// for [`DEFAULT_TARGETS`]. Set but empty, no code object is built (the table is empty).
/// See [Targets](crate#targets).
pub const TARGETS_ENV: &str = "SYMMEM_GPU_TARGETS";

/// The value of [`TARGETS_ENV`] that builds every one of [`DEFAULT_TARGETS`], whatever
/// GPUs the build machine has: for binaries shipped to other machines, and for symmem's
/// own CI, which checks every default target's code.
pub const ALL_DEFAULTS: &str = "default";

/// The targets a [`KernelCrate`] is built for unless [`KernelCrate::targets`] or
/// [`TARGETS_ENV`] says otherwise (see [Targets](crate#targets)): every processor whose
/// code symmem's codegen checks (`tests/tests/codegen*.rs`) prove, each for a reason.
///
/// * `sm_80`, PTX ISA 7.0: every NVIDIA GPU from the A100 on (sm_86, sm_89, sm_90,
///   sm_100, sm_120 JIT it); the PTX loads on any driver from CUDA 11.0 (r450) on, and
///   symmem's CUDA backend needs CUDA 11.4 for its own calls (see the README). No kernel needs
///   more: the newest instructions in them are the scoped, ordered memory operations of
///   the atomics, signals and bounded waits (`atom`/`red`/`ld`/`st` with
///   `.relaxed`/`.acquire`/`.release` and `.cta`/`.gpu`/`.sys`, `fence.sc`,
///   `fence.acq_rel`: sm_70, PTX 6.0), `%globaltimer` (PTX 3.1) and `brx.idx` (PTX
///   6.0); bf16 is converted with integer operations and reduced in f32; no multimem,
///   cluster, `fence.proxy`, `st.async` or `cp.async` appears (the codegen checks fail
///   on those for a target older than sm_90). 7.0 is the oldest ISA llc accepts for sm_80 and
///   rustc's floor for nvptx64; CUDA 11.8's ptxas assembles every kernel crate's sm_80
///   PTX for sm_80, sm_86, sm_89 and sm_90.
/// * No separate `sm_90`: built for sm_90 (ISA 7.8, the oldest llc accepts for it) the
///   PTX of every kernel crate is the sm_80 PTX line for line but for `.target`,
///   `.version` and the spelling of a discarded half in `mov.b64 {lo, hi}` (a scoped
///   `.reg` before ISA 7.1, `_` from 7.1); ptxas (CUDA 11.8) compiles the two to the same
///   sm_90 machine code but for the 64-bit division helper of three bf16 reductions (48
///   to 80 bytes; measured with LLVM 23.1.1, December 2026). So it would cost a nested
///   build of `core` and the kernels per kernel crate build and change nothing that
///   matters. A kernel that needs Hopper (multimem for NVLink SHARP, TMA, clusters)
///   brings it back, and the CUDA backend then loads it on sm_90 devices and the sm_80
///   PTX on older ones.
/// * `gfx942`, `gfx950` (MI300, MI350): release and acquire are `buffer_wbl2`/
///   `buffer_inv` with scope bits, every write-back waited for (`s_waitcnt vmcnt(0)`).
/// * `gfx90a` (MI200): a memory model of its own (LLVM's AMDGPUUsage, "Memory Model
///   GFX90A"): no scope bits in the instructions; a system-scope release is
///   `buffer_wbl2` (no bits) then `s_waitcnt vmcnt(0)`, an acquire `buffer_invl2;
///   buffer_wbinvl1_vol`; at agent scope the L2 is coherent already (a release only
///   waits, an acquire is `buffer_wbinvl1_vol`). Served correctly: every `buffer_wbl2`
///   is waited for in every object (the codegen checks walk them; the deleted wait of
///   llvm/llvm-project#178316 does not occur with [`PINNED_NIGHTLY`]), and the relaxed
///   system-scope stores and loads of the barrier-free all-reduce (plain stores, `glc`
///   loads there, where gfx94x has `sc0 sc1`) reach a peer because the HIP backend's
///   heap is fine-grained memory: local pages write through to DRAM (MTYPE CC) and are
///   invalidated by a peer's writes (probes), a peer's pages bypass the L2 (MTYPE UC).
///
/// AMD ISAs are not forward-compatible: another AMD processor needs its own target, and
/// the codegen checks must know its memory model first.
pub const DEFAULT_TARGETS: [&str; 4] = ["gfx90a", "gfx942", "gfx950", "sm_80"];

/// The GPU instruction-set families symmem builds for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Family {
    /// AMD GPUs, `amdgcn-amd-amdhsa`; code objects are ELF `.hsaco` files.
    Amdgpu,
    /// NVIDIA GPUs, `nvptx64-nvidia-cuda`; code objects are PTX text.
    Nvptx,
}

/// One GPU target: a family and a processor name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// The instruction-set family.
    pub family: Family,
    /// The processor (`gfx942`, `sm_80`): the code object runs on it (PTX also on newer
    /// NVIDIA GPUs).
    pub cpu: String,
}

impl Target {
    /// The target for processor `cpu`: a name starting with `gfx` is amdgcn, one
    /// starting with `sm_` nvptx64 (the rest of the name letters and digits); anything
    /// else is [`BuildError::UnknownTarget`].
    pub fn new(cpu: &str) -> Result<Self, BuildError> {
        let cpu = cpu.trim();
        let unknown = || BuildError::UnknownTarget {
            name: cpu.to_owned(),
        };
        let (family, rest) = if let Some(rest) = cpu.strip_prefix("gfx") {
            (Family::Amdgpu, rest)
        } else if let Some(rest) = cpu.strip_prefix("sm_") {
            (Family::Nvptx, rest)
        } else {
            return Err(unknown());
        };
        if rest.is_empty() || !rest.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(unknown());
        }
        Ok(Self {
            family,
            cpu: cpu.to_owned(),
        })
    }

    /// The rustc target triple.
    pub fn triple(&self) -> &'static str {
        match self.family {
            Family::Amdgpu => "amdgcn-amd-amdhsa",
            Family::Nvptx => "nvptx64-nvidia-cuda",
        }
    }

    /// The code object's file extension.
    pub fn extension(&self) -> &'static str {
        match self.family {
            Family::Amdgpu => "hsaco",
            Family::Nvptx => "ptx",
        }
    }

    /// The file name of crate `crate_name`'s code object for this target, e.g.
    /// `my_kernels-gfx942.hsaco`.
    pub fn file_name(&self, crate_name: &str) -> String {
        format!("{crate_name}-{}.{}", self.cpu, self.extension())
    }
}

impl FromStr for Target {
    type Err = BuildError;

    fn from_str(cpu: &str) -> Result<Self, BuildError> {
        Self::new(cpu)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.cpu)
    }
}

/// Where the kernel lists a machine's GPUs (NVIDIA's driver, AMD's KFD): a build that
/// detected its targets runs again when one of them changes.
pub(crate) const GPU_LISTS: [&str; 2] = [
    "/proc/driver/nvidia/gpus",
    "/sys/class/kfd/kfd/topology/nodes",
];

/// The targets the GPUs of this build machine need: `sm_XY` for each NVIDIA GPU of compute
/// capability X.Y (8.0 or newer; older ones have no target) that `nvidia-smi` lists, each
/// AMD processor of [`DEFAULT_TARGETS`] that `rocm_agent_enumerator` lists (others have
/// no target whose memory model the codegen checks prove), in that order, each once; none
/// where neither tool is on `PATH` or answers.
pub fn detected_targets() -> Vec<String> {
    detect_on(std::env::var_os("PATH"))
}

/// [`detected_targets`] with the tools looked up on `path` (the build's `PATH` when
/// `None`).
fn detect_on(path: Option<std::ffi::OsString>) -> Vec<String> {
    let run = |tool: &str, args: &[&str]| -> Option<String> {
        let mut command = Command::new(tool);
        command.args(args);
        if let Some(path) = &path {
            command.env("PATH", path);
        }
        let output = command.output().ok().filter(|o| o.status.success())?;
        Some(String::from_utf8_lossy(&output.stdout).into_owned())
    };
    let mut targets: Vec<String> = Vec::new();
    let nvidia = run(
        "nvidia-smi",
        &["--query-gpu=compute_cap", "--format=csv,noheader"],
    );
    for cap in nvidia.iter().flat_map(|out| out.lines()) {
        let sm = cap
            .trim()
            .split_once('.')
            .and_then(|(major, minor)| {
                Some(major.parse::<u32>().ok()? * 10 + minor.parse::<u32>().ok()?)
            })
            .filter(|&sm| sm >= 80);
        targets.extend(sm.map(|sm| format!("sm_{sm}")));
    }
    let amd = run("rocm_agent_enumerator", &[]);
    targets.extend(
        amd.iter()
            .flat_map(|out| out.split_whitespace())
            .filter(|name| name.starts_with("gfx") && DEFAULT_TARGETS.contains(name))
            .map(str::to_owned),
    );
    let mut seen = Vec::new();
    targets.retain(|t| {
        let new = !seen.contains(t);
        seen.push(t.clone());
        new
    });
    targets
}

/// The processor names in a [`TARGETS_ENV`] value: comma-separated, blanks ignored.
pub(crate) fn split_targets(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn target_names() {
        let t = Target::new("gfx942").unwrap();
        assert_eq!(
            (t.family, t.triple(), t.extension()),
            (Family::Amdgpu, "amdgcn-amd-amdhsa", "hsaco")
        );
        assert_eq!(t.file_name("my_kernels"), "my_kernels-gfx942.hsaco");
        let t: Target = "sm_90a".parse().unwrap();
        assert_eq!(
            (t.family, t.triple(), t.extension()),
            (Family::Nvptx, "nvptx64-nvidia-cuda", "ptx")
        );
        assert_eq!(t.to_string(), "sm_90a");
        assert_eq!(Target::new(" gfx950 ").unwrap().cpu, "gfx950");
        for bad in [
            "",
            "gfx",
            "sm_",
            "sm90",
            "x86-64",
            "gfx9 42",
            "sm_90/../x",
            "compute_90",
        ] {
            let e = Target::new(bad).unwrap_err();
            assert!(
                matches!(&e, BuildError::UnknownTarget { name } if name == bad.trim()),
                "{bad}: {e}"
            );
        }
        // The message names the defaults as they are.
        let e = Target::new("tpu_v5").unwrap_err().to_string();
        assert!(e.contains(&DEFAULT_TARGETS.join(", ")), "{e}");
    }

    #[test]
    fn default_targets_are_targets_of_both_families() {
        let targets: Vec<Target> = DEFAULT_TARGETS
            .iter()
            .map(|t| Target::new(t).unwrap())
            .collect();
        for family in [Family::Amdgpu, Family::Nvptx] {
            assert!(targets.iter().any(|t| t.family == family), "{family:?}");
        }
        // The oldest NVIDIA GPU symmem supports is the A100 (sm_80): PTX runs on newer ones.
        assert!(DEFAULT_TARGETS.contains(&"sm_80"));
    }

    #[test]
    fn targets_env_list() {
        assert_eq!(split_targets("gfx942, sm_90,,"), ["gfx942", "sm_90"]);
        assert!(split_targets("").is_empty());
        assert!(split_targets(" , ").is_empty());
    }

    /// A folder of stand-ins for the detection tools: `nvidia-smi` printing `nvidia`'s
    /// lines, `rocm_agent_enumerator` printing `amd`'s (each left out where `None`).
    fn fake_tools(name: &str, nvidia: Option<&str>, amd: Option<&str>) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("symmem-build-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (tool, lines) in [("nvidia-smi", nvidia), ("rocm_agent_enumerator", amd)] {
            if let Some(lines) = lines {
                let script = dir.join(tool);
                std::fs::write(&script, format!("#!/bin/sh\nprintf '{lines}'\n")).unwrap();
                std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
            }
        }
        dir
    }

    #[test]
    fn detection_builds_what_the_machine_runs() {
        // An H100 and an A100: their own PTX each.
        let nvidia = fake_tools("nvidia", Some("9.0\\n8.0\\n9.0\\n"), None);
        assert_eq!(
            detect_on(Some(nvidia.clone().into_os_string())),
            ["sm_90", "sm_80"]
        );
        // A V100 (7.0) has no target; an MI300X and the CPU agent (gfx000).
        let mixed = fake_tools(
            "mixed",
            Some("7.0\\n"),
            Some("gfx000\\ngfx942\\ngfx1100\\n"),
        );
        assert_eq!(detect_on(Some(mixed.clone().into_os_string())), ["gfx942"]);
        // No tool answers: no GPU, no code object.
        let none = fake_tools("none", None, None);
        assert!(detect_on(Some(none.clone().into_os_string())).is_empty());
        // A tool that fails (a driver not loaded) counts as none.
        let failing = fake_tools("failing", Some("x"), None);
        std::fs::write(failing.join("nvidia-smi"), "#!/bin/sh\nexit 9\n").unwrap();
        assert!(detect_on(Some(failing.clone().into_os_string())).is_empty());
        for dir in [nvidia, mixed, none, failing] {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
