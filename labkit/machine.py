"""The learner's machine, shown: what the course will run on, and which lessons change on it.

    python -m labkit.machine            # or, in a notebook: print(labkit.machine.report())

Pure at its core (layer 1): every decision is a function of a `Facts` record (CPU model and
flags, the instruction set torch's kernels use, oneDNN's bf16/fp16 support, cores, GPUs, torch's
version), so tests feed it any machine. `probe()` alone reads this machine (``/proc/cpuinfo``,
``torch.backends.cpu.get_cpu_capability()``, ``torch.cuda``); it imports torch when called.

What changes from one machine to another, and why:

- **bf16 matrix products** run on oneDNN's kernels when torch reports bf16 support for oneDNN
  (``torch.ops.mkldnn._is_mkldnn_bf16_supported()``; on x86 that is AVX-512 or newer, within
  ``ONEDNN_MAX_CPU_ISA``). With native bf16 instructions (AVX512_BF16, AMX-BF16: Intel Cooper
  Lake, Sapphire Rapids and later, AMD Zen 4 and later) bf16 is *faster* than fp32; on AVX-512
  without them oneDNN converts to fp32 and bf16 is about as fast or somewhat slower; without
  oneDNN's bf16 (AVX2 CPUs) torch falls back to a generic loop, many times slower. bf16 halves
  the bytes of what it stores on every machine. torch's bf16 matmul follows
  ``ONEDNN_MAX_CPU_ISA`` (oneDNN's cap), not ``ATEN_CPU_CAPABILITY`` (which picks torch's own
  vectorised kernels: element-wise ops, reductions).
- **fp16 matrix products** on a CPU are native only with AVX512_FP16 or AMX-FP16 (Intel Sapphire
  Rapids and later) where oneDNN reports fp16 support; elsewhere they are a generic loop. On a
  GPU both 16-bit formats run on tensor cores.
- **threads**: a local `Cluster(n)` gives each rank ``max(1, cores // n)`` threads (the
  runtime's `fair_threads`), so n ranks on fewer cores share them: timings move, bytes and FLOPs
  do not.
- **backend**: ``backend="auto"`` is NCCL with one GPU per rank, else gloo on the CPU
  (`labkit.runtime.gpus.choose_backend`, reused here).
"""
from __future__ import annotations

import dataclasses
import os
import platform

from labkit.i18n import tr

WORLD_SIZE = 4                         # the course's usual cluster

# oneDNN's ISA names in increasing order (its ONEDNN_MAX_CPU_ISA values, x86)
ONEDNN_ISAS = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE", "AVX512_CORE_VNNI",
               "AVX512_CORE_BF16", "AVX10_1_512", "AVX512_CORE_FP16", "AVX10_1_512_AMX",
               "AVX512_CORE_AMX", "AVX10_1_512_AMX_FP16", "AVX512_CORE_AMX_FP16")
_BF16_ISA, _FP16_ISA = ONEDNN_ISAS.index("AVX512_CORE_BF16"), ONEDNN_ISAS.index("AVX512_CORE_FP16")
X86_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
X86_FP16_FLAGS = ("avx512_fp16", "amx_fp16")
ARM_BF16_FLAGS = ("bf16",)
ARM_FP16_FLAGS = ("fphp", "asimdhp")

# what a bf16 matrix product costs against fp32's, by kind (see bf16_matmul): the band of the
# ratio bf16 time / fp32 time that the kind predicts on a CPU (notebook 09 measures it). The
# bands are far apart: native instructions measured about 0.25x, oneDNN converting on AVX-512
# about 1.6x, the generic loop 100x to 200x (n = 256, one thread, AMD EPYC with each
# ONEDNN_MAX_CPU_ISA); a result outside its band contradicts what the hardware query said.
BF16_BANDS = {"native": (0.0, 1.0), "converted": (0.5, 5.0), "generic": (5.0, float("inf"))}


