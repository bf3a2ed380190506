"""The machine a run is planned for, as data, so plans can be made for hardware we are not on.

``detect_hardware()`` reads the local machine. It imports torch only when an NVIDIA driver is
present (or torch is already loaded): on a CPU box the answer comes from /proc and psutil, so
planning stays a sub-second, torch-free operation.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Fabric = Literal["none", "ethernet", "infiniband", "nvlink"]

# Dense bf16/fp16 tensor-core peak per device (TFLOP/s, no sparsity), by a substring of the
# device name. Used only for time and cost estimates; a person can override `peak_tflops`.
_GPU_PEAK_TFLOPS = {
    "B200": 2250.0,
    "H200": 989.0,
    "H100": 989.0,
    "H800": 989.0,
    "A100": 312.0,
    "A800": 312.0,
    "L40S": 362.0,
    "L40": 181.0,
    "A10": 125.0,
    "L4": 121.0,
    "V100": 125.0,
    "T4": 65.0,
}


class HardwareSpec(BaseModel):
    """One homogeneous cluster: ``nodes`` machines with ``devices_per_node`` devices each.

    On a CPU a "device" is one training process; ``device_memory_gib`` is then that process's
    share of host RAM. ``fabric`` is the link between the devices of the job (between nodes
    when ``nodes > 1``): tensor parallelism across nodes needs infiniband or nvlink.
    """

    model_config = ConfigDict(extra="forbid")

    device: Literal["cpu", "cuda"] = "cpu"
    name: str = ""
    devices_per_node: int = Field(default=1, gt=0)
    nodes: int = Field(default=1, gt=0)
    device_memory_gib: float = Field(default=8.0, gt=0)
    bf16: bool = Field(default=False, description="native bf16 math (Ampere+ GPUs; CPUs with AMX/AVX512-BF16)")
    fabric: Fabric = "none"
    memory_budget: bool = Field(
        default=False,
        description="device_memory_gib is a person's budget (budget.max_memory_gib), less than the device has",
    )
    price_per_device_hour: float = Field(default=0.0, ge=0, description="currency units per device-hour")
    peak_tflops: float | None = Field(default=None, gt=0, description="per device, in the training precision")
    assumed_mfu: float | None = Field(
        default=None, gt=0, le=1, description="model FLOPs utilisation for time estimates (default by device)"
    )

    @model_validator(mode="after")
    def _fabric_for_many_nodes(self) -> HardwareSpec:
        if self.nodes > 1 and self.fabric == "none":
            raise ValueError("fabric: nodes > 1 need a network fabric (ethernet, infiniband or nvlink)")
        return self

    @property
    def world_size(self) -> int:
        return self.nodes * self.devices_per_node

    @property
    def fast_fabric(self) -> bool:
        return self.fabric in ("infiniband", "nvlink")

    def mfu(self) -> float:
        """The given MFU, else 0.35 on a GPU (a typical well-tuned dense run) and 0.25 on a CPU,
        where benchmarks/plan_accuracy.py measured 0.1-0.3 for 0.1-4M-parameter models."""
        if self.assumed_mfu is not None:
            return self.assumed_mfu
        return 0.35 if self.device == "cuda" else 0.25

    def peak_flops(self) -> float:
        """Peak FLOP/s of one device: the given figure, a table value by name, or a guess."""
        if self.peak_tflops is not None:
            return self.peak_tflops * 1e12
        if self.device == "cuda":
            for key, tf in _GPU_PEAK_TFLOPS.items():
                if key.lower() in self.name.lower():
                    return tf * 1e12
            return 100e12
        # One process of an AVX2 core: 2 FMA units x 8 fp32 lanes x 2 FLOPs x ~2.5 GHz.
        return 80e9


def _cpu_bf16() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="ignore")
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def _nvidia_present() -> bool:
    return Path("/proc/driver/nvidia/gpus").is_dir() or any(Path("/dev").glob("nvidia[0-9]*"))


def detect_hardware(*, price_per_device_hour: float = 0.0, processes: int | None = None) -> HardwareSpec:
    """This machine as one node. CUDA details come from torch (imported only if a GPU may exist).

    ``processes`` sets the number of CPU training processes on a CPU-only machine (default 1);
    each gets an equal share of RAM and cores.
    """
    if _nvidia_present() or "torch" in sys.modules:
        import torch

        if torch.cuda.is_available():
            n = torch.cuda.device_count()
            props = torch.cuda.get_device_properties(0)
            fabric: Fabric = "nvlink" if n > 1 and _has_nvlink() else "none"
            return HardwareSpec(
                device="cuda",
                name=props.name,
                devices_per_node=n,
                device_memory_gib=round(props.total_memory / 2**30, 2),
                bf16=bool(torch.cuda.is_bf16_supported()),
                fabric=fabric,
                price_per_device_hour=price_per_device_hour,
            )
    import psutil

    procs = processes or 1
    cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    freq = psutil.cpu_freq()
    ghz = (freq.max or freq.current or 2500.0) / 1000 if freq else 2.5
    per_proc_cores = max(1, cores // procs)
    return HardwareSpec(
        device="cpu",
        name=f"cpu x{cores}",
        devices_per_node=procs,
        device_memory_gib=round(psutil.virtual_memory().total / 2**30 / procs, 2),
        bf16=_cpu_bf16(),
        price_per_device_hour=price_per_device_hour,
        peak_tflops=per_proc_cores * 32 * ghz / 1000,
    )


def _has_nvlink() -> bool:
    """NVLink between GPU 0 and 1, asked through NVML when pynvml is installed; else no."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return bool(pynvml.nvmlDeviceGetNvLinkState(handle, 0))
    except Exception:
        return False
