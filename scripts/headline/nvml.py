"""The driver's view of device memory, through NVML (libnvidia-ml, which every NVIDIA
driver installs) by ctypes: no pynvml, no torch. The headline runs read memory here,
because the driver's count holds what the process's own counters leave out (the CUDA
context, the caching allocators' reserves, comfy-aimdo's pages, h3stream's buffers)."""

import ctypes
import os


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class _Process(ctypes.Structure):
    # nvmlProcessInfo_t (v2/v3 layout): pid, usedGpuMemory, gpuInstanceId, computeInstanceId
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class Nvml:
    """One device's memory as the driver counts it. Raises OSError when NVML is absent."""

    def __init__(self, index=0):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self._check(self.lib.nvmlInit_v2(), "nvmlInit_v2")
        self.handle = ctypes.c_void_p()
        self._check(self.lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(self.handle)),
                    "nvmlDeviceGetHandleByIndex_v2")

    def _check(self, rc, what):
        if rc != 0:
            self.lib.nvmlErrorString.restype = ctypes.c_char_p
            raise OSError(f"{what}: NVML error {rc} ({self.lib.nvmlErrorString(rc).decode()})")

    def memory(self):
        """(total, free, used) bytes of the whole device."""
        m = _Memory()
        self._check(self.lib.nvmlDeviceGetMemoryInfo(self.handle, ctypes.byref(m)),
                    "nvmlDeviceGetMemoryInfo")
        return m.total, m.free, m.used

    def pcie_kbps(self):
        """(to the device, from the device) in KB/s over the driver's last ~20 ms window, or
        None where the counter is not supported."""
        out = []
        for counter in (1, 0):  # NVML_PCIE_UTIL_RX_BYTES (into the GPU), _TX_BYTES
            v = ctypes.c_uint()
            if self.lib.nvmlDeviceGetPcieThroughput(self.handle, counter, ctypes.byref(v)) != 0:
                return None
            out.append(v.value)
        return tuple(out)

    def process_used(self, pid=None):
        """Bytes the driver charges to process `pid` (this one by default), or None where
        the driver does not report per-process memory (some virtual machines)."""
        pid = os.getpid() if pid is None else pid
        fn = getattr(self.lib, "nvmlDeviceGetComputeRunningProcesses_v3", None)
        if fn is None:
            return None
        count = ctypes.c_uint(64)
        procs = (_Process * 64)()
        if fn(self.handle, ctypes.byref(count), procs) != 0:
            return None
        for p in procs[:count.value]:
            if p.pid == pid:
                # NVML_VALUE_NOT_AVAILABLE (all ones) where the driver cannot tell
                return None if p.usedGpuMemory >= 2**63 else p.usedGpuMemory
        return 0


def gib(n):
    return None if n is None else round(n / 2**30, 3)