@dataclasses.dataclass(frozen=True)
class Facts:
    """Everything the report is made of (probe() reads it; tests make one up)."""
    cpu_model: str = "unknown CPU"
    arch: str = "x86_64"               # platform.machine()
    flags: frozenset = frozenset()     # the CPU's feature flags (x86 'flags', ARM 'Features')
    capability: str = "DEFAULT"        # torch.backends.cpu.get_cpu_capability()
    onednn_max_isa: str | None = None  # ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) if set
    mkldnn_bf16: bool = False          # torch.ops.mkldnn._is_mkldnn_bf16_supported()
    mkldnn_fp16: bool = False          # torch.ops.mkldnn._is_mkldnn_fp16_supported()
    cores: int = 1                     # cores this process may run on
    gpus: tuple = ()                   # names of the GPUs torch sees (CUDA_VISIBLE_DEVICES applied)
    cvd: str | None = None             # CUDA_VISIBLE_DEVICES, None if unset
    cuda_build: bool = False           # torch.version.cuda is not None
    torch_version: str = "?"


def parse_cpuinfo(text: str) -> tuple:
    """(model name, frozenset of feature flags) from the text of ``/proc/cpuinfo`` (x86: 'model
    name' and 'flags'; ARM: 'Features', and 'Hardware' or 'CPU part' for a name)."""
    model, flags, part = "", set(), ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "model name" and not model:
            model = value
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
        elif key == "hardware" and not model:
            model = value
        elif key == "cpu part" and not part:
            part = value
    if not model and part:
        model = f"ARM CPU part {part}"
    return model or "unknown CPU", frozenset(flags)


def _x86(f: Facts) -> bool:
    return f.arch.lower() in ("x86_64", "amd64", "i686", "i386")


def _isa_allows(f: Facts, index: int) -> bool:
    """Whether ONEDNN_MAX_CPU_ISA (if set) lets oneDNN use the ISA at `index` of ONEDNN_ISAS."""
    if not f.onednn_max_isa or f.onednn_max_isa.upper() in ("ALL", "DEFAULT"):
        return True
    cap = f.onednn_max_isa.upper()
    return cap in ONEDNN_ISAS and ONEDNN_ISAS.index(cap) >= index


def bf16_matmul(f: Facts) -> str:
    """How this CPU multiplies bf16 matrices: 'native' (oneDNN with bf16 instructions),
    'converted' (oneDNN on AVX-512 without them: converts to fp32), 'generic' (no oneDNN bf16:
    torch's generic loop), or 'unknown' (not x86: no prediction made here)."""
    if not _x86(f):
        return "unknown"
    if not f.mkldnn_bf16:
        return "generic"
    native = any(x in f.flags for x in X86_BF16_FLAGS) and _isa_allows(f, _BF16_ISA)
    return "native" if native else "converted"


def fp16_matmul(f: Facts) -> str:
    """'native' (oneDNN with AVX512_FP16/AMX-FP16), 'generic', or 'unknown' (not x86)."""
    if not _x86(f):
        return "unknown"
    native = f.mkldnn_fp16 and any(x in f.flags for x in X86_FP16_FLAGS) and _isa_allows(f, _FP16_ISA)
    return "native" if native else "generic"


def bf16_expected(kind: str) -> tuple | None:
    """The band (low, high) of bf16 time / fp32 time that `kind` predicts, None for 'unknown'."""
    return BF16_BANDS.get(kind)


