"""Peaks of a process's memory, sampled on a thread: the device as the driver counts it
(NVML: this process's charge where the driver reports it, and the device's used bytes) and
the host as the kernel counts it (/proc/self/status: anonymous, shared-memory and file-backed
resident pages, locked pages; the cgroup's own peak where the process runs in one). The
mapped checkpoint's pages are file-backed: the host peak reported is anonymous + shared
memory (what a 32 GB machine must hold), the file pages beside it."""

import os
import threading
import time

try:
    from nvml import Nvml, gib
except ImportError:  # imported as scripts.headline.memwatch
    from .nvml import Nvml, gib


def _status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmLck", "VmPin"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def cgroup_dir():
    """This process's cgroup v2 folder, or None."""
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    d = "/sys/fs/cgroup" + line[3:].strip()
                    return d if os.path.isdir(d) else None
    except OSError:
        return None
    return None


def _read_int(path):
    try:
        with open(path) as f:
            v = f.read().strip()
        return None if v == "max" else int(v)
    except (OSError, ValueError):
        return None


class MemWatch:
    """Samples every `period` seconds until stop(); peaks() any time. mark(name) records the
    readings at that moment (e.g. the end of each sampler step)."""

    def __init__(self, period=0.02, device=0, use_nvml=True):
        self.period = period
        self.nvml = None
        self.nvml_error = None
        if use_nvml:
            try:
                self.nvml = Nvml(device)
            except OSError as e:
                self.nvml_error = str(e)
        self.cgroup = cgroup_dir()
        self.base_device_used = self.nvml.memory()[2] if self.nvml else None
        self.peak = {}
        self.marks = {}
        # bytes over the bus, integrated from the driver's PCIe throughput counters
        self.bus = {"to_device": 0.0, "from_device": 0.0}
        self._t_bus = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="memwatch", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join()
        self.sample()

    def reading(self):
        r = dict(_status())
        r["host_anon_shmem"] = r.get("RssAnon", 0) + r.get("RssShmem", 0)
        if self.nvml is not None:
            _total, _free, used = self.nvml.memory()
            r["device_used"] = used
            # what this process added to the device since the watch started (its context
            # included when the watch starts before CUDA is initialised)
            r["device_used_delta"] = used - self.base_device_used
            own = self.nvml.process_used()
            if own is not None:
                r["device_process"] = own
        if self.cgroup:
            cur = _read_int(os.path.join(self.cgroup, "memory.current"))
            if cur is not None:
                r["cgroup_current"] = cur
        return r

    def sample(self):
        r = self.reading()
        with self._lock:
            for k, v in r.items():
                if v is not None and v > self.peak.get(k, -1):
                    self.peak[k] = v
        return r

    def _bus_sample(self):
        rates = self.nvml.pcie_kbps() if self.nvml is not None else None
        now = time.monotonic()
        if rates is not None and self._t_bus is not None:
            dt = now - self._t_bus
            with self._lock:
                self.bus["to_device"] += rates[0] * 1024.0 * dt
                self.bus["from_device"] += rates[1] * 1024.0 * dt
        self._t_bus = now

    def _loop(self):
        while not self._stop.is_set():
            self.sample()
            self._bus_sample()
            time.sleep(self.period)

    def mark(self, name):
        r = self.sample()
        with self._lock:
            self.marks[name] = {k: gib(v) for k, v in r.items()}
            self.marks[name]["bus_gb"] = {k: round(v / 1e9, 2) for k, v in self.bus.items()}
            self.marks[name]["peak_so_far"] = {k: gib(v) for k, v in self.peak.items()}

    def peaks(self):
        with self._lock:
            out = {k: gib(v) for k, v in self.peak.items()}
        if self.cgroup:
            out["cgroup"] = self.cgroup
            out["cgroup_peak"] = gib(_read_int(os.path.join(self.cgroup, "memory.peak")))
            out["cgroup_max"] = gib(_read_int(os.path.join(self.cgroup, "memory.max")))
        if self.nvml_error:
            out["nvml_error"] = self.nvml_error
        return out

    def device_peak(self):
        """The driver's count of this process's peak: its own charge where reported, else
        the device's used bytes above what they were when the watch started."""
        with self._lock:
            v = self.peak.get("device_process", self.peak.get("device_used_delta"))
        return gib(v)