def threads_per_rank(cores: int, world_size: int = WORLD_SIZE) -> int:
    """What a local Cluster gives each rank (labkit.runtime.local.procs.fair_threads)."""
    return max(1, cores // world_size)


def backend(f: Facts, world_size: int = WORLD_SIZE):
    """`labkit.runtime.gpus.Choice` for `world_size` local ranks on this machine."""
    from labkit.runtime import gpus
    return gpus.choose_backend("auto", world_size, len(f.gpus) if f.cuda_build else 0, f.cvd)


def _has(f: Facts, names) -> list:
    return [x for x in names if x in f.flags]


def bf16_line(f: Facts, kind: str = None) -> str:
    """One line: how this CPU multiplies bf16 matrices, and why."""
    kind = kind or bf16_matmul(f)
    found = ", ".join(_has(f, X86_BF16_FLAGS + ARM_BF16_FLAGS))
    if kind == "native":
        return tr("bf16 matrix products: native ({flags} in the CPU's flags; oneDNN has bf16 kernels)",
                  flags=found)
    if kind == "converted":
        why = (tr("ONEDNN_MAX_CPU_ISA={cap} keeps oneDNN below its bf16 instructions", cap=f.onednn_max_isa)
               if found else tr("no avx512_bf16 or amx_bf16 in the CPU's flags"))
        return tr("bf16 matrix products: converted to fp32 by oneDNN ({why})", why=why)
    if kind == "generic":
        return tr("bf16 matrix products: emulated by torch's generic loop (oneDNN reports no bf16 support "
                  "on this CPU{cap})", cap=f", ONEDNN_MAX_CPU_ISA={f.onednn_max_isa}" if f.onednn_max_isa else "")
    return tr("bf16 matrix products: no prediction for a {arch} CPU (bf16 in its features: {has}; "
              "oneDNN bf16: {mk})", arch=f.arch, has="yes" if found else "no", mk=f.mkldnn_bf16)


def fp16_line(f: Facts, kind: str = None) -> str:
    """One line: how this CPU multiplies fp16 matrices, and why."""
    kind = kind or fp16_matmul(f)
    found = ", ".join(_has(f, X86_FP16_FLAGS + ARM_FP16_FLAGS))
    if kind == "native":
        return tr("fp16 matrix products: native ({flags}; oneDNN has fp16 kernels)", flags=found)
    if kind == "generic":
        return tr("fp16 matrix products: emulated by torch's generic loop (no avx512_fp16 or amx_fp16 "
                  "that oneDNN uses here)")
    return tr("fp16 matrix products: no prediction for a {arch} CPU (fp16 in its features: {has})",
              arch=f.arch, has=found or "none")


def lessons(f: Facts, world_size: int = WORLD_SIZE) -> list:
    """The sentences of the course that depend on this machine, worded for it."""
    out = []
    kind = bf16_matmul(f)
    if kind == "native":
        out.append(tr("bf16 is faster than fp32 here (native bf16 instructions); it halves the bytes "
                      "everywhere (notebook 09 section 1 measures both)"))
    elif kind == "converted":
        out.append(tr("bf16 is about as fast as fp32 here or somewhat slower, not faster (no bf16 "
                      "instructions: oneDNN converts); it still halves the bytes (notebook 09 section 1)"))
    elif kind == "generic":
        out.append(tr("bf16 is many times slower than fp32 here (no bf16 kernels), though it halves the "
                      "bytes: bf16 runs in the notebooks are slow for that reason (notebook 09 section 1)"))
    else:
        out.append(tr("bf16's speed here is not predicted: notebook 09 section 1 measures it; it halves "
                      "the bytes everywhere"))
    if fp16_matmul(f) == "generic":
        out.append(tr("fp16 matrix products are slow on this CPU: notebook 09 section 7 teaches fp16's "
                      "range and loss scaling, not its speed (on a GPU fp16 runs on tensor cores)"))
    t = threads_per_rank(f.cores, world_size)
    if f.cores < world_size:
        out.append(tr("{n} ranks share {cores} core(s): a rank waits for a core, so timings move from "
                      "run to run; read every time with its spread; bytes, FLOPs and calls are exact",
                      n=world_size, cores=f.cores))
    else:
        out.append(tr("each of {n} ranks has {t} thread(s) of its own: timings are steadier, still read "
                      "them with their spread", n=world_size, t=t))
    if backend(f, world_size).backend == "nccl":
        out.append(tr("NCCL on GPUs: the overlap of communication with compute and the bus bandwidth "
                      "are your GPUs' links, measured in notebooks 02 and 03: expect other ratios than a CPU's"))
    else:
        out.append(tr("no GPU for the ranks: NCCL, tensor cores and PCIe copies (offload) are described, "
                      "not measured; gloo's bandwidth is this machine's memory and loopback"))
    return out


def report(f: Facts = None, world_size: int = WORLD_SIZE) -> str:
    """The machine in a few lines, then the lessons that change on it."""
    f = f or probe()
    choice = backend(f, world_size)
    t = threads_per_rank(f.cores, world_size)
    cap_env = os.environ.get("ATEN_CPU_CAPABILITY")
    lines = [
        tr("The machine this course runs on"),
        "  " + tr("CPU: {model} ({arch}), {cores} core(s) for this notebook",
                  model=f.cpu_model, arch=f.arch, cores=f.cores),
        "  " + tr("torch {v}: its CPU kernels use {cap} (torch.backends.cpu.get_cpu_capability(){env})",
                  v=f.torch_version, cap=f.capability,
                  env=f"; ATEN_CPU_CAPABILITY={cap_env}" if cap_env else ""),
        "  " + bf16_line(f),
        "  " + fp16_line(f),
        "  " + tr("GPUs visible: {n}{names}", n=len(f.gpus) if f.cuda_build else 0,
                  names=f" ({', '.join(f.gpus)})" if f.gpus and f.cuda_build else ""),
        "  " + tr("Cluster({n}): backend {b}, {t} thread(s) per rank, {g} GPU(s) per rank",
                  n=world_size, b=choice.backend, t=t, g=1 if choice.backend == "nccl" else 0),
    ]
    if choice.note:
        lines.append("    " + choice.note)
    elif choice.backend == "gloo":
        lines.append("    " + tr("gloo on the CPU: no GPU visible (backend='auto' needs one GPU per rank for NCCL)"))
    else:
        lines.append("    " + tr("NCCL: one visible GPU per rank"))
    lines.append(tr("What changes on this machine:"))
    lines += [f"  - {x}" for x in lessons(f, world_size)]
    return "\n".join(lines)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                     # macOS
        return os.cpu_count() or 1


def _mac_facts() -> tuple:
    """(model, flags) on macOS from sysctl (no /proc/cpuinfo there)."""
    import subprocess
    def sysctl(name):
        r = subprocess.run(["sysctl", "-n", name], capture_output=True, text=True)
        return r.stdout.strip() if r.returncode == 0 else ""
    flags = {x for x, key in (("bf16", "hw.optional.arm.FEAT_BF16"), ("fphp", "hw.optional.arm.FEAT_FP16"))
             if sysctl(key) == "1"}
    return sysctl("machdep.cpu.brand_string") or platform.processor() or "unknown CPU", frozenset(flags)


def _query(name: str) -> bool:
    import torch
    try:
        return bool(getattr(torch.ops.mkldnn, name)())
    except (AttributeError, RuntimeError):
        return False


def probe() -> Facts:
    """This machine's Facts (imports torch)."""
    import torch
    try:
        with open("/proc/cpuinfo") as fh:
            model, flags = parse_cpuinfo(fh.read())
    except OSError:
        model, flags = _mac_facts() if platform.system() == "Darwin" else (platform.processor() or "unknown CPU",
                                                                          frozenset())
    cuda = torch.cuda.is_available()
    gpus = tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())) if cuda else ()
    return Facts(cpu_model=model, arch=platform.machine(), flags=flags,
                 capability=torch.backends.cpu.get_cpu_capability(),
                 onednn_max_isa=os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA"),
                 mkldnn_bf16=_query("_is_mkldnn_bf16_supported"), mkldnn_fp16=_query("_is_mkldnn_fp16_supported"),
                 cores=_cores(), gpus=gpus, cvd=os.environ.get("CUDA_VISIBLE_DEVICES"),
                 cuda_build=torch.version.cuda is not None, torch_version=torch.__version__)


def main() -> int:
    print(report(probe()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
